"""Serving engines as the planner models them: their KV-cache page, memory rule, batch limits, scheduler and how
they launch a step. Each default is read from the engine's source or documentation (cited beside it).

- ``transformers``: transformers 5.x continuous batching (``generate_batch`` / ``init_continuous_batching``), as
  5.17 resolves its ``ContinuousBatchingConfig`` (generation/configuration_utils.py, continuous_batching/
  initialization.py, cache.py, scheduler.py): pages (blocks) of 256 tokens; 90% of the memory free after the model
  is loaded (80% when logits processors run, e.g. sampling); max_batch_tokens 8192 (bounded by memory);
  max_requests_per_batch min(requests, 1024); a FIFO scheduler that puts decoding requests first, splits prompts
  that do not fit the token budget (chunked prefill) and admits no new prompt once fewer than 15% of the blocks are
  free; preemption when a request cannot get a block (its cache is dropped and recomputed: cpu_offload_space 0).
  Attention: without a flash-attention package the model runs ``paged|sdpa``, which reads every scheduled request's
  KV back from the cache and runs one SDPA over the packed batch with a dense [M, N + M] mask; an attention mask
  turns CUDA graphs and async batching off by default (``decide_use_cuda_graphs``), so every step is eager, with the
  host's batch preparation and torch's cuDNN SDPA graph build for the step's new shape in series. With flash attention (``attn="flash"``): varlen flash for prefill, the
  ``flash_attn_with_kvcache`` block-table fast path for decode, CUDA graphs on both paths and async batching
  (double IO buffers).
- ``vllm``: vLLM V1 (vllm/engine/arg_utils.py ``get_batch_defaults``): 16-token blocks, gpu_memory_utilization 0.9
  of the device's total memory, chunked prefill always on, on a GPU of 70 GiB or more (not A100) the API server's
  max_num_batched_tokens 8192 and max_num_seqs 1024 (2048 / 256 below 70 GiB); decode under piecewise CUDA
  graphs; preemption by recompute of the latest-admitted request.
- ``trtllm``: TensorRT-LLM's PyTorch backend under ``trtllm-bench``: 32-token blocks (KvCacheConfig
  tokens_per_block), kv_cache_free_gpu_mem_fraction 0.90 of the memory free after weights and activations,
  max_batch_size 2048 and max_num_tokens 8192 (LLM API defaults), CUDA-graph decode (the perf-overview's
  ``cuda_graph_config`` batch sizes up to 8192), and the GUARANTEED_NO_EVICT capacity scheduler (the default
  ``CapacitySchedulerPolicy``): a request is admitted only when the blocks of its whole prompt + output are free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuscope.errors import UserError
from gpuscope.estimate.cudnn_sdpa import GRAPH_BUILD_S

GIB = 2**30


@dataclass(frozen=True)
class ServeEngine:
    name: str
    block_size: int
    mem_rule: str  # "transformers" | "vllm" | "trtllm" (kv_pages.py)
    mem_fraction: float
    max_num_seqs: int
    max_batched_tokens: int
    safety_margin: float = 0.0  # fraction of blocks below which no new prompt is admitted
    decode_graph: bool = True  # decode steps replayed from CUDA graphs (no launch cost per kernel)
    mixed_graph: bool = False  # steps with prefill tokens too (vLLM's piecewise graphs; transformers' flash varlen)
    dense_masked_attention: bool = False  # transformers paged|sdpa: one SDPA over the packed batch, dense mask
    eager_scores: bool = False  # transformers paged|eager: the scores as two GEMMs, mask add and fp32 softmax
    # host time per step outside the kernels, in series with the GPU (a synchronous loop) or overlapped (async)
    host_step_s: float = 0.0
    host_per_request_s: float = 0.0
    host_per_kv_token_s: float = 0.0  # building the read indices of every cached token read (transformers sdpa)
    host_per_finish_s: float = 0.0  # host seconds in series per request that finishes in a step (scheduler._finish)
    host_overlapped: bool = True
    # host seconds of an eager step in series with everything else (step_time.StepModel.step_s): transformers'
    # paged|sdpa builds a cuDNN SDPA graph for each step's new shape
    host_graph_build_s: float = 0.0
    # the fraction of the roofline's GEMM and bandwidth rates this engine's kernels reach (1.0: the op model's own)
    efficiency: float = 1.0
    # admit a request only with blocks for its whole prompt + output (TensorRT-LLM's GUARANTEED_NO_EVICT capacity
    # scheduler): nothing is ever preempted, fewer sequences run at once
    reserve_full: bool = False
    source: str = ""


# transformers CB host work per step, in series with the GPU (a synchronous loop): prepare_next_batch (the scheduler,
# prepare_batch_tensors' Python per request and the 3 device kernels of its mask block: torch.full, triu, the copy
# in) and update_batch: 56.5 us a request; the read-index list of every cached position read (list.extend per
# block, then torch.tensor of the list): 146 ns a KV token (read + new); 1.0 ms a step. A least-squares fit of
# prepare + update over every step of research/scripts/gpu_serve_cb.py on an H200's host (transformers 5.17,
# research/results/2026-12-02-h200/call3/serve_cb.json, median error 9%); a CPU probe of the same loop had 17 us a
# request (no device kernels for the mask) and 150 ns a KV token (research/results/2026-12-02-cpu-serve-host).
TRANSFORMERS_HOST = dict(host_step_s=1.0e-3, host_per_request_s=56.5e-6, host_per_kv_token_s=146e-9,
                         host_overlapped=False, host_graph_build_s=GRAPH_BUILD_S, host_per_finish_s=0.87e-3)
# host_per_finish_s: what a request that finishes costs the synchronous loop, after its last token is stamped
# (update_batch: free_blocks, active_requests.pop, to_generation_output, deliver_batch's queue put; the consumer's
# get_result in the client thread, under the same GIL). Set by the drain of the 1024 x 128/128 run
# (research/results/2026-12-02-h200-b/call1/gpu_serve2, 17 decode steps of 2-960 requests after ~60 finish each):
# the measured step less the planned, over the requests that finished in the step before, median 0.87 ms (0.60-1.87).
# The code's own Python for it is ~10 us a request (a CPU probe of 5.17's RequestState.to_generation_output and the
# rest: research/results/2026-12-02-h200-c/serve.md), so ~99% of it is host time the code does not show (the
# cyclic GC and the GIL hand-off to the client thread are candidates, not measured). Checks: serve.md.
# host_graph_build_s: torch 2.11 runs paged|sdpa's masked SDPA through cuDNN, whose graph is built for each new
# (queries, keys) shape and cached; a CB step's shape is new every step (the KV read grows), all layers share it. The
# trace of three decode steps (research/results/2026-12-02-h200-c/call2/gpu_serve5, probe: 64 requests at 33k KV
# tokens) has 37.1, 41.8 and 48.8 ms with no CUDA call just before the first layer's SDPA launch, the GPU idle,
# then the other 1583 launches at 21.5-27.5 us each while the GPU runs behind (the step waits 15-24 ms on it at the
# end): 42.6 ms a step, in series (estimate/cudnn_sdpa.GRAPH_BUILD_S, shared with plan infer's cold decode). Measured
# on the H200's gVisor host (a host CPU cost; another host's may differ).
# vLLM and TensorRT-LLM: host work per step assumed (not measured), overlapped with the GPU (V1's and the PyTorch
# backend's overlapping schedulers); at the batch sizes of research/tests/test_published_serve.py it never binds.
ENGINES = {
    "transformers": ServeEngine("transformers", 256, "transformers", 0.9, 1024, 8192, safety_margin=0.15,
                                decode_graph=False, dense_masked_attention=True, **TRANSFORMERS_HOST,
                                source="transformers 5.17 continuous batching, paged|sdpa"),
    "vllm": ServeEngine("vllm", 16, "vllm", 0.9, 1024, 8192, mixed_graph=True, host_step_s=1.0e-3,
                        host_per_request_s=2e-6,
                        source="vLLM V1 defaults (API server, >= 70 GiB GPU)"),
    "trtllm": ServeEngine("trtllm", 32, "trtllm", 0.9, 2048, 8192, host_step_s=0.5e-3, host_per_request_s=1e-6,
                          reserve_full=True, source="TensorRT-LLM PyTorch backend, trtllm-bench defaults"),
}


def serve_engine(name: str, hw=None, *, attn: str = "sdpa", sampling: bool = False, requests: int | None = None,
                 mem_fraction: float | None = None, max_num_seqs: int | None = None,
                 max_batched_tokens: int | None = None, block_size: int | None = None) -> ServeEngine:
    """The engine ``name`` with its defaults for this GPU and workload, and any override given."""
    key = (name or "").lower()
    if key not in ENGINES:
        raise UserError(f"--engine '{name}' is not one of {', '.join(ENGINES)}.")
    e = ENGINES[key]
    if key == "vllm" and hw is not None and (hw.device_total_bytes < 70 * GIB or "a100" in hw.key):
        e = replace(e, max_num_seqs=256, max_batched_tokens=2048)
    if key == "transformers":
        if attn not in ("sdpa", "eager", "flash"):
            raise UserError(f"--attn '{attn}' is not one of sdpa, eager, flash.")
        if attn == "eager":  # paged|eager: as paged|sdpa, the scores through matmul, mask add, softmax, matmul
            e = replace(e, eager_scores=True, host_graph_build_s=0.0,
                        source="transformers 5.17 continuous batching, paged|eager")
        if sampling:
            e = replace(e, mem_fraction=0.8)  # resolve_max_memory_percent: 0.8 with logits processors
        if requests:
            e = replace(e, max_num_seqs=min(requests, e.max_num_seqs))  # resolve_using_hints
        if attn == "flash":  # no mask: CUDA graphs and async batching on (initialization.py)
            e = replace(e, decode_graph=True, mixed_graph=True, dense_masked_attention=False, host_overlapped=True,
                        host_per_kv_token_s=0.0, host_graph_build_s=0.0, host_per_finish_s=0.0,
                        source="transformers 5.17 continuous batching, paged flash")
    over = {k: v for k, v in dict(mem_fraction=mem_fraction, max_num_seqs=max_num_seqs,
                                  max_batched_tokens=max_batched_tokens, block_size=block_size).items()
            if v is not None}
    return replace(e, **over) if over else e
