"""Read a Hugging Face ``config.json`` into a ModelSpec, without network access or remote code.

Each family's field names and defaults follow the matching ``configuration_*.py`` and ``modeling_*.py`` in
transformers; the parameter counts they imply are checked against real modules built on the meta device
(tests/test_params_meta.py).
"""

from __future__ import annotations

from pathlib import Path

from gpuscope.errors import UserError
from gpuscope.specs.model import MLASpec, ModelSpec, MoESpec
from gpuscope.specs.numbers import MAX_LAYERS, count, read_json_object

SUPPORTED_FAMILIES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "gemma", "gemma2", "phi3",
    "deepseek_v2", "deepseek_v3", "gpt2", "gpt_neox",
)


# Defaults of the configuration_*.py classes where they differ from "one KV head per head" and "hidden / heads":
# a config.json that leaves the field out gets these from transformers, so it must get them here too.
# (A field written as null falls back to heads or hidden/heads in those classes, as below.)
_DEFAULT_KV_HEADS = {  # configuration_mistral.py, _mixtral, _gemma, _gemma2, _qwen2, _qwen2_moe, _qwen3
    "mistral": 8, "mixtral": 8, "gemma": 16, "gemma2": 4, "qwen2": 32, "qwen2_moe": 16, "qwen3": 32,
}
_DEFAULT_HEAD_DIM = {"gemma": 256, "gemma2": 256, "qwen3": 128}  # configuration_gemma.py, _gemma2, _qwen3


def load_config_file(path: Path) -> dict:
    """Read config.json (or a directory holding one); errors are one sentence."""
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise UserError(f"--model: no config.json at '{path}'.")
    return read_json_object(path)


def _get(cfg: dict, *names, default=None, required: bool = True):
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    if default is not None or not required:
        return default
    raise UserError(f"--model: config has no '{names[0]}' field, which a {cfg.get('model_type')} model needs.")


def _pos_int(cfg: dict, value, name: str, minimum: int = 1) -> int:
    """A count of the config: an integer (not a bool), finite, below 2**31 (layers: at most MAX_LAYERS)."""
    top = MAX_LAYERS if name in ("num_hidden_layers", "n_layer") else None
    return count(value, f"--model: config field '{name}'", minimum=minimum, **({"maximum": top} if top else {}))


def _opt_int(cfg: dict, name: str, default: int, minimum: int = 1) -> int:
    """An optional count: absent or null gives ``default``."""
    value = cfg.get(name)
    return default if value is None else _pos_int(cfg, value, name, minimum)


def spec_from_config(cfg: dict, name: str = "", source: str = "") -> ModelSpec:
    """Normalise one HF config dict into a ModelSpec."""
    family = cfg.get("model_type")
    if family not in SUPPORTED_FAMILIES:
        raise UserError(
            f"--model: model_type {family!r} is not supported; supported types are {', '.join(SUPPORTED_FAMILIES)}."
        )
    if family == "gpt2":
        return _gpt2(cfg, name, source)
    if family == "gpt_neox":
        return _neox(cfg, name, source)
    kw = _shape(cfg, family, name, source)
    _layer_options(kw, cfg, family)
    _sliding_window(kw, cfg, family)
    notes: list[str] = []
    if family == "mixtral":
        _mixtral_experts(kw, cfg)
    elif family == "qwen2_moe":
        _qwen2_moe_experts(kw, cfg)
    elif family in ("deepseek_v2", "deepseek_v3"):
        _deepseek(kw, cfg, family, notes)
    kw["notes"] = tuple(notes)
    return ModelSpec(**kw)


def _shape(cfg: dict, family: str, name: str, source: str) -> dict:
    """The ModelSpec fields every Llama-like family has (widths, heads, vocabulary, context), each checked."""
    hidden = _pos_int(cfg, _get(cfg, "hidden_size"), "hidden_size")
    layers = _pos_int(cfg, _get(cfg, "num_hidden_layers"), "num_hidden_layers")
    heads = _pos_int(cfg, _get(cfg, "num_attention_heads"), "num_attention_heads")
    kv_default = _DEFAULT_KV_HEADS.get(family, heads) if "num_key_value_heads" not in cfg else heads
    kv_heads = _pos_int(cfg, _get(cfg, "num_key_value_heads", default=kv_default), "num_key_value_heads")
    if heads % kv_heads:
        raise UserError(f"--model: num_attention_heads ({heads}) must be a multiple of num_key_value_heads "
                        f"({kv_heads}).")
    head_dim = cfg.get("head_dim") if "head_dim" in cfg else _DEFAULT_HEAD_DIM.get(family)
    head_dim = head_dim or hidden // heads
    head_dim = _pos_int(cfg, head_dim, "head_dim")
    inter = _pos_int(cfg, _get(cfg, "intermediate_size"), "intermediate_size")
    vocab = _pos_int(cfg, _get(cfg, "vocab_size"), "vocab_size")
    max_pos = _opt_int(cfg, "max_position_embeddings", 4096)
    tie = bool(cfg.get("tie_word_embeddings", family in ("gemma", "gemma2")))
    return dict(
        name=name or cfg.get("_name_or_path") or family,
        family=family,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        tie_embeddings=tie,
        activation=str(cfg.get("hidden_act") or cfg.get("hidden_activation") or "silu"),
        source=source,
    )


def _layer_options(kw: dict, cfg: dict, family: str) -> None:
    """Biases, q/k norms, extra norms, eager attention and the activation, as each family's modeling file builds
    its layers."""
    # Biases as the modeling_*.py files build them: attention_bias puts a bias on q/k/v/o in Llama, Qwen3, Gemma
    # and Gemma-2; Mistral, Mixtral and Phi-3 hard-code bias=False whatever the config says (modeling_mistral.py,
    # modeling_mixtral.py, modeling_phi3.py); only LlamaMLP reads mlp_bias (Qwen3MLP, MistralMLP: bias=False).
    if family in ("llama", "qwen3", "gemma", "gemma2"):
        kw["qkv_bias"] = kw["out_bias"] = bool(cfg.get("attention_bias", False))
    if family == "llama":
        kw["mlp_bias"] = bool(cfg.get("mlp_bias", False))
    if family == "qwen3":
        kw["qk_norm"] = True
    if family == "qwen2":
        kw["qkv_bias"] = True  # Qwen2Attention: q/k/v bias=True hard-coded, o_proj none (modeling_qwen2.py)
    if family == "qwen2_moe":
        kw["qkv_bias"] = bool(cfg.get("qkv_bias", True))  # Qwen2MoeAttention reads config.qkv_bias; o_proj none
    if family == "gemma2":
        kw["norms_per_layer"] = 4  # input, post_attention, pre_feedforward, post_feedforward
        # attention logit soft-capping has no SDPA kernel: transformers runs eager attention (q k^T, tanh
        # soft-cap, fp32 softmax, p v), materialising b x heads x s^2 scores
        kw["eager_attention"] = True
    if family in ("gemma", "gemma2"):
        kw["activation"] = str(cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh")


def _sliding_window(kw: dict, cfg: dict, family: str) -> None:
    """Sliding-window layers and their window, where the family applies the config's ``sliding_window``."""
    layers = kw["num_layers"]
    # Sliding-window attention: Mistral (all layers when set), Qwen2 (only if use_sliding_window, from
    # max_window_layers on), Gemma-2 (every other layer), Phi-3 (all layers when set).
    window = cfg.get("sliding_window")
    if window is not None and window is not False:  # null (or false) is no window; else a window of >= 1 token
        window = _pos_int(cfg, window, "sliding_window")
        if family in ("qwen2", "qwen2_moe", "qwen3"):
            if cfg.get("use_sliding_window"):
                mwl = _opt_int(cfg, "max_window_layers", layers, minimum=0)
                kw["sliding_window"], kw["sliding_window_layers"] = window, max(0, layers - mwl)
        elif family == "gemma2":
            kw["sliding_window"], kw["sliding_window_layers"] = window, (layers + 1) // 2
        elif family in ("mistral", "mixtral", "phi3"):
            kw["sliding_window"], kw["sliding_window_layers"] = window, layers
    if kw.get("sliding_window_layers") == 0:
        kw["sliding_window"] = None


def _top_k(cfg: dict, experts: int, default: int | None = None) -> int:
    """num_experts_per_tok: a positive integer, at most the routed experts a token can be sent to."""
    k = _pos_int(cfg, _get(cfg, "num_experts_per_tok", default=default), "num_experts_per_tok")
    if k > experts:
        raise UserError(f"--model: config field 'num_experts_per_tok' ({k}) exceeds the {experts} routed experts "
                        f"a token can be sent to.")
    return k


def _mixtral_experts(kw: dict, cfg: dict) -> None:
    """Mixtral: every layer's MLP is a top-k mixture of ``num_local_experts`` experts of intermediate_size."""
    layers, inter = kw["num_layers"], kw["intermediate_size"]
    e = _pos_int(cfg, _get(cfg, "num_local_experts"), "num_local_experts")
    kw["moe"] = MoESpec(num_experts=e, experts_per_token=_top_k(cfg, e, default=2),
                        expert_intermediate_size=inter)
    kw["moe_layers"] = tuple(range(layers))


def _qwen2_moe_experts(kw: dict, cfg: dict) -> None:
    """Qwen2-MoE: routed experts plus one gated shared expert, on every decoder_sparse_step-th layer not listed in
    mlp_only_layers."""
    layers = kw["num_layers"]
    e = _pos_int(cfg, _get(cfg, "num_experts"), "num_experts")
    shared = _opt_int(cfg, "shared_expert_intermediate_size", 0, minimum=0)
    kw["moe"] = MoESpec(num_experts=e, experts_per_token=_top_k(cfg, e, default=4),
                        expert_intermediate_size=_pos_int(cfg, _get(cfg, "moe_intermediate_size"),
                                                          "moe_intermediate_size"),
                        shared_intermediate_size=shared, num_shared_experts=1 if shared else 0,
                        shared_expert_gate=bool(shared))
    step = _opt_int(cfg, "decoder_sparse_step", 1)
    only_mlp = cfg.get("mlp_only_layers") or []
    if not isinstance(only_mlp, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only_mlp):
        raise UserError("--model: config field 'mlp_only_layers' must be a list of layer indices.")
    only_mlp = set(only_mlp)
    kw["moe_layers"] = tuple(i for i in range(layers) if i not in only_mlp and (i + 1) % step == 0)


def _deepseek(kw: dict, cfg: dict, family: str, notes: list[str]) -> None:
    """DeepSeek-V2/V3: routed + shared experts after the first dense layers, and multi-head latent attention."""
    layers, heads = kw["num_layers"], kw["num_heads"]
    e = _opt_int(cfg, "n_routed_experts", 0, minimum=0)
    if e:
        shared_n = _opt_int(cfg, "n_shared_experts", 0, minimum=0)
        mi = _pos_int(cfg, _get(cfg, "moe_intermediate_size"), "moe_intermediate_size")
        kw["moe"] = MoESpec(
            num_experts=e, experts_per_token=_top_k(cfg, e),
            expert_intermediate_size=mi, num_shared_experts=shared_n, shared_intermediate_size=shared_n * mi,
            # DeepSeek-V3's e_score_correction_bias is an nn.Buffer in transformers (DeepseekV3TopkRouter,
            # modeling_deepseek_v3.py), not a parameter (the remote code made it one): 0 parameters here.
            router_bias_params=0,
        )
        k_dense = _opt_int(cfg, "first_k_dense_replace", 0, minimum=0)
        freq = _opt_int(cfg, "moe_layer_freq", 1)
        kw["moe_layers"] = tuple(i for i in range(layers) if i >= k_dense and i % freq == 0)
    q_lora = cfg.get("q_lora_rank")
    kw["mla"] = MLASpec(
        q_lora_rank=_pos_int(cfg, q_lora, "q_lora_rank") if q_lora is not None else None,
        **{f: _pos_int(cfg, _get(cfg, f), f, minimum=0 if f == "qk_nope_head_dim" else 1)
           for f in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")},
    )
    kw["qkv_bias"] = kw["out_bias"] = bool(cfg.get("attention_bias", False))
    if family == "deepseek_v2":  # DeepseekV2MLP (dense layers and shared experts) reads config.mlp_bias
        kw["mlp_bias"] = bool(cfg.get("mlp_bias", False))
    kw["head_dim"] = kw["mla"].v_head_dim
    kw["num_kv_heads"] = heads  # MLA decompresses K and V per head
    if cfg.get("num_nextn_predict_layers"):
        notes.append("multi-token-prediction layers of the checkpoint are not counted (transformers does not "
                     "build them)")


def _gpt2(cfg: dict, name: str, source: str) -> ModelSpec:
    hidden = _pos_int(cfg, _get(cfg, "n_embd", "hidden_size"), "n_embd")
    heads = _pos_int(cfg, _get(cfg, "n_head", "num_attention_heads"), "n_head")
    return ModelSpec(
        name=name or cfg.get("_name_or_path") or "gpt2", family="gpt2", hidden_size=hidden,
        num_layers=_pos_int(cfg, _get(cfg, "n_layer", "num_hidden_layers"), "n_layer"),
        num_heads=heads, num_kv_heads=heads, head_dim=_pos_int(cfg, hidden // heads, "hidden_size / heads"),
        intermediate_size=_opt_int(cfg, "n_inner", 4 * hidden),
        vocab_size=_pos_int(cfg, _get(cfg, "vocab_size"), "vocab_size"),
        max_position_embeddings=_pos_int(cfg, _get(cfg, "n_positions", "max_position_embeddings", default=1024),
                                         "n_positions"),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)), gated_mlp=False, norm="layernorm",
        qkv_bias=True, out_bias=True, mlp_bias=True, learned_positions=True,
        activation=str(cfg.get("activation_function", "gelu_new")), source=source,
    )


def _neox(cfg: dict, name: str, source: str) -> ModelSpec:
    hidden = _pos_int(cfg, _get(cfg, "hidden_size"), "hidden_size")
    heads = _pos_int(cfg, _get(cfg, "num_attention_heads"), "num_attention_heads")
    return ModelSpec(
        name=name or cfg.get("_name_or_path") or "gpt_neox", family="gpt_neox", hidden_size=hidden,
        num_layers=_pos_int(cfg, _get(cfg, "num_hidden_layers"), "num_hidden_layers"),
        num_heads=heads, num_kv_heads=heads, head_dim=_pos_int(cfg, hidden // heads, "hidden_size / heads"),
        intermediate_size=_opt_int(cfg, "intermediate_size", 4 * hidden),
        vocab_size=_pos_int(cfg, _get(cfg, "vocab_size"), "vocab_size"),
        max_position_embeddings=_opt_int(cfg, "max_position_embeddings", 2048),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)), gated_mlp=False, norm="layernorm",
        qkv_bias=bool(cfg.get("attention_bias", True)), out_bias=bool(cfg.get("attention_bias", True)),
        mlp_bias=True, parallel_residual=bool(cfg.get("use_parallel_residual", True)),
        activation=str(cfg.get("hidden_act", "gelu")), source=source,
    )
