"""LoRA adapters: which linear layers a target list names, and the trainable parameters peft adds to them.

LoRA (Hu et al. 2021, arXiv 2106.09685, section 4.1) freezes a weight W (d_out x d_in) and trains
delta W = B A, with A: r x d_in and B: d_out x r. peft's ``LoraConfig`` defaults (``bias="none"``) add exactly
two bias-free ``nn.Linear`` per targeted module (``lora_A``: d_in -> r, ``lora_B``: r -> d_out), so one target
holds r (d_in + d_out) trainable parameters; dropout adds none.

Targets are matched by a module's last name, as peft matches a ``target_modules`` list (a module named
``...self_attn.q_proj`` is hit by ``q_proj``). ``all-linear`` is every ``nn.Linear`` (GPT-2: ``Conv1D``) of the
model except the output layer (lm_head), as peft's ``all-linear`` resolves it. The linear modules are those the
installed transformers (5.x) builds: routed MoE experts are fused 3-D parameters and routers plain parameters
there, not ``nn.Linear``. For Mixtral and DeepSeek-V2/V3, peft (0.21, utils/transformers_weight_conversion.py)
maps the transformers-4 names of the experts and router (Mixtral: w1, w3, w2, gate; DeepSeek: gate_proj, up_proj,
down_proj, gate), which ``all-linear`` includes, to those parameters: the fused gate_up parameter (E x 2I x h) gets
rank 2r (r per half), the down parameter (E x h x I) rank r, each as lora_A (rank x E, d_in) and lora_B (d_out,
rank x E); the router weight (E x h) rank r. Those names then leave the module targets, so DeepSeek's dense-layer
MLPs and shared experts (also named gate_proj, up_proj, down_proj) get no adapter. Qwen2-MoE is not converted:
its experts and router get none. tests/test_lora_params_peft.py checks every count against
``peft.get_peft_model`` on the meta device.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.specs.model import ModelSpec

ALL_LINEAR = "all-linear"
_DEEPSEEK_EXPERTS = {"gate": "router", "gate_proj": "gate_up", "up_proj": "gate_up", "down_proj": "down"}
# peft's _MOE_TARGET_MODULE_MAPPING for the families transformers 5 fuses (module docstring)
PEFT_EXPERT_NAMES = {"mixtral": {"gate": "router", "w1": "gate_up", "w3": "gate_up", "w2": "down"},
                     "deepseek_v2": _DEEPSEEK_EXPERTS, "deepseek_v3": _DEEPSEEK_EXPERTS}


@dataclass(frozen=True)
class LinearSite:
    """One kind of linear module in the decoder layers: its last name, shape and how many layers hold it."""

    name: str
    n_in: int
    n_out: int
    count: int  # layers holding one such module
    part: str  # "attention" or "mlp"


def _attention_sites(m: ModelSpec) -> list[tuple[str, int, int]]:
    h = m.hidden_size
    if m.mla:  # DeepseekV2/V3Attention (modeling_deepseek_v2.py)
        a = m.mla
        qk = m.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
        q = ([("q_a_proj", h, a.q_lora_rank), ("q_b_proj", a.q_lora_rank, qk)] if a.q_lora_rank
             else [("q_proj", h, qk)])
        return q + [("kv_a_proj_with_mqa", h, a.kv_lora_rank + a.qk_rope_head_dim),
                    ("kv_b_proj", a.kv_lora_rank, m.num_heads * (a.qk_nope_head_dim + a.v_head_dim)),
                    ("o_proj", m.num_heads * a.v_head_dim, h)]
    qkv = m.q_dim + 2 * m.kv_dim
    if m.family == "gpt2":  # GPT2Attention: fused c_attn, then c_proj (Conv1D)
        return [("c_attn", h, qkv), ("c_proj", m.q_dim, h)]
    if m.family == "gpt_neox":
        return [("query_key_value", h, qkv), ("dense", m.q_dim, h)]
    if m.family == "phi3":
        return [("qkv_proj", h, qkv), ("o_proj", m.q_dim, h)]
    return [("q_proj", h, m.q_dim), ("k_proj", h, m.kv_dim), ("v_proj", h, m.kv_dim), ("o_proj", m.q_dim, h)]


def _dense_mlp_sites(m: ModelSpec, width: int) -> list[tuple[str, int, int]]:
    h = m.hidden_size
    if m.family == "gpt2":
        return [("c_fc", h, width), ("c_proj", width, h)]
    if m.family == "gpt_neox":
        return [("dense_h_to_4h", h, width), ("dense_4h_to_h", width, h)]
    if m.family == "phi3":  # Phi3MLP: one gate_up_proj of 2 x width
        return [("gate_up_proj", h, 2 * width), ("down_proj", width, h)]
    if m.gated_mlp:
        return [("gate_proj", h, width), ("up_proj", h, width), ("down_proj", width, h)]
    return [("up_proj", h, width), ("down_proj", width, h)]


def _moe_mlp_sites(m: ModelSpec) -> list[tuple[str, int, int]]:
    """An MoE layer's nn.Linear modules: the shared expert(s) (one MLP of the summed width) and Qwen2-MoE's gate."""
    e = m.moe
    out = _dense_mlp_sites(m, e.shared_intermediate_size) if e.shared_intermediate_size else []
    if e.shared_expert_gate:
        out.append(("shared_expert_gate", m.hidden_size, 1))
    return out


def layer_sites(m: ModelSpec, index: int) -> list[LinearSite]:
    """The linear modules of decoder layer ``index`` (count 1 each)."""
    mlp = _moe_mlp_sites(m) if (m.is_moe and index in m.moe_layers) else _dense_mlp_sites(m, m.intermediate_size)
    return [LinearSite(name, n_in, n_out, 1, part)
            for part, sites in (("attention", _attention_sites(m)), ("mlp", mlp)) for name, n_in, n_out in sites]


def linear_sites(m: ModelSpec) -> list[LinearSite]:
    """Every linear module of the decoder layers (not the LM head), grouped by (name, shape)."""
    counts: dict[tuple[str, int, int, str], int] = {}
    for i in range(m.num_layers):
        for s in layer_sites(m, i):
            key = (s.name, s.n_in, s.n_out, s.part)
            counts[key] = counts.get(key, 0) + 1
    return [LinearSite(name, n_in, n_out, c, part) for (name, n_in, n_out, part), c in counts.items()]


def target_names(m: ModelSpec) -> tuple[str, ...]:
    """The module names a target list may use for this model, in layer order (+ peft's expert names)."""
    seen: list[str] = []
    for s in linear_sites(m):
        if s.name not in seen:
            seen.append(s.name)
    extra = PEFT_EXPERT_NAMES.get(m.family, {}) if m.is_moe else {}
    return tuple(seen) + tuple(n for n in extra if n not in seen)


def parse_targets(m: ModelSpec, targets: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``all-linear`` or a comma-separated list of module names, checked against this model's linear modules."""
    names = [t.strip() for t in (targets.split(",") if isinstance(targets, str) else targets) if t.strip()]
    allowed = target_names(m)
    if names == [ALL_LINEAR]:
        return allowed
    if not names:
        raise UserError(f"--lora-targets is empty; use {ALL_LINEAR} or some of {', '.join(allowed)}.")
    for n in names:
        if n not in allowed:
            raise UserError(f"--lora-targets: {m.name} has no linear module named '{n}'; use {ALL_LINEAR} or "
                            f"some of {', '.join(allowed)}.")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Targets:
    """What peft adapts: decoder-layer linear modules, and (Mixtral, DeepSeek) fused expert parameters."""

    sites: tuple[LinearSite, ...]
    experts: frozenset[str]  # of "router", "gate_up", "down"


def resolve_targets(m: ModelSpec, targets=ALL_LINEAR) -> Targets:
    names = set(parse_targets(m, targets))
    mapping = PEFT_EXPERT_NAMES.get(m.family, {}) if m.is_moe else {}
    experts = {mapping[n] for n in names if n in mapping}
    halves = [n for n, v in mapping.items() if v == "gate_up"]
    if "gate_up" in experts and not all(h in names for h in halves):
        raise UserError(f"--lora-targets: {' and '.join(halves)} are fused in {m.name}'s experts; name both or "
                        "neither.")
    modules = names - set(mapping)
    return Targets(tuple(s for s in linear_sites(m) if s.name in modules), frozenset(experts))


def expert_adapter_params(m: ModelSpec, r: int, experts) -> int:
    """Adapter parameters on the fused expert parameters of all MoE layers (module docstring)."""
    if not experts:
        return 0
    e, h = m.moe, m.hidden_size
    width, n = e.expert_intermediate_size, e.num_experts
    per_layer = {"router": r * (h + n), "gate_up": 2 * r * n * (h + 2 * width), "down": r * n * (width + h)}
    return len(m.moe_layers) * sum(per_layer[x] for x in experts)


def check_rank(r) -> int:
    if not isinstance(r, int) or isinstance(r, bool) or r <= 0:
        raise UserError(f"--lora-r must be a positive integer, got {r!r}.")
    return r


def lora_params(m: ModelSpec, r: int, targets=ALL_LINEAR) -> int:
    """Trainable parameters peft adds: r (d_in + d_out) per targeted module, + the experts' (module docstring)."""
    check_rank(r)
    t = resolve_targets(m, targets)
    return sum(r * (s.n_in + s.n_out) * s.count for s in t.sites) + expert_adapter_params(m, r, t.experts)


def targeted_weight_params(m: ModelSpec, targets=ALL_LINEAR) -> int:
    """Parameters of the frozen weights the module adapters sit beside (no biases)."""
    return sum(s.n_in * s.n_out * s.count for s in resolve_targets(m, targets).sites)


@dataclass(frozen=True)
class LoraShape:
    """One LoRA plan's sizes: rank, dropout, trainable parameters and the targeted modules of each layer."""

    r: int
    dropout: float
    trainable: int
    sites_per_layer: tuple[tuple[LinearSite, ...], ...]
    targets: tuple[str, ...]


def lora_shape(m: ModelSpec, r: int, targets=ALL_LINEAR, dropout: float = 0.0) -> LoraShape:
    check_rank(r)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise UserError(f"--lora-dropout must be in [0, 1), got {dropout!r}.")
    t = resolve_targets(m, targets)
    chosen = {s.name for s in t.sites}
    per_layer = tuple(tuple(s for s in layer_sites(m, i) if s.name in chosen) for i in range(m.num_layers))
    return LoraShape(r, float(dropout), lora_params(m, r, targets), per_layer, parse_targets(m, targets))
