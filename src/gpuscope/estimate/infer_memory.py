"""Inference memory at the peak, as Hugging Face `generate` holds it (estimate/infer.py times it).

Memory (per GPU, bytes), each term named as in the JSON breakdown:
- weights: parameters x bytes of the weight dtype; quantized formats keep embeddings, norms and the LM head in
  16 bit and add their scales (dtypes.py).
- kv_cache: batch x cached tokens x 2 (K, V) x kv_heads x head_dim x layers x bytes of the KV dtype (MLA: the
  per-head K and V transformers caches). At the end of generation the cache holds prompt + gen - 1 tokens (the last
  sampled token is never fed back). Sliding-window layers keep at most `window` tokens.
- kv_append: DynamicCache appends with torch.cat, so while one layer's K is re-copied the old and new copies coexist.
- activations: the transient peak inside one decoder layer during prefill (T = batch x prompt tokens):
  MLP:       residual + normed input (2 T h) + act(gate), up and their product (3 T I)   [x act bytes]
  attention: residual + normed input + q, rotary temporaries (3 q-sized), output and its transpose (2 q)
  RMSNorm:   its fp32 copies (3 T h x 4 bytes) next to the 16-bit input.
  With MoE, I is the expert width times the tokens routed to the busiest expert (top-k share, uniform routing).
- logits: generate keeps only the last position (logits_to_keep=1), cast to fp32 for the logits processors.
- workspace: cuBLAS/cuBLASLt workspaces from the caching allocator.
The reported peak is max(prefill peak, end-of-decode peak), comparable with torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

from gpuscope.estimate.dtypes import nbytes, quantized_weight_bytes_per_param
from gpuscope.estimate.params import count_params
from gpuscope.estimate.runtime import CUBLAS_WORKSPACE_BYTES, runtime_overheads
from gpuscope.specs.model import ModelSpec


def weight_bytes(m: ModelSpec, dtype: str, tp: int = 1) -> dict[str, float]:
    pc = count_params(m)
    linear = pc.attention + pc.mlp  # projections and experts (norm-free parts dominate; norms below)
    b16 = 2.0 if dtype not in ("fp32",) else 4.0
    w_linear = linear * (quantized_weight_bytes_per_param(dtype, m.hidden_size) if dtype in ("int8", "int4")
                         else nbytes(dtype))
    other = (pc.embedding + pc.lm_head) * b16 / tp + pc.norms * b16
    return {"weights": w_linear / tp + other}


def kv_cache_bytes(m: ModelSpec, batch: int, tokens: int, kv_dtype: str, tp: int = 1) -> float:
    per_layer_full = m.kv_cache_elems_per_token() / m.num_layers
    if m.mla_latent_cache:
        kv_shard = 1  # the shared latent is replicated on every tensor-parallel rank
    else:
        kv_shard = max(1, min(tp, m.num_kv_heads)) if not m.mla else tp
    full_layers = m.num_layers - m.sliding_window_layers
    window_tokens = min(tokens, m.sliding_window) if m.sliding_window else tokens
    elems = per_layer_full * (full_layers * tokens + m.sliding_window_layers * window_tokens)
    return batch * elems * nbytes(kv_dtype) / kv_shard


def prefill_activation_bytes(m: ModelSpec, batch: int, prompt: int, act_b: float, tp: int = 1) -> dict[str, float]:
    t = batch * prompt
    h = m.hidden_size
    q = (m.q_dim if not m.mla else m.num_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim)) / tp
    if m.is_moe and m.moe:
        e = m.moe
        # tokens reaching one expert when routing is uniform: T * k / E (at least one token)
        width = e.expert_intermediate_size * max(1.0, e.experts_per_token / e.num_experts) \
            + e.shared_intermediate_size
        mlp_width = max(width, m.intermediate_size if m.num_dense_layers else 0)
    else:
        mlp_width = m.intermediate_size
    mlp_width /= tp
    n_mlp = 3 if m.gated_mlp else 2
    mlp = t * (2 * h + n_mlp * mlp_width) * act_b
    attn = t * (2 * h + 6 * q) * act_b
    if m.eager_attention:  # scores, soft-capped scores, fp32 softmax and 16-bit probabilities of one layer
        attn += batch * m.num_heads / tp * prompt * prompt * (2 * act_b + 4 + act_b)
    norm = t * h * (act_b + 3 * 4)
    return {"mlp": mlp, "attention": attn, "norm": norm}


def phase_memory(m: ModelSpec, batch: int, prompt: int, gen: int, dtype: str, kv_dtype: str, act_b: float,
            tp: int, static: bool = False, moe_batched: bool = False) -> dict:
    """Phase peaks. ``static``: a StaticCache of prompt + gen tokens is allocated before the prefill and updated
    in place (no torch.cat copies). ``moe_batched``: generate's batched_mm experts in decode gather a copy of the
    gate|up and then the down weights for each of the batch x top-k routed rows; the first copy is still referenced
    while the second is made (``selected_weights`` is reassigned), so both are live: batch x k x 3 x I x H."""
    w = weight_bytes(m, dtype, tp)["weights"]
    if static:
        kv_prefill = kv_end = kv_cache_bytes(m, batch, prompt + gen, kv_dtype, tp)
    else:
        kv_prefill = kv_cache_bytes(m, batch, prompt, kv_dtype, tp)
        kv_end = kv_cache_bytes(m, batch, prompt + gen - 1, kv_dtype, tp)
    kv_one_layer_k = 0.0 if static else kv_end / m.num_layers / 2
    acts = prefill_activation_bytes(m, batch, prompt, act_b, tp)
    act_peak = max(acts.values())
    logits = batch * m.vocab_size / tp * (act_b + 4 + 4)
    ws = CUBLAS_WORKSPACE_BYTES
    prefill = w + kv_prefill + act_peak + ws
    gathered = 0.0
    if moe_batched and m.moe:
        n_mats = 3 if m.gated_mlp else 2
        gathered = batch * m.moe.experts_per_token * n_mats * m.hidden_size * m.moe.expert_intermediate_size \
            * nbytes(dtype) / tp
    decode_end = w + kv_end + kv_one_layer_k + logits + ws + gathered
    phases = {"prefill": prefill, "decode_end": decode_end}
    at_peak_prefill = prefill >= decode_end
    breakdown = {
        "weights": w,
        "kv_cache": kv_prefill if at_peak_prefill else kv_end,
        "activations": act_peak if at_peak_prefill else 0.0,
        "kv_append": 0.0 if at_peak_prefill else kv_one_layer_k,
        "logits": 0.0 if at_peak_prefill else logits,
        "workspace": ws,
    }
    if gathered:
        breakdown["moe_gathered_weights"] = 0.0 if at_peak_prefill else gathered
    return {"phases": phases, "breakdown": breakdown}


def max_fit(m: ModelSpec, hw, batch: int, prompt: int, gen: int, dtype: str, kv_dtype: str, act_b: float,
            tp: int, static: bool = False, moe_batched: bool = False) -> dict[str, int | None]:
    """Largest batch (at this prompt+gen) and largest prompt (at this batch, within the model's context) that fit."""

    def fits(b: int, p: int) -> bool:
        peak = max(phase_memory(m, b, p, gen, dtype, kv_dtype, act_b, tp, static, moe_batched)["phases"].values())
        return peak + sum(runtime_overheads(peak).values()) <= hw.device_total_bytes

    def search(f, hi_cap: int) -> int | None:
        if not f(1):
            return None
        lo, hi = 1, 2
        while hi <= hi_cap and f(hi):
            lo, hi = hi, hi * 2
        hi = min(hi, hi_cap + 1)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if f(mid) else (lo, mid)
        return lo

    return {"max_batch": search(lambda b: fits(b, prompt), 1 << 20),
            "max_prompt": search(lambda p: fits(batch, p), max(1, m.max_position_embeddings - gen + 1))}
