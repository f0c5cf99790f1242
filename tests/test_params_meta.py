"""Parameter counts against real transformers modules built on the meta device (shared/DESIGN.md, Tests).

For a tiny config of every supported family, and for every preset at its real size, build the transformers
``AutoModelForCausalLM`` on the meta device (no memory is allocated) and require
``count_params(spec_from_config(cfg)).total == sum(p.numel() for p in model.parameters())`` exactly.
A mismatch reports the parts (embedding, attention, mlp, norms, lm_head) that differ.
Each preset's count is also checked against the figure it publishes (``_gpuscope.params_published``).
"""

from __future__ import annotations

import re

import pytest

from gpuscope.estimate.params import count_params
from gpuscope.specs.hf_config import spec_from_config
from gpuscope.specs.models import preset_config, preset_meta, preset_names

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

transformers.logging.set_verbosity_error()

# Fields of a published config.json that are not architecture: a quantization recipe (the FP8 loader is not
# wanted on the meta device) and remote-code pointers (the families here are built into transformers).
_NOT_ARCHITECTURE = ("quantization_config", "auto_map")
# Layers kept when a preset is rebuilt smaller (see _maybe_shrink); the count is then compared for the same
# reduced config on both sides, so the check stays exact.
_SHRUNK_LAYERS = 4
_SHRINK_ABOVE_PARAMS = None  # meta builds of all presets take well under a second each; set to e.g. 300e9 to shrink


# ---- helpers ---------------------------------------------------------------------------------------------------
def build_meta(cfg: dict):
    """The real transformers module for ``cfg`` on the meta device; skips if this transformers lacks the family."""
    cfg = {k: v for k, v in cfg.items() if k not in _NOT_ARCHITECTURE and not k.startswith("_gpuscope")}
    try:
        config = AutoConfig.for_model(**cfg)
    except (KeyError, ValueError) as exc:
        pytest.skip(f"transformers {transformers.__version__} cannot build model_type {cfg.get('model_type')!r}: {exc}")
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


_LAYER = re.compile(r"(?:^|\.)(?:layers|h)\.\d+\.([^.]+)")


def _part(name: str) -> str:
    """Which ParamCounts field a transformers parameter name belongs to."""
    m = _LAYER.search(name)
    if m:
        block = m.group(1)
        if block in ("self_attn", "attn", "attention"):
            return "attention"  # includes MLA's q_a/kv_a norms and Qwen3's q/k norms, as count_params does
        if block in ("mlp", "block_sparse_moe"):
            return "mlp"
        return "norms"
    if name.startswith("lm_head") or name.endswith("embed_out.weight"):
        return "lm_head"
    if re.search(r"(embed_tokens|wte|wpe|embed_in)\.weight$", name):
        return "embedding"
    return "norms"  # final norm


def real_parts(model) -> dict[str, int]:
    parts = dict.fromkeys(("embedding", "attention", "mlp", "norms", "lm_head"), 0)
    for name, p in model.named_parameters():  # tied weights are yielded once, under the embedding's name
        parts[_part(name)] += p.numel()
    return parts


def assert_same_count(cfg: dict, label: str) -> None:
    model = build_meta(cfg)
    real = sum(p.numel() for p in model.parameters())
    counts = count_params(spec_from_config(cfg, name=label))
    if counts.total != real:
        theirs = real_parts(model)
        ours = {k: getattr(counts, k) for k in theirs}
        diff = {k: f"gpuscope {ours[k]:,} vs transformers {theirs[k]:,}" for k in theirs if ours[k] != theirs[k]}
        pytest.fail(f"{label}: gpuscope counts {counts.total:,} parameters, transformers builds {real:,} "
                    f"({counts.total - real:+,}); differing parts: {diff}")


# ---- tiny configs, one or more per family ------------------------------------------------------------------------
def _base(**kw) -> dict:
    cfg = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=101, max_position_embeddings=128)
    cfg.update(kw)
    return cfg


def _moe_deepseek(model_type: str, **kw) -> dict:
    cfg = _base(model_type=model_type, num_hidden_layers=3, num_key_value_heads=4, intermediate_size=96,
                moe_intermediate_size=24, n_routed_experts=4, n_shared_experts=2, num_experts_per_tok=2,
                first_k_dense_replace=1, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=12,
                n_group=1, topk_group=1)
    cfg.update(kw)
    return cfg


TINY = {
    "llama-gqa": _base(model_type="llama"),
    "llama-bias-headdim": _base(model_type="llama", attention_bias=True, mlp_bias=True, head_dim=24),
    "llama-tied-mha": _base(model_type="llama", num_key_value_heads=4, tie_word_embeddings=True),
    "mistral": _base(model_type="mistral", sliding_window=32),
    # MistralAttention/MistralMLP hard-code bias=False (modeling_mistral.py): attention_bias must be ignored
    "mistral-bias-ignored": _base(model_type="mistral", attention_bias=True, mlp_bias=True),
    # MistralConfig defaults num_key_value_heads to 8 (configuration_mistral.py)
    "mistral-default-kv": _base(model_type="mistral", num_attention_heads=16, num_key_value_heads=None),
    "mixtral": _base(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2),
    "qwen2": _base(model_type="qwen2"),
    "qwen2-tied": _base(model_type="qwen2", tie_word_embeddings=True, use_sliding_window=True, sliding_window=16,
                        max_window_layers=1),
    "qwen2_moe": _base(model_type="qwen2_moe", num_hidden_layers=6, num_experts=4, num_experts_per_tok=2,
                       moe_intermediate_size=24, shared_expert_intermediate_size=48, decoder_sparse_step=2,
                       mlp_only_layers=[3]),
    "qwen2_moe-no-qkv-bias": _base(model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2,
                                   moe_intermediate_size=24, shared_expert_intermediate_size=48, qkv_bias=False),
    "qwen3": _base(model_type="qwen3", head_dim=24),
    # Qwen3Config defaults head_dim to 128, not hidden/heads (configuration_qwen3.py)
    "qwen3-default-headdim-bias": _base(model_type="qwen3", head_dim=None, attention_bias=True, mlp_bias=True),
    "gemma": _base(model_type="gemma", head_dim=32, num_key_value_heads=1),
    # GemmaConfig defaults head_dim to 256; GemmaAttention uses attention_bias on q/k/v/o (modeling_gemma.py)
    "gemma-default-headdim-bias": _base(model_type="gemma", head_dim=None, attention_bias=True),
    "gemma2": _base(model_type="gemma2", head_dim=16, num_hidden_layers=5),
    # Gemma2Config defaults: num_key_value_heads 4, head_dim 256 (configuration_gemma2.py)
    "gemma2-defaults": _base(model_type="gemma2", num_attention_heads=8, num_key_value_heads=None, head_dim=None),
    "gemma2-untied-bias": _base(model_type="gemma2", head_dim=16, tie_word_embeddings=False, attention_bias=True),
    "phi3": _base(model_type="phi3", pad_token_id=0),  # Phi3Config's pad_token_id 32000 needs a bigger vocab
    "deepseek_v2": _moe_deepseek("deepseek_v2", q_lora_rank=None),
    # DeepseekV2MLP (dense layers and shared experts) uses config.mlp_bias (modeling_deepseek_v2.py)
    "deepseek_v2-bias": _moe_deepseek("deepseek_v2", q_lora_rank=None, attention_bias=True, mlp_bias=True),
    "deepseek_v2-q-lora": _moe_deepseek("deepseek_v2", q_lora_rank=24),
    "deepseek_v3": _moe_deepseek("deepseek_v3", q_lora_rank=24, n_shared_experts=1),
    "deepseek_v3-bias": _moe_deepseek("deepseek_v3", q_lora_rank=24, n_shared_experts=1, attention_bias=True),
    "gpt2": dict(model_type="gpt2", n_embd=64, n_head=4, n_layer=3, n_positions=96, vocab_size=101),
    "gpt2-inner-untied": dict(model_type="gpt2", n_embd=64, n_head=4, n_layer=2, n_positions=96, vocab_size=101,
                              n_inner=200, tie_word_embeddings=False),
    "gpt_neox": _base(model_type="gpt_neox", num_key_value_heads=None),
    "gpt_neox-tied": _base(model_type="gpt_neox", num_key_value_heads=None, tie_word_embeddings=True),
    "gpt_neox-no-attn-bias": _base(model_type="gpt_neox", num_key_value_heads=None, attention_bias=False,
                                   use_parallel_residual=False),
}


def _clean(cfg: dict) -> dict:
    """None means 'field absent', so the config class default applies on both sides."""
    return {k: v for k, v in cfg.items() if v is not None or k == "q_lora_rank"}


@pytest.mark.parametrize("label", sorted(TINY))
def test_tiny_config_matches_transformers(label):
    assert_same_count(_clean(TINY[label]), label)


def test_every_supported_family_has_a_tiny_config():
    from gpuscope.specs.hf_config import SUPPORTED_FAMILIES

    assert set(SUPPORTED_FAMILIES) <= {c["model_type"] for c in TINY.values()}


# ---- presets at their real sizes ---------------------------------------------------------------------------------
def _maybe_shrink(cfg: dict) -> dict:
    """Fewer layers for the largest presets when _SHRINK_ABOVE_PARAMS is set (same config on both sides)."""
    if _SHRINK_ABOVE_PARAMS is None or count_params(spec_from_config(cfg)).total <= _SHRINK_ABOVE_PARAMS:
        return cfg
    key = "n_layer" if cfg.get("model_type") == "gpt2" else "num_hidden_layers"
    return dict(cfg, **{key: _SHRUNK_LAYERS})


@pytest.mark.parametrize("name", preset_names())
def test_preset_matches_transformers(name):
    assert_same_count(_maybe_shrink(preset_config(name)), name)


_UNITS = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def _published(text: str) -> tuple[float, int]:
    """'8.03B' -> (8.03e9, 2 decimals printed)."""
    m = re.fullmatch(r"\s*(\d+(?:\.(\d+))?)\s*([KMBT])\s*", text)
    assert m, f"params_published {text!r} must look like '8.03B'"
    return float(m.group(1)) * _UNITS[m.group(3)], len(m.group(2) or "")


@pytest.mark.parametrize("name", preset_names())
def test_preset_count_near_published(name):
    """Within 2% of the published figure, or equal to it at the precision it is printed with.

    The second clause is for figures rounded hard in their source: Narayanan et al. 2021 Table 1 prints 1.7B for
    a model whose own formula gives 1.652B (-2.8%).
    """
    text = preset_meta(name).get("params_published")
    if not text:
        pytest.skip(f"{name} publishes no parameter count")
    value, decimals = _published(text)
    unit = _UNITS[text.strip()[-1]]
    total = count_params(spec_from_config(preset_config(name))).total
    rel = (total - value) / value
    assert abs(rel) <= 0.02 or round(total / unit, decimals) == round(value / unit, decimals), (
        f"{name}: gpuscope counts {total / unit:.3f}{text.strip()[-1]}, published {text} ({rel:+.1%})"
    )


def test_preset_metadata_is_well_formed():
    seen: dict[str, str] = {n.lower(): n for n in preset_names()}
    for name in preset_names():
        assert name == name.lower(), f"preset file stems are lower case: {name}"
        meta = preset_meta(name)
        assert meta.get("source"), f"{name}: _gpuscope.source is missing"
        for alias in meta.get("aliases", []):
            assert "/" not in alias, f"{name}: alias {alias!r} would be read as a path"
            assert alias.lower() not in seen, f"{name}: alias {alias!r} already names {seen[alias.lower()]}"
            seen[alias.lower()] = name
