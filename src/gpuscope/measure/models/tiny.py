"""Tiny Hugging Face configs (hidden 64, vocabulary 256) whose GPU work is negligible, so that a forward's wall time
is the host's: the models the host costs are fitted on (measure/host/overhead.py) and the host probe runs
(measure/host/probe.py)."""

from __future__ import annotations

TINY = {
    "llama": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512},
    "mistral": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512, "sliding_window": 4096},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 512},
}


def layers_key(cfg: dict) -> str:
    """The config key of the decoder-layer count."""
    return "n_layer" if cfg["model_type"] == "gpt2" else "num_hidden_layers"
