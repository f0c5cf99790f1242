"""The operations of one forward pass, with FLOPs, bytes moved and kernel launches.

The list mirrors what Hugging Face transformers runs in eager mode for each family (modeling_llama.py and the
families that copy it, modeling_gpt2.py, modeling_gpt_neox.py, modeling_deepseek_v3.py), so that a roofline over it
(roofline.py) and a launch count (engines.py) describe the same program the user runs.

Conventions:
- A matmul of an (M x K) input by a (K x N) weight costs 2MNK FLOPs and moves M*K + K*N + M*N elements.
- Elementwise bytes count every read and every write of each kernel (no fusion in eager mode).
- ``stream`` is the dtype of the residual stream and of norm inputs/outputs: the compute dtype in inference and in
  pure-bf16 training, fp32 under AMP (autocast leaves the embedding output and residual adds in fp32).
- Attention work is causal: a query at position p attends p keys, so prefill of s tokens does s(s+1)/2 dot products
  per head (flash/SDPA kernels skip masked blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuscope.estimate import moe as moemod
from gpuscope.specs.model import ModelSpec


@dataclass(frozen=True)
class Op:
    name: str
    kind: str  # "matmul", "attention", "elementwise", "cache", "other"
    flops: float
    bytes: float
    kernels: int
    count: int = 1  # how many times per forward (e.g. number of layers)
    matmul_shape: tuple[int, int, int] | None = None  # (M, N, K) for matmuls


def _mm(name: str, m: int, n: int, k: int, act_b: float, w_b: float, count: int = 1, kernels: int = 1) -> Op:
    return Op(name, "matmul", 2.0 * m * n * k, (m * k + m * n) * act_b + k * n * w_b, kernels, count, (m, n, k))


def _ew(name: str, elems: float, bytes_per_elem: float, kernels: int, count: int = 1) -> Op:
    return Op(name, "elementwise", 0.0, elems * bytes_per_elem, kernels, count)


def _norm(m: ModelSpec, tokens: int, stream_b: float, act_b: float, count: int) -> Op:
    """HF RMSNorm in eager mode: to(fp32), pow, mean, add+rsqrt, mul, to(dtype), mul(weight): 7 kernels whose
    traffic adds up to about 36 bytes per element for a 16-bit input; LayerNorm is one native kernel."""
    n = tokens * m.hidden_size
    if m.norm == "layernorm":
        return _ew("layernorm", n, 2 * stream_b, 1, count)
    up = 0 if stream_b == 4 else stream_b + 4  # to(fp32) is a no-op when the stream is already fp32
    per_elem = up + 8 + 4 + 8 + (4 + act_b) + 2 * act_b + act_b
    return _ew("rmsnorm", n, per_elem, 7 if stream_b != 4 else 6, count)


def layer_ops(m: ModelSpec, tokens: int, ctx: int, new: int, act_b: float, w_b: float, stream_b: float,
              count: int, moe: bool, hf_cache_cat: bool, batch: int, static_len: int | None = None,
              gqa_fold: bool = False, fuse_proj: bool = False, moe_batched: bool = False) -> list[Op]:
    """Ops of ``count`` identical decoder layers processing ``tokens`` = batch * new tokens whose queries see
    ``ctx`` keys in the end (ctx = past + new). ``static_len``: the length of a static KV cache (transformers'
    StaticCache, as the graph engines use), whose every slot attention reads under an explicit mask. ``gqa_fold``:
    gpuscope's GQA-folding SDPA (measure/models/gqa_attention.py, `--attn gs-gqa`) instead of transformers' repeat_kv.
    ``fuse_proj``: q|k|v and gate|up as one GEMM each (measure/llm/fused_proj.py, `--fuse-proj`). ``moe_batched``:
    routed experts as transformers' batched_mm (generate's decode steps on a GPU, see _moe_ops)."""
    h = m.hidden_size
    ops = [_norm(m, tokens, stream_b, act_b, count)]
    cast = 0.0 if stream_b == act_b else 1.0  # autocast copies the fp32 norm output before each projection
    proj, q_dim, k_dim, v_dim = (_mla_projection_ops(m, tokens, act_b, w_b, count) if m.mla else
                                 _qkv_projection_ops(m, tokens, act_b, w_b, stream_b, count, cast, fuse_proj))
    ops += proj
    ops += _kv_cache_ops(tokens, ctx, new, batch, k_dim + v_dim, act_b, count, hf_cache_cat, static_len)
    ops += _attention_ops(m, tokens, ctx, new, batch, q_dim, k_dim, v_dim, act_b, count, static_len, gqa_fold)
    ops.append(_ew("attn_out_transpose", tokens * q_dim if not m.mla else tokens * v_dim, 2 * act_b, 1, count))
    ops.append(_mm("o_proj", tokens, h, v_dim if m.mla else q_dim, act_b, w_b, count))
    ops.append(_ew("residual_add", tokens * h, 2 * stream_b + act_b, 1, count))
    if not m.parallel_residual:
        ops.append(_norm(m, tokens, stream_b, act_b, count))
    if m.norms_per_layer == 4:  # Gemma-2: post-attention and post-feedforward norms on the branch outputs
        ops.append(_norm(m, tokens, act_b, act_b, 2 * count))
    if moe and m.moe:
        ops += _moe_ops(m, tokens, act_b, w_b, stream_b, count, cast, moe_batched)
    else:
        ops += _mlp_ops(m, tokens, m.intermediate_size, act_b, w_b, stream_b, count, cast, "mlp", fuse_proj)
    ops.append(_ew("residual_add", tokens * h, 2 * stream_b + act_b, 1, count))
    return ops


def _mla_projection_ops(m: ModelSpec, tokens: int, act_b: float, w_b: float, count: int):
    """(ops, q, k, v widths) of multi-head latent attention's projections (DeepSeek-V2/V3)."""
    h = m.hidden_size
    ops = []
    a = m.mla
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    if a.q_lora_rank:
        ops += [_mm("q_a_proj", tokens, a.q_lora_rank, h, act_b, w_b, count),
                _ew("q_a_norm", tokens * a.q_lora_rank, 36, 7, count),
                _mm("q_b_proj", tokens, m.num_heads * qk, a.q_lora_rank, act_b, w_b, count)]
    else:
        ops.append(_mm("q_proj", tokens, m.num_heads * qk, h, act_b, w_b, count))
    ops += [_mm("kv_a_proj", tokens, a.kv_lora_rank + a.qk_rope_head_dim, h, act_b, w_b, count),
            _ew("kv_a_norm", tokens * a.kv_lora_rank, 36, 7, count),
            _mm("kv_b_proj", tokens, m.num_heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank,
                act_b, w_b, count),
            _ew("mla_split_rope_cat", tokens * m.num_heads * (2 * qk), 4 * act_b, 14, count)]
    q_dim, k_dim, v_dim = m.num_heads * qk, m.num_heads * qk, m.num_heads * a.v_head_dim
    if m.mla_latent_cache:
        # absorbed MLA (DeepSeek-V2 section 2.1.2): W_UK folds into the query and W_UV into the output, so
        # attention reads the shared latent (kv_lora + rope per token, one "head") and every head's scores
        # run over kv_lora + rope dims and its values over kv_lora dims
        k_dim, v_dim = a.kv_lora_rank + a.qk_rope_head_dim, 0
    return ops, q_dim, k_dim, v_dim


def _qkv_projection_ops(m: ModelSpec, tokens: int, act_b: float, w_b: float, stream_b: float, count: int,
                        cast: float, fuse_proj: bool):
    """(ops, q, k, v widths) of the q/k/v projections with rotary (or GPT-2's head split) and the q/k norms."""
    h = m.hidden_size
    ops = []
    q_dim, k_dim, v_dim = m.q_dim, m.kv_dim, m.kv_dim
    if cast:
        ops.append(_ew("autocast_copies", tokens * h, 3 * (stream_b + act_b), 3, count))
    fused_qkv = fuse_proj or m.family in ("gpt2", "gpt_neox", "phi3")
    ops.append(_mm("qkv_proj", tokens, q_dim + k_dim + v_dim, h, act_b, w_b, count, 1 if fused_qkv else 3))
    if m.family == "gpt2":
        ops.append(_ew("split_heads", tokens * (q_dim + k_dim + v_dim), 2 * act_b, 3, count))
    else:
        # rotary on q and k: mul cos, rotate_half (2 slices, neg, cat), mul sin, add
        rot = m.num_heads * m.head_dim + m.num_kv_heads * m.head_dim
        ops.append(_ew("rotary", tokens * rot, 10 * act_b, 12, count))
    if m.qk_norm:
        ops.append(_ew("qk_norm", tokens * (q_dim + k_dim), 36, 14, count))
    return ops, q_dim, k_dim, v_dim


def _kv_cache_ops(tokens: int, ctx: int, new: int, batch: int, kv_width: int, act_b: float, count: int,
                  hf_cache_cat: bool, static_len: int | None) -> list[Op]:
    """Writing this step's keys and values: DynamicCache's torch.cat or StaticCache's index_copy_."""
    ops = []
    # KV cache: HF DynamicCache appends with torch.cat, re-copying this layer's cache every step.
    kv_elems_past = batch * (ctx - new) * kv_width
    if hf_cache_cat and ctx > new:
        ops.append(Op("kv_cache_cat", "cache", 0.0, 2 * kv_elems_past * act_b + 2 * tokens * kv_width * act_b,
                      2, count))
    if static_len:  # StaticCache.update: index_copy_ of the new keys and values into their slots
        ops.append(Op("kv_cache_update", "cache", 0.0, 2 * tokens * kv_width * act_b, 2, count))
    return ops


def _attention_ops(m: ModelSpec, tokens: int, ctx: int, new: int, batch: int, q_dim: int, k_dim: int, v_dim: int,
                   act_b: float, count: int, static_len: int | None, gqa_fold: bool) -> list[Op]:
    """The attention core: SDPA (causal flash, or the masked path), eager attention's scores, repeat_kv copies."""
    ops = []
    # Attention: causal dot products; SDPA reads q, k, v and writes the output once.
    past = ctx - new
    pairs = batch * (new * past + new * (new + 1) / 2)  # (query, key) pairs
    keys = ctx
    # A sliding-window config whose keys reach the window makes transformers hand SDPA an explicit mask
    # (masking_utils may skip the mask only while kv_length < the window), and so does a static cache (its mask
    # hides the empty slots; masking_utils never skips it for a compileable cache). SDPA then leaves the causal
    # flash path for the masked one ("attention_masked": roofline.MASKED_SDPA_FRACTION, measured with causal
    # FLOPs counted), which computes every slot: b x new x static_len pairs, counted as half of them.
    masked = bool(static_len) or (bool(m.sliding_window) and ctx >= m.sliding_window)
    if static_len:
        keys = static_len
        pairs = batch * new * static_len / 2.0
    attn_flops = 2.0 * pairs * m.num_heads * ((k_dim + v_dim) / max(1, m.num_kv_heads if not m.mla else m.num_heads))
    if m.mla and m.mla_latent_cache:
        attn_flops = 2.0 * pairs * m.num_heads * (2 * m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
    kv_read = batch * keys * (k_dim + v_dim) * act_b
    n_rep = m.num_heads // max(1, m.num_kv_heads)
    if masked and n_rep > 1 and not m.mla and not m.eager_attention and not gqa_fold:
        # transformers' sdpa_attention_forward lets CUDA SDPA do GQA itself only without a mask (use_gqa_in_sdpa);
        # with one, repeat_kv first copies K and V out to every query head: read kv, write n_rep x kv
        ops.append(Op("repeat_kv", "elementwise", 0.0, kv_read * (1 + n_rep), 2, count))
        kv_read *= n_rep
    attn_bytes = 2 * tokens * q_dim * act_b + kv_read
    if m.eager_attention:
        # eager attention computes every (query, key) pair as two batched GEMMs and runs the soft-cap, mask,
        # fp32 softmax and cast over b x heads x new x ctx scores: ~24 bytes of traffic per score, 9 kernels
        scores = batch * m.num_heads * new * ctx
        attn_flops = 2.0 * scores * ((k_dim + v_dim) / max(1, m.num_kv_heads))
        ops.append(Op("attention_scores_eager", "elementwise", 0.0, 24.0 * scores, 9, count))
        ops.append(Op("attention", "matmul", attn_flops, attn_bytes, 2, count))
    else:
        ops.append(Op("attention_masked" if masked else "attention", "attention", attn_flops, attn_bytes, 1, count))
    return ops


def _mlp_ops(m: ModelSpec, tokens: int, width: int, act_b: float, w_b: float, stream_b: float, count: int,
             cast: float, name: str, fuse_proj: bool = False) -> list[Op]:
    h = m.hidden_size
    ops = []
    if cast:
        ops.append(_ew(f"{name}_autocast_copies", tokens * h, (2 if m.gated_mlp else 1) * (stream_b + act_b),
                       2 if m.gated_mlp else 1, count))
    if m.gated_mlp:
        ops += [_mm(f"{name}_gate_up", tokens, 2 * width, h, act_b, w_b, count,
                    1 if (fuse_proj or m.family == "phi3") else 2),
                _ew(f"{name}_act_mul", tokens * width, 5 * act_b, 2, count)]
    else:
        gelu_kernels = 8 if m.activation in ("gelu_new", "gelu_pytorch_tanh") and m.family == "gpt2" else 1
        ops += [_mm(f"{name}_up", tokens, width, h, act_b, w_b, count),
                _ew(f"{name}_act", tokens * width, 2 * act_b * gelu_kernels, gelu_kernels, count)]
    ops.append(_mm(f"{name}_down", tokens, h, width, act_b, w_b, count))
    return ops


def _moe_ops(m: ModelSpec, tokens: int, act_b: float, w_b: float, stream_b: float, count: int,
             cast: float, batched: bool = False) -> list[Op]:
    """MoE block as transformers runs it: router GEMM, softmax/top-k, then the routed experts; each expert that
    receives a token has its weights read once per forward. ``batched``: transformers' ``batched_mm`` experts, which
    `generate` switches to for every decode step on a GPU (generation/utils.py `_optimize_model_for_decode`,
    transformers 5.x): each of the tokens x top-k routed rows gathers its expert's weights (``W[expert_ids]``, a
    copy) and multiplies them with a bmm, so the weights are read, written and read again per routed row, repeats
    included. H200, Mixtral-8x7B b1 decode (research/results/2026-11-29-h200-c/doctor_mixtral.json): the gathers and
    bmms took 16.6 ms per step, this model 16.4 ms (one read of the two experts: 5.5 ms)."""
    e = m.moe
    assert e is not None
    h = m.hidden_size
    ops = [_mm("router", tokens, e.num_experts, h, act_b, w_b, count),
           _ew("router_softmax_topk", tokens * e.num_experts, 4 * 4, 6, count)]
    routed_tokens = tokens * e.experts_per_token
    # Expected experts that see at least one token: E * (1 - (1 - k/E)^tokens).
    hit = e.num_experts * (1.0 - (1.0 - e.experts_per_token / e.num_experts) ** tokens)
    width = e.expert_intermediate_size
    n_mats = 3 if m.gated_mlp else 2
    flops = 2.0 * routed_tokens * h * width * n_mats
    shape_rows = routed_tokens
    if not batched:  # grouped_mm computes each expert's rows in whole row units (estimate/moe.py)
        up_n = (n_mats - 1) * width
        rows_up = moemod.padded_rows(tokens, e.experts_per_token, e.num_experts, up_n)
        rows_down = moemod.padded_rows(tokens, e.experts_per_token, e.num_experts, h)
        flops = 2.0 * h * width * ((n_mats - 1) * rows_up + rows_down)
        shape_rows = max(routed_tokens, int(round(rows_up)))
    expert_w = 3 * routed_tokens * n_mats * h * width * w_b if batched else max(
        hit * n_mats * h * width * w_b,  # each expert read once; grouped_mm: once per row unit (estimate/moe.py)
        moemod.grouped_weight_bytes(tokens, e.experts_per_token, e.num_experts, h, width, n_mats, w_b))
    bytes_ = expert_w + routed_tokens * (2 * h + (n_mats + 2) * width) * act_b
    # transformers 5 runs the routed experts as grouped GEMMs over expert-sorted tokens (its fused 3-D expert
    # weights): a fixed dozen kernels per layer (sort/count, gather, grouped gate_up, act, grouped down, scatter),
    # not a Python loop over experts.
    # Wave quantization over all groups at once: the grouped GEMM tiles every expert's rows in one launch.
    ops.append(Op("experts", "matmul", flops, bytes_, 2 if not batched else 12, count, (shape_rows, width, h)))
    if not batched:
        ops += _dispatch_ops(tokens, e.experts_per_token, h, width, act_b, count,
                             m.family in moemod.FP32_ROUTING_FAMILIES)
    if e.shared_intermediate_size:
        ops += _mlp_ops(m, tokens, e.shared_intermediate_size, act_b, w_b, stream_b, count, cast, "shared_expert")
    return ops


def _dispatch_ops(tokens: int, k: int, h: int, width: int, act_b: float, count: int,
                  fp32_weights: bool = False) -> list[Op]:
    """The routed rows' elementwise kernels around grouped_mm's two GEMMs (estimate/moe.py): their bytes at the
    elementwise rate, and the strided kernels' extra time as bytes of an op with no kernels."""
    plain, strided = moemod.dispatch_bytes(tokens, k, h, width, act_b, fp32_weights)
    return [Op("experts_dispatch", "elementwise", 0.0, plain + strided, moemod.DISPATCH_KERNELS, count),
            Op("experts_dispatch_strided", "elementwise", 0.0, strided * (moemod.STRIDED_SLOWDOWN - 1.0), 0, count)]


def forward_ops(m: ModelSpec, batch: int, new: int, past: int, act_b: float, w_b: float, stream_b: float,
                head_tokens: int, hf_cache_cat: bool = True, head_w_b: float | None = None,
                static_len: int | None = None, gqa_fold: bool = False, fuse_proj: bool = False,
                moe_batched: bool = False) -> list[Op]:
    """All ops of one forward over ``new`` tokens per sequence with ``past`` cached tokens.

    ``head_tokens``: positions the LM head is applied to (generate applies it to the last position only,
    training to every position)."""
    tokens = batch * new
    ctx = past + new
    n_moe = len(m.moe_layers) if m.moe else 0
    n_dense = m.num_layers - n_moe
    ops = [_ew("embedding", tokens * m.hidden_size, 2 * stream_b, 1)]
    if not m.learned_positions:
        ops.append(_ew("rotary_cos_sin", tokens * m.head_dim, 8 * 4, 8))
    if n_dense:
        ops += layer_ops(m, tokens, ctx, new, act_b, w_b, stream_b, n_dense, False, hf_cache_cat, batch, static_len,
                         gqa_fold, fuse_proj)
    if n_moe:
        ops += layer_ops(m, tokens, ctx, new, act_b, w_b, stream_b, n_moe, True, hf_cache_cat, batch, static_len,
                         gqa_fold, fuse_proj, moe_batched)
    ops.append(replace(_norm(m, head_tokens, stream_b, act_b, 1), name="final_norm"))
    hb = act_b if head_w_b is None else head_w_b
    ops.append(_mm("lm_head", head_tokens, m.vocab_size, m.hidden_size, act_b, hb, 1))
    return ops


# forward_ops' ops outside the decoder layers (a training forward adds its loss): what activation checkpointing
# does not run again (HF checkpoints each decoder layer, transformers' GradientCheckpointingLayer)
OUTSIDE_LAYERS = ("embedding", "rotary_cos_sin", "final_norm", "lm_head", "loss_log_softmax")


def in_layers(op: Op) -> bool:
    return op.name not in OUTSIDE_LAYERS


def total(ops: list[Op], attr: str) -> float:
    return sum(getattr(o, attr) * o.count for o in ops)
