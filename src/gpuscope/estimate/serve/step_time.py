"""The time of one continuous-batching step: T new tokens of any mix of prefill chunks and decodes, S rows that
sample a token, and attention over each sequence's cached context.

A step is split into what grows with its tokens and what grows with the context the attention reads:
- token-linear ops (projections, MLP/experts, norms, rotary, residuals, the LM head of the S sampled rows, the TP
  all-reduces): ops.forward_ops for T tokens with no cache, timed by roofline.time_ops (the same op list and
  roofline as `plan infer`), tabulated once on a grid of T and interpolated (piecewise-linear in T, as the roofline
  of each op is);
- attention, per layer, from the step's (query, key) pairs and the KV tokens it reads:
  paged kernels (vLLM, TensorRT-LLM, transformers' flash path): FLOPs 4 x pairs x heads x head_dim at
  roofline.attention_efficiency of the GEMM rate, bytes = KV read once + q and output, the larger of the two;
  transformers' paged|sdpa: every key of every scheduled request meets every query of the packed batch (dense
  mask): FLOPs 4 x M x N_k x heads x head_dim at the masked-SDPA rate (roofline.MASKED_SDPA_FRACTION, measured
  with causal FLOPs counted, so x 2 for computed pairs) times the kernel's occupancy of the SMs (StepModel.occupancy:
  few queries leave most SMs idle), and never less than one thread block's own loop over the key tiles
  (SDPA_TILE_S below: at decode the blocks are fewer than the SMs and each streams every key of the batch), plus the
  copies it makes each layer: the cache read-back
  (index_select of K and V: read + write N_k tokens), repeat_kv out to every query head and one more pass over the
  repeated K and V (REPEATED_KV_PASSES), the mask (M x N_k in the activation dtype) written and read, at
  roofline.ELEMENTWISE_BW_FRACTION of the copy bandwidth;
  paged|eager: the same copies, the scores as two batched GEMMs and ~24 bytes of traffic a score (mask add, fp32
  softmax, cast: ops.py's eager attention);
- the host: eager steps launch every kernel from Python (engines.EngineModel "eager" launch cost, overlapped with
  the GPU: max(GPU, launches)), CUDA-graph decode steps launch none. An eager step of transformers' paged|sdpa adds
  ServeEngine.host_graph_build_s in series: torch's cuDNN SDPA builds a cuDNN graph for every new (queries, keys)
  shape, and every CB step has a new one (the KV read grows); the build runs on the host before the first layer's
  SDPA, the GPU idle (profiles.py). The engine's own per-step work (profiles.ServeEngine host_*) is in series with the
  GPU for a synchronous loop and overlapped for an asynchronous one.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from gpuscope.estimate import ops as opsmod
from gpuscope.estimate.comm import collective_time
from gpuscope.estimate.engines import engine_for
from gpuscope.estimate.roofline import (ELEMENTWISE_BW_FRACTION, MASKED_SDPA_FRACTION, attention_efficiency,
                                        sm_count, time_ops)
from gpuscope.estimate.serve.kv_pages import kv_bytes_per_token
from gpuscope.estimate.topology import topology_for
from gpuscope.specs.model import ModelSpec

SKIP = ("attention", "cache")  # op kinds attention_s models instead
HEAD = ("final_norm", "lm_head")  # ops applied to the sampled rows only
SDPA_QUERY_TILE = 64  # the memory-efficient SDPA kernel re-reads K and V once per 64-query tile
# per layer: index_copy K/V, index_select K/V, repeat_kv K/V and one more pass over each, q.contiguous, the SDPA
# (torch's cuDNN SDPA launches a memset too): a decode step's trace (research/results/2026-12-02-h200-c/call2/
# gpu_serve5) has 50 kernels a layer, the op list 40 + these 10
EXTRA_SDPA_KERNELS = 10
# The masked SDPA kernel (torch 2.11 picks cuDNN's fused flash forward on an H200) gives each (SDPA_BLOCK_QUERIES
# queries, head) one thread block that loops over all N_k keys in tiles of 64, with no split over the keys. A
# decode batch has fewer blocks than SMs (Llama-3.1-8B, M = 256: 64 blocks on 132 SMs), so a layer lasts
# ceil(N_k / 64) tiles of one block running alone on its SM, whatever M is: time ~ N_k x layers, not M x N_k.
# (occupancy() below, the throughput term's share of the SMs, still counts the memory-efficient kernel's 64-query
# tiles: SDPA_QUERY_TILE.)
# SDPA_TILE_S, one such tile (QK^T and PV of 64 x 64 x head_dim 128, its mask tile, the online softmax): the kernel
# profile of Llama-3.1-8B decode steps under transformers 5.17 on an H200 (research/results/2026-12-02-h200-c/call1/
# gpu_serve4, prof): the cuDNN SDPA kernel's own device time, 25.07 ms a step at 64 requests and 33.5k KV tokens,
# 23.09 ms at 16 and 33.0k, over 32 layers x ceil(N_k / 64) tiles: 1.49 / 1.40 us, 1.45 us. Another GPU takes the
# tile in proportion to its dense peak per SM (assumed, not measured there).
SDPA_KEY_TILE = 64
SDPA_TILE_S = 1.45e-6
# A mixed step (a decode batch plus new prompts) has more blocks than SMs: the blocks run in waves, each wave as long
# as a decode layer. One block holds 128 queries (the kernel's two 64-row consumer warpgroups): Llama-3.1-8B,
# 64 decodes + one 1024-token prompt (M = 1088: 288 blocks, 3 waves on 132 SMs) ran its SDPA 4.86 ms a layer,
# 3.2x the decode layer's 1.53 ms at the same keys; 64-query blocks would make 5 waves (7.6 ms). Kernel profile of
# research/results/2026-12-02-h200-d/call1/gpu_serve6 (planned before it ran in 2026-12-02-h200-c/serve.md).
SDPA_BLOCK_QUERIES = 128
# The same profile has four elementwise kernels a layer as long as the repeated K or V (0.175 ms each at 33.5k KV
# tokens, 22.4 ms a step), not two: repeat_kv's copy and one more pass over each repeated tensor (read + write).
REPEATED_KV_PASSES = 2
# The packed prefill's masked SDPA (throughput-bound: 8192 queries against every key of the batch, its FLOPs or its
# K/V re-read per 64-query tile) runs faster than roofline.MASKED_SDPA_FRACTION (the memory-efficient kernel at
# Phi-3-mini's shape) and the copy bandwidth say: torch 2.11 runs it through cuDNN. The 16 prefill steps of the
# 1024-request run (research/results/2026-12-02-h200-b/call1/gpu_serve2): the attention time they leave (measured
# step less the token-linear ops, copies, host loop and graph build) over the planned, median 0.825 (0.78-0.90).
CUDNN_MASKED_SDPA_SPEEDUP = 1 / 0.825
SDPA_TILE_PEAK_PER_SM = 989.5e12 / 132  # the H200's dense bf16 peak per SM, where SDPA_TILE_S was measured


def _grid(limit: int) -> list[int]:
    pts = set(range(1, 17))
    x = 16.0
    while x < limit:
        x *= 1.25
        pts.add(int(round(x)))
    pts.add(limit)
    return sorted(p for p in pts if p <= limit)


def _interp(xs: list[int], ys: list[float], x: float) -> float:
    if x <= xs[0]:
        return ys[0] * x / xs[0]
    if x >= xs[-1]:
        return ys[-1] * x / xs[-1]
    i = bisect.bisect_left(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)


@dataclass
class StepModel:
    """Per-step time of one engine serving one model on one GPU type (see the module docstring)."""

    xs: list[int]
    linear_s: list[float]  # token-linear GPU time (and TP all-reduces) at xs tokens
    head_s: list[float]  # final norm + LM head at xs sampled rows
    kernels: int  # kernels of one eager forward (token-linear ops and attention)
    launch_s: float  # host per kernel of an eager step
    forward_host_s: float
    layers: int
    heads: float  # per GPU
    head_dim: int
    kv_tok_b: float  # K+V bytes of one token in one layer, per GPU (cache dtype)
    act_b: float
    n_rep: int
    attn_rate: float  # FLOP/s of the attention kernel
    gemm_rate: float  # FLOP/s of a large GEMM
    bw: float  # bytes/s
    floor_s: float  # per-layer attention kernel floor
    engine: object
    sms: int | None = None  # multiprocessors of one GPU (the masked SDPA's occupancy)
    tile_s: float = SDPA_TILE_S  # one masked-SDPA block's time per 64-key tile on this GPU

    def step_s(self, tokens: float, rows: float, kv_read: float, pairs: float, requests: float,
               decode_only: bool) -> float:
        """Seconds of one step (module docstring): ``tokens`` new tokens, ``rows`` sampled, ``kv_read`` KV tokens
        read (past + new, all scheduled sequences), ``pairs`` causal (query, key) pairs, ``requests`` scheduled."""
        e = self.engine
        gpu = _interp(self.xs, self.linear_s, tokens) + _interp(self.xs, self.head_s, max(rows, 1.0))
        gpu += self.attention_s(tokens, kv_read, pairs)
        graph = e.decode_graph if decode_only else e.mixed_graph
        host = 0.0
        if not graph:
            host = self.kernels * self.launch_s + self.forward_host_s
        wall = max(gpu, host) + (0.0 if graph else e.host_graph_build_s)
        loop = e.host_step_s + e.host_per_request_s * requests + e.host_per_kv_token_s * (kv_read + tokens)
        return max(wall, loop) if e.host_overlapped else wall + loop

    def occupancy(self, tokens: float) -> float:
        """The masked SDPA kernel's share of the GPU: one thread block per 64 queries and head, each looping over all
        keys (the memory-efficient kernel has no split over the keys), so a packed batch of few queries fills
        ceil(M / 64) x heads of the SMs: blocks / (waves x SMs), as roofline.wave_efficiency counts GEMM tiles."""
        if not self.sms:
            return 1.0
        blocks = math.ceil(max(tokens, 1) / SDPA_QUERY_TILE) * max(1, round(self.heads))
        return blocks / (math.ceil(blocks / self.sms) * self.sms)

    def sdpa_waves(self, tokens: float) -> int:
        """Waves of cuDNN's masked SDPA blocks: one block per (SDPA_BLOCK_QUERIES queries, head), one block an SM at
        a time, each looping over every key; a decode batch is one wave, a mixed step ceil(blocks / SMs)."""
        if not self.sms:
            return 1
        blocks = math.ceil(max(tokens, 1) / SDPA_BLOCK_QUERIES) * max(1, round(self.heads))
        return math.ceil(blocks / self.sms)

    def attention_s(self, tokens: float, kv_read: float, pairs: float) -> float:
        main, copies = self.attention_parts(tokens, kv_read, pairs)
        return self.layers * (main + copies)

    def attention_parts(self, tokens: float, kv_read: float, pairs: float) -> tuple[float, float]:
        """(the attention kernel, the copies around it) of one layer, seconds."""
        hd = self.head_dim
        if self.engine.dense_masked_attention:
            keys = kv_read
            flops = 4.0 * tokens * keys * self.heads * hd
            rep = keys * self.kv_tok_b * self.n_rep
            copies = 2 * keys * self.kv_tok_b + (keys * self.kv_tok_b + rep + 2 * rep * (REPEATED_KV_PASSES - 1)
                                                 if self.n_rep > 1 else 0.0)
            mask = 2 * tokens * keys * self.act_b  # written by the reset fill, read by the SDPA
            if self.engine.eager_scores:  # two batched GEMMs at the GEMM rate; ~24 bytes a score (ops.py's eager path)
                scores = tokens * keys * self.heads
                return (max(flops / self.gemm_rate, rep / self.bw) + self.floor_s,
                        (24.0 * scores + copies + mask) / (ELEMENTWISE_BW_FRACTION * self.bw))
            sdpa = rep * math.ceil(max(tokens, 1) / SDPA_QUERY_TILE) + 2 * tokens * self.heads * hd * self.act_b
            t = max(max(flops / (2 * MASKED_SDPA_FRACTION * self.attn_rate * self.occupancy(tokens)), sdpa / self.bw)
                    / CUDNN_MASKED_SDPA_SPEEDUP,
                    self.sdpa_waves(tokens) * math.ceil(keys / SDPA_KEY_TILE) * self.tile_s)
            return t + self.floor_s, (copies + mask) / (ELEMENTWISE_BW_FRACTION * self.bw)
        flops = 4.0 * pairs * self.heads * hd
        byts = kv_read * self.kv_tok_b + 2 * tokens * self.heads * hd * self.act_b
        return max(flops / self.attn_rate, byts / self.bw) + self.floor_s, 0.0


def build_step_model(m: ModelSpec, hw, engine, *, w_b: float, kv_b: float, compute: str, tp: int,
                     max_tokens: int, max_rows: int) -> StepModel:
    act_b = 2.0 if compute != "fp32" else 4.0
    tflops = hw.achievable_tflops(compute) * tp * engine.efficiency
    bw = hw.achievable_bw_gbs() * 1e9 * tp * engine.efficiency
    sms = sm_count(hw)
    sms = sms * tp if sms else None
    eager = engine_for("eager", hw)
    kernel_eng = engine_for("graph" if engine.decode_graph and not engine.dense_masked_attention else "eager", hw)
    topo = topology_for(hw, tp) if tp > 1 else None
    xs = _grid(max(max_tokens, max_rows, 1))
    linear, head = [], []
    for t in xs:
        ops = opsmod.forward_ops(m, t, 1, 0, act_b, w_b, act_b, head_tokens=t, hf_cache_cat=False, head_w_b=act_b)
        times = time_ops(ops, tflops, bw / 1e9, kernel_eng, sms, m.head_dim)
        linear.append(sum(x.gpu_s for x in times if x.kind not in SKIP and x.name not in HEAD)
                      + (2 * m.num_layers * collective_time("all_reduce", t * m.hidden_size * act_b, tp, topo)
                         if topo else 0.0))
        head.append(sum(x.gpu_s for x in times if x.name in HEAD))
    ops1 = opsmod.forward_ops(m, 1, 1, 0, act_b, w_b, act_b, head_tokens=1, hf_cache_cat=False, head_w_b=act_b)
    kernels = sum(o.kernels * o.count for o in ops1 if o.kind not in SKIP)
    kernels += m.num_layers * (EXTRA_SDPA_KERNELS if engine.dense_masked_attention else 2)
    n_rep = max(1, m.num_heads // max(1, m.num_kv_heads)) if not m.mla else 1
    return StepModel(xs, linear, head, kernels, eager.launch_s, eager.forward_s, m.num_layers, m.num_heads / tp,
                     m.head_dim, kv_bytes_per_token(m, kv_b, tp) / m.num_layers, act_b, n_rep,
                     tflops * 1e12 * attention_efficiency(m.head_dim), tflops * 1e12, bw,
                     kernel_eng.matmul_min_s, engine, sm_count(hw), _tile_s(hw, compute))


def _tile_s(hw, compute: str) -> float:
    """SDPA_TILE_S on ``hw``: scaled by the H200's dense peak per SM over this GPU's (the H200 itself: 1)."""
    sms = sm_count(hw)
    if not sms or not hw.supports(compute):
        return SDPA_TILE_S
    return SDPA_TILE_S * SDPA_TILE_PEAK_PER_SM / (hw.peak(compute) * 1e12 / sms)
