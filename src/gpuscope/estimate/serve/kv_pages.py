"""The paged KV cache: how many blocks an engine makes from the memory left after weights and activations, and
how many sequences fit in them.

Per GPU, one token's KV = 2 (K, V) x kv_heads / kv-shard x head_dim x layers x bytes of the KV dtype
(ModelSpec.kv_cache_elems_per_token; MLA caches per-head K/V as transformers does, the latent where the spec says
so). A block holds ``block_size`` tokens of every layer; a sequence of L tokens holds ceil(L / block_size) blocks.

Memory rules (profiles.py says whose):
- ``transformers`` (5.17 ``PagedAttentionMemoryHandler``): available = 0.9 x the memory ``torch.cuda.mem_get_info``
  reports free once the model is loaded (device total - CUDA context - weights). The footprint is a polynomial in
  the batch tokens M and the cache pages N: c_m M + c_n N + c_mn M N + c_mm M^2, per activation peak (the LM head's
  M x (h a + 4 V) and attention's M x a (h + q + 2 kv) + N x 2 kv a), with the IO tensors (7 int32 inputs, the
  output ids, the int64 read and write indices, the block table on the flash fast path) and, under an attention
  mask (eager/sdpa), the [M, N + M] mask in the activation dtype. M = min(8192, the M at which one batch fills 10% of
  the cache), at least 256; N then solves the polynomial at that M, and blocks = N // block_size.
- ``vllm``: gpu_memory_utilization x total - weights - the profile run's activation peak (a forward of
  max_num_batched_tokens tokens and the sampler's logits) - non-torch memory (CUDA context).
- ``trtllm``: kv_cache_free_gpu_mem_fraction x (total - CUDA context - weights - activations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.estimate.infer_memory import prefill_activation_bytes
from gpuscope.estimate.runtime import CUDA_CONTEXT_BYTES
from gpuscope.specs.model import ModelSpec

MIN_BATCH_TOKENS = 256  # transformers' _min_max_batch_tokens
CACHE_FILL_PER_BATCH = 0.1  # transformers: one batch fills at most 10% of the cache when M is bounded by memory


@dataclass(frozen=True)
class KVPlan:
    block_size: int
    num_blocks: int
    bytes_per_token: float  # per GPU
    budget_bytes: float  # what the engine's rule gives the cache (and, for transformers, its M-proportional tensors)
    weights_bytes: float
    activation_bytes: float  # the reserve for activations and IO tensors
    max_batched_tokens: int
    rule: str
    engine_blocks: int | None = None  # transformers with sliding-window layers: blocks of one layer group (see below)

    @property
    def kv_cache_bytes(self) -> float:
        return self.num_blocks * self.block_size * self.bytes_per_token

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def max_sequences(self, tokens_per_seq: int) -> int:
        """Sequences of ``tokens_per_seq`` tokens that fit in the cache at once."""
        return self.num_blocks // max(1, self.blocks_for(tokens_per_seq))


def kv_shard(m: ModelSpec, tp: int) -> int:
    """How many ways TP splits the KV heads (KV heads are replicated once TP exceeds them; MLA's latent never)."""
    if m.mla_latent_cache:
        return 1
    return tp if m.mla else max(1, min(tp, m.num_kv_heads))


def kv_bytes_per_token(m: ModelSpec, kv_b: float, tp: int = 1) -> float:
    return m.kv_cache_elems_per_token() * kv_b / kv_shard(m, tp)


def plan_kv(m: ModelSpec, hw, engine, *, weights: float, kv_b: float, act_b: float, tp: int, seq_tokens: int,
            flash: bool = False) -> KVPlan:
    per_token = kv_bytes_per_token(m, kv_b, tp)
    if engine.mem_rule == "transformers":
        return _transformers(m, hw, engine, weights, kv_b, act_b, per_token, seq_tokens, flash)
    acts = max(prefill_activation_bytes(m, 1, engine.max_batched_tokens, act_b, tp).values())
    acts += engine.max_num_seqs * m.vocab_size / tp * 4.0  # the sampler's fp32 logits of every sequence
    total = hw.device_total_bytes
    if engine.mem_rule == "vllm":
        budget = engine.mem_fraction * total - weights - acts - CUDA_CONTEXT_BYTES
        rule = f"vLLM: {engine.mem_fraction:g} x total - weights - activation peak - CUDA context"
    else:
        budget = engine.mem_fraction * (total - CUDA_CONTEXT_BYTES - weights - acts)
        rule = f"TensorRT-LLM: {engine.mem_fraction:g} x (total - CUDA context - weights - activations)"
    blocks = int(max(0.0, budget) // (engine.block_size * per_token))
    _check_room(m, hw, blocks, weights)
    return KVPlan(engine.block_size, blocks, per_token, budget, weights, acts, engine.max_batched_tokens, rule)


def _check_room(m: ModelSpec, hw, blocks: int, weights: float) -> None:
    if blocks <= 0:
        raise UserError(f"{m.name} leaves no room for a KV cache on {hw.name}: its weights take "
                        f"{weights / 2**30:.1f} of {hw.device_total_bytes / 2**30:.1f} GiB per GPU (try more "
                        "GPUs with --tp, or smaller weights with --dtype).")


def layer_groups(m: ModelSpec) -> int:
    """transformers CB's attention groups (``group_layers_by_attn_type``): one when every layer is full (or every one
    slides), two when sliding-window and full layers mix (Gemma-2: 21 + 21); each cache page holds one layer of
    every group, so a request holds blocks in each group from one pool."""
    return 2 if 0 < m.sliding_window_layers < m.num_layers else 1


def transformers_coefficients(m: ModelSpec, engine, a: float, seq_tokens: int, flash: bool) -> list[tuple]:
    """(c_m, c_n, c_mn, c_mm) of each activation peak (transformers 5.17 ``_equation_coefficients``). The handler
    sizes pages with the model's full KV-head count (it does not divide by TP)."""
    page = m.head_dim * m.num_kv_heads  # elements of K (or V) of one token in one layer
    groups = layer_groups(m)
    group_size = m.num_layers // groups
    k = 2 if flash else 1  # async batching doubles the IO tensors (on with flash + CUDA graphs)
    masks = 0 if flash else (2 if m.sliding_window_layers else 1)
    mbpr = 0
    if flash and not m.sliding_window_layers:  # from the hints: ceil(len / block) + 1, rounded up to even
        mbpr = math.ceil(seq_tokens / engine.block_size) + 1
        mbpr += mbpr % 2
    io_m = k * (7 * 4 + 1 * 4 + groups * mbpr * 4 + groups * 8 + groups * 8)
    c_n_base = 2 * group_size * page * a + k * groups * 8
    lm_head = (m.hidden_size * a + m.vocab_size * 4.0, 0.0)
    attention = (a * (m.hidden_size + m.num_heads * m.head_dim + 2 * page), 2 * page * a)
    return [(dm + io_m, dn + c_n_base, k * masks * a, k * masks * a) for dm, dn in (lm_head, attention)]


def _transformers(m, hw, engine, weights, kv_b, act_b, per_token, seq_tokens, flash) -> KVPlan:
    free = hw.device_total_bytes - CUDA_CONTEXT_BYTES - weights
    avail = math.floor(max(0.0, free) * engine.mem_fraction)
    coeffs = transformers_coefficients(m, engine, act_b, seq_tokens, flash)
    x = CACHE_FILL_PER_BATCH  # M = x N: (c_mn x + c_mm x^2) N^2 + (c_n + c_m x) N - avail = 0
    bound = min(int(_root(cmn * x + cmm * x * x, cn + cm * x, -avail) * x) for cm, cn, cmn, cmm in coeffs)
    big_m = max(min(engine.max_batched_tokens, bound), MIN_BATCH_TOKENS)
    pages = min(math.floor((avail - cm * big_m - cmm * big_m ** 2) / (cn + cmn * big_m)) for cm, cn, cmn, cmm in coeffs)
    engine_blocks = max(0, pages) // engine.block_size
    groups = layer_groups(m)
    blocks = engine_blocks // groups  # whole-model blocks (one in each group; sliding layers counted as full)
    _check_room(m, hw, blocks, weights)
    page_b = 2 * (m.num_layers // groups) * m.head_dim * m.num_kv_heads * act_b
    reserve = max(cm * big_m + cmm * big_m ** 2 + (cmn * big_m + cn - page_b) * pages for cm, cn, cmn, cmm in coeffs)
    rule = (f"transformers CB: {engine.mem_fraction:g} x free memory after the model loads; max_batch_tokens "
            f"{big_m}; pages of {engine.block_size} tokens" + ("" if flash else "; the [M, N+M] sdpa mask reserved"))
    return KVPlan(engine.block_size, blocks, per_token, avail, weights, reserve, big_m, rule, engine_blocks)


def _root(a: float, b: float, c: float) -> float:
    """Largest root of a x^2 + b x + c = 0 (linear when a is 0)."""
    if a == 0:
        return -c / b
    return (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
