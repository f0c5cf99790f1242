"""Parameter counts, exact per component, and the matmul parameters a token touches.

Counts follow the module layout transformers builds for each family (tests/test_params_meta.py builds the real
modules on the meta device and compares ``sum(p.numel())``). Megatron's closed form for a GPT block,
P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) (Narayanan et al. 2021, eq. in section 5.1), is the special case of
``gpt2``-style layers with learned positions; tests/test_validation_published.py checks it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

from gpuscope.specs.model import ModelSpec


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one decoder layer, split by what they do."""

    attention: int  # q/k/v/o projections (+ MLA down/up projections and their norms, qk norms), with biases
    mlp: int  # dense MLP, or the MoE block (router + all experts + shared experts)
    norms: int
    expert_params: int = 0  # routed experts only (part of mlp)
    active_mlp: int = 0  # MLP parameters one token multiplies: dense MLP, or router + top-k experts + shared

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.norms


@dataclass(frozen=True)
class ParamCounts:
    embedding: int  # token (+ learned position) embeddings
    attention: int
    mlp: int  # dense MLPs and MoE blocks, all layers
    norms: int  # all layer norms and the final norm
    lm_head: int  # 0 when tied to the embedding
    routed_experts: int  # part of mlp
    active_mlp: int  # MLP parameters touched per token, all layers
    lm_head_matmul: int  # V x h: the output projection multiplies a token even when tied

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.mlp + self.norms + self.lm_head

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - self.lm_head

    @property
    def active(self) -> int:
        """Parameters used by one token (MoE: top-k experts only), embedding and head included."""
        return self.total - self.mlp + self.active_mlp

    @property
    def matmul_active(self) -> int:
        """Weights one token multiplies: all projections and active experts plus the LM head; no norms, no lookup."""
        return self.attention + self.active_mlp + self.lm_head_matmul

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(total=self.total, non_embedding=self.non_embedding, active=self.active)
        return d


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def attention_params(m: ModelSpec) -> int:
    h = m.hidden_size
    if m.mla:
        a = m.mla
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = _linear(h, a.q_lora_rank, m.qkv_bias) + a.q_lora_rank + a.q_lora_rank * m.num_heads * qk_head
        else:
            q = h * m.num_heads * qk_head
        kv = (_linear(h, a.kv_lora_rank + a.qk_rope_head_dim, m.qkv_bias) + a.kv_lora_rank
              + a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim))
        o = _linear(m.num_heads * a.v_head_dim, h, m.out_bias)
        return q + kv + o
    q = _linear(h, m.q_dim, m.qkv_bias)
    kv = 2 * _linear(h, m.kv_dim, m.qkv_bias)
    o = _linear(m.q_dim, h, m.out_bias)
    qk_norm = 2 * m.head_dim if m.qk_norm else 0
    return q + kv + o + qk_norm


def dense_mlp_params(m: ModelSpec, width: int | None = None, bias: bool | None = None) -> int:
    h, i = m.hidden_size, width or m.intermediate_size
    b = m.mlp_bias if bias is None else bias
    if m.gated_mlp:
        return 2 * _linear(h, i, b) + _linear(i, h, b)
    return _linear(h, i, b) + _linear(i, h, b)


def moe_block_params(m: ModelSpec) -> tuple[int, int, int]:
    """(all MoE-block params, routed-expert params, params one token uses) for one MoE layer."""
    e = m.moe
    assert e is not None
    h = m.hidden_size
    router = h * e.num_experts + e.router_bias_params
    one_expert = dense_mlp_params(m, e.expert_intermediate_size, bias=False)
    routed = e.num_experts * one_expert
    # Shared experts are the family's dense MLP class at another width, so they carry its bias: DeepseekV2MLP reads
    # config.mlp_bias (modeling_deepseek_v2.py); Qwen2MoeMLP and DeepseekV3MLP have none (mlp_bias stays False).
    shared = dense_mlp_params(m, e.shared_intermediate_size) if e.shared_intermediate_size else 0
    gate = h if e.shared_expert_gate else 0
    total = router + routed + shared + gate
    active = router + e.experts_per_token * one_expert + shared + gate
    return total, routed, active


def norm_params(m: ModelSpec) -> int:
    return m.hidden_size * (2 if m.norm == "layernorm" else 1)


def layer_params(m: ModelSpec, index: int) -> LayerParams:
    attn = attention_params(m)
    norms = m.norms_per_layer * norm_params(m)
    if m.moe and index in m.moe_layers:
        total, routed, active = moe_block_params(m)
        return LayerParams(attention=attn, mlp=total, norms=norms, expert_params=routed, active_mlp=active)
    mlp = dense_mlp_params(m)
    return LayerParams(attention=attn, mlp=mlp, norms=norms, active_mlp=mlp)


@lru_cache(maxsize=512)
def count_params(m: ModelSpec) -> ParamCounts:
    h, v = m.hidden_size, m.vocab_size
    layers = [layer_params(m, i) for i in range(m.num_layers)]
    embedding = v * h + (m.max_position_embeddings * h if m.learned_positions else 0)
    lm_head = 0 if m.tie_embeddings else v * h
    return ParamCounts(
        embedding=embedding,
        attention=sum(lp.attention for lp in layers),
        mlp=sum(lp.mlp for lp in layers),
        norms=sum(lp.norms for lp in layers) + norm_params(m),
        lm_head=lm_head,
        routed_experts=sum(lp.expert_params for lp in layers),
        active_mlp=sum(lp.active_mlp for lp in layers),
        lm_head_matmul=v * h,
    )
