"""Execution-engine models: the host's cost of feeding the GPU, per kernel, forward and decode step, for each way
a model is run (specs/axes.PlannerEngine), and the host cost of an eager training step (TrainHost).
roofline.forward_time puts these beside the GPU's time.

- ``eager``: every kernel is launched from Python through the PyTorch dispatcher; the host spends t_launch per kernel
  (dispatch + Python module overhead) and a fixed t_step per generated token (generate's logits processing, stopping
  criteria, cache bookkeeping). The host runs ahead asynchronously, so a forward takes max(GPU time, host time).
- ``graph``: CUDA graphs / torch.compile with a static cache: one launch per forward, no Python per kernel, and a
  loop that never waits on the GPU (gpuscope's gs-compile), so the GPU time is the step time.
- ``hf-graph``: the same compiled step driven by HF ``generate`` (static cache, bench's hf-graph). On CUDA,
  generate reads its stopping criteria on the host every step (``unfinished_sequences.max() == 0``, a
  cudaStreamSynchronize per token; transformers 5.17-5.24 defer that read on MPS only), so the host work before the
  next graph replay never overlaps the GPU: per token it adds t_step plus the compiled call's own host time
  (Dynamo's guard check, the CUDA-graph tree's input checks, the graph launch) to the GPU time.
- ``graph-unfused``: HF's eager kernels replayed from one CUDA graph per step (gs-graph): no host cost per kernel,
  no fusion.
- ``hf-graph-defer``: hf-graph with generate's stop flag read one token late, so the host runs a step ahead.
Each constant below says where it was measured (research/results/<dated folder>/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.specs.axes import Engine, PlannerEngine


@dataclass(frozen=True)
class EngineModel:
    """Host-side costs of an execution engine (see the module docstring)."""

    name: str = "eager"
    launch_s: float = 17.2e-6  # host time per kernel: dispatcher, Python module code, cudaLaunchKernel
    # host time per kernel of an eager prefill where it was measured apart (`hardware calibrate --host` on a GPU:
    # host_prefill_launch_s); 0: launch_s
    prefill_launch_s: float = 0.0
    forward_s: float = 0.41e-3  # host time per forward outside the kernels (mask/rotary set-up, output objects)
    step_s: float = 0.4e-3  # generate's own work per token (logits processors, stopping criteria, bookkeeping)
    setup_s: float = 2.7e-3  # generate's work once per call before the prefill (config checks, cache, processors)
    kernel_min_s: float = 1.15e-6  # GPU-side floor per elementwise kernel
    matmul_min_s: float = 5.0e-6  # GPU-side floor per GEMM/GEMV (skinny GEMMs of a few MB)
    matmul_tail_s: float = 4.0e-6  # GPU-side cost per GEMM/GEMV kernel on top of streaming its bytes (see below)
    fused: bool = False  # compiled: chains of elementwise kernels fuse into one kernel per op
    # host time of one compiled call outside its kernels, fixed and per decoder layer, that the engine's loop
    # serialises with the GPU (hf-graph: generate's per-token sync); 0 where the loop runs ahead of the GPU
    call_s: float = 0.0
    call_layer_s: float = 0.0
    # ahead: the loop never waits for the token it just queued (hf-graph-defer: generate reads its stop flag one
    # token late), so its host time per step overlaps the GPU's and the slower of the two sets the pace; the GPU
    # then also runs the step's own small kernels (sampling, bookkeeping, replay gaps): gpu_step_s
    ahead: bool = False
    gpu_step_s: float = 0.0
    # HF generate over a StaticCache: the cache's tensors are made at the prompt's forward (transformers'
    # lazy_initialization, per layer), in units of the eager prefill's host cost per kernel: fixed and per layer
    cache_init_units: float = 0.0
    cache_init_layer_units: float = 0.0
    # the device is the host's CPU (estimate/cpu.CpuCosts, from the hardware entry's [measured.cpu]): every op runs
    # after its dispatch on the host, nothing overlaps; None on an accelerator
    cpu: object = None

    def cache_init_s(self, prefill_launch_s: float, layers: int) -> float:
        """Host seconds the StaticCache's creation adds to a TTFT (0 for the other engines)."""
        return (self.cache_init_units + self.cache_init_layer_units * layers) * prefill_launch_s

    def for_prefill(self) -> "EngineModel":
        """This engine as an eager prefill runs: per kernel the prefill's own host cost where one was measured."""
        from dataclasses import replace

        return replace(self, launch_s=self.prefill_launch_s) if self.prefill_launch_s else self

    def serial_host_s(self, layers: int) -> float:
        """Host seconds per step outside the launches: the loop's own step and the compiled call's host time. The
        GPU waits for all of it unless the engine runs ``ahead``."""
        return self.step_s + self.call_s + self.call_layer_s * layers

    def decode_step_s(self, gpu_wall_s: float, layers: int) -> float:
        """One decode step: the layers' time (``forward_time``'s wall) with the per-step host time in series, or,
        for an engine that runs ahead, the larger of the GPU's step and the host's."""
        if self.ahead:
            return max(gpu_wall_s + self.gpu_step_s, self.serial_host_s(layers))
        return gpu_wall_s + self.serial_host_s(layers)


# Host constants of eager decode, measured on an H200 machine's host (16-core VM, torch 2.11, transformers 5.17;
# research/results/2026-11-29-h200):
# - launch_s: the bare decode-step forward of llama-3.2-1b (batch 1; GPU busy ~1 ms of it) took 12.0 ms for
#   16 layers x 41 kernels + 17 others; tiny llama models (hidden 64) of 2/4/8 layers gave 0.643 ms per layer,
#   15.7 us per kernel (host_overhead.json): real sizes cost the host ~10% more per kernel. We use 17.2 us, the
#   tiny figure x REAL_SIZE_LAUNCH_FACTOR. `hardware calibrate --host` times Llama-3.2-1B-wide layers on a GPU
#   (decode and prefill apart: host_launch_s, host_prefill_launch_s; 17.5 / 19.3 us against the tiny models' 15.8
#   on that host, a real/tiny ratio of 1.11; research/results/2026-11-30-h200-f), and elsewhere the tiny models x
#   this factor. (Other runs read larger real/tiny ratios on the same host: 1.27 for Llama-3.1-8B's bare decode
#   forward, 1.38 for its 128-token prefill.)
# - forward_s: the tiny models' per-forward intercept (0.68 ms) less its 17 kernels.
# - step_s: generate's per-token time above the bare forward on the tiny models (0.29-0.53 ms).
# - kernel_min_s / matmul_min_s: in a CUDA graph a tiny elementwise kernel took 1.15 us, and a bf16 GEMV of a
#   1024x4096 or 2048x2048 weight 5-6 us (decode_ceilings.json); large GEMVs stream weights at 78-100% of the
#   copy bandwidth measured in the same run.
# - matmul_tail_s: a memory-bound GEMV costs its bytes at the bandwidth plus a fixed part (ramp-up, tail wave,
#   cuBLAS's split-K reduction kernel). Llama-3.1-8B decode on the H200 (research/results/2026-11-29-h200-c,
#   doctor kernel tables, gs-compile b1): a layer's 436 MB of projections took 137.6 us as 7 GEMVs (q, k, v, o, gate, up, down;
#   5 split-K reductions) and 119.2 us as 4 (q|k|v, o, gate|up, down; `--fuse-proj`): with 4128 GB/s (105.6 us for
#   the bytes) that is 4.6 and 3.4 us per GEMV; 4.0 us (least squares) puts both within 3%.
# - setup_s: TTFT minus the forward on tiny models (smoke.jsonl: tiny llama 3.2 ms, tiny gpt2 2.2 ms).
#   `hardware calibrate --host` measures it as host_setup_s (TTFT less the prompt's forward less step_s).
# A slower or faster host scales all three; on another host, `gpuscope hardware calibrate --host` measures them.
REAL_SIZE_LAUNCH_FACTOR = 17.2 / 15.7
# HF generate's TTFT over a StaticCache (hf-graph, hf-graph-defer) above the same over a DynamicCache (hf-eager):
# the StaticCache makes each layer's K and V tensors inside the prompt's forward (transformers 5.17
# cache_utils lazy_initialization; cProfile of an 8B TTFT: 32 calls, 23 ms under the profiler, most in a blocking
# `.to`), and the eager prefill's launches wait behind it. Measured on an H200 (research/results/2026-11-30-h200-j,
# research/scripts/gpu_ttft_overhead.py: one new token, so nothing compiled; medians of 7, three rounds
# alternating with the bare forward): hf-graph minus hf-eager TTFT 0.75 ms for a 2-layer tiny Llama,
# 1.91 ms for Llama-3.2-1B (16 layers), 2.55 ms for Llama-3.1-8B (32): least squares 0.745 ms + 59.5 us a layer,
# at a host probe of 2.1-2.6 ms, where that host's eager prefill costs about 21 us a kernel (the calibrations of
# the same hour: 26-28 us at a 3.0-3.2 ms probe). In those units: 35 + 2.8 per layer.
STATIC_CACHE_INIT = {"cache_init_units": 35.0, "cache_init_layer_units": 2.8}
# The planner's engine models, one per specs/axes.PlannerEngine (keyed by its value; PlannerEngine(name) rejects any
# other name).
ENGINES = {PlannerEngine(e.name).value: e for e in (
    EngineModel("eager"),
    # gpuscope's gs-compile loop never waits on the GPU, so its step_s is not host time: the measured gs-compile
    # TPOTs exceed the op list's GPU time by 0.17 ms (1B p512) to 0.3-0.6 ms (Llama-2-7B / Llama-3.1-8B, p128 and
    # p2048; research/results/2026-11-29-h200-b to -d), a per-step cost outside the layers' modelled kernels
    # (sampling over the vocabulary, replay gaps) that the 0.4 ms stands for. Not profiled per kernel.
    EngineModel("graph", launch_s=0.0, forward_s=0.0, step_s=0.4e-3, fused=True),
    # HF's eager kernels replayed from one CUDA graph per step (gpuscope's gs-graph loop): no host cost per kernel
    # and no generate() bookkeeping, but no fusion either. kernel_min_s from the H200 profile of
    # llama-3.2-1b b1 (research/results/2026-11-29-h200-b/doctor_gs_1b.json): 836 kernels per step, GEMVs 1.02 ms
    # of a 2.57 ms step -> (2.57 - 1.02) ms / 723 small kernels = 2.1 us each, replay gaps included.
    EngineModel("graph-unfused", launch_s=0.0, forward_s=0.0, step_s=0.0, setup_s=0.0,
                                 kernel_min_s=2.1e-6),
    # HF generate over the compiled static-cache step. Measured on an H200 (research/results/2026-11-30-h200,
    # research/scripts/gpu_hf_graph.py, torch 2.11, transformers 5.17): per decode token one
    # cudaGraphLaunch, ~30 small kernels of generate's own, and one cudaStreamSynchronize. TPOT minus the
    # profiled GPU kernel time per token, medians of 5-15 calls, on Llama models of 2, 8 and 32 layers (hidden
    # 256), Llama-3.2-1B (16) and Llama-3.1-8B (32): 0.94, 1.52, 1.42, 1.13, 1.36 ms; least squares
    # 1.12 ms + 8.6 us per layer (residuals within 0.33 ms). Less t_step (0.4 ms): call_s 0.72 ms. Six later bench
    # infer runs of this engine read -1% to -19% against it: the host time in series varies between runs on that
    # VM (back to back, script and bench agreed).
    EngineModel("hf-graph", launch_s=0.0, forward_s=0.0, step_s=0.4e-3, fused=True,
                            call_s=0.72e-3, call_layer_s=8.6e-6, **STATIC_CACHE_INIT),
    # hf-graph with transformers' DeferredStopCheck switched on for CUDA (bench --defer-stop,
    # measure/llm/defer_stop.py): the same host work per token (step_s + call_s + call_layer_s x layers), now one token ahead of the GPU. The
    # GPU's own per-step residual is the graph loop's 0.4 ms (generate's sampling kernels and the replay). Measured
    # on an H200 (research/results/2026-11-30-h200-f): the per-token cudaStreamSynchronize is gone (1 -> 0 per
    # token; one event wait on the token before instead), Llama-3.2-1B p128 TPOT 2.57 -> 1.64 ms with 1.42 ms of
    # profiled GPU time a token, Llama-3.1-8B p128 7.76 -> 5.76 ms (gs-compile: 5.69 ms in an earlier run), and
    # 5.14 ms with --fuse-proj, the same as gs-compile --fuse-proj's 5.14 ms in the same run.
    EngineModel("hf-graph-defer", launch_s=0.0, forward_s=0.0, step_s=0.4e-3, fused=True,
                                  call_s=0.72e-3, call_layer_s=8.6e-6, ahead=True, gpu_step_s=0.4e-3,
                                  **STATIC_CACHE_INIT),
)}


@dataclass(frozen=True)
class TrainHost:
    """Host time of an eager training step, in units of the engine's ``launch_s`` (a calibrated, faster or slower
    host scales it). Host seconds of one micro-batch (estimate/train.train_host_s), per forward kernel the planner
    counts (its training forward ops) and per call:

    - ``fwd`` / ``bwd``: a forward kernel under autograd / its backward (the autograd engine's nodes and their
      kernels); tiny Llama models of 2/4/8 layers: 0.748 ms per 42-kernel layer forward (1.30 launch_s), 1.26 ms
      backward (2.19).
    - ``recompute``: full recompute's re-forward of a kernel in the backward (+1.97 ms a layer: 3.42 per kernel);
      ``ckpt_layer``: the checkpoint's own Python per layer (+0.88 ms in the forward: 64.1), per layer because it
      did not grow with a layer's kernels (GPT-2's 21-25 and Llama's 37-42 added alike).
    - ``fwd_fixed`` / ``bwd_fixed``: the rest of a forward / backward call (HF's loss, module entry, autocast,
      embeddings, final norm, head and loss kernels): intercepts 1.74 and 0.93 ms less ``other_kernels`` kernels at
      ``fwd`` / ``bwd`` (98 and 20). ``other_kernels``: the kernels outside the layers those intercepts were netted
      of (22, the tiny Llama's; a calibration that states its intercepts whole writes 0).
    - ``opt_fixed`` / ``opt_tensor``: fused AdamW's Python and zero_grad per step, and per parameter tensor
      (0.27 ms + 8 us).

    Fitted on an H200 machine's host: research/results/2026-11-29-h200-d/train_host.json
    (research/scripts/gpu_train_host.py: each phase timed with a synchronize around it, 20 steps, pooled over
    amp-bf16, bf16 and amp-fp16, at a decode launch_s of 13.7 us); the per-layer checkpoint and per-call fixed
    costs: research/results/2026-11-30-h200-i (train_phases.json; priced per kernel a 2-layer GPT-2 fp32
    full-recompute step read 21-25% short of its measured 6.5-6.9 ms, as here 7-10%)."""

    fwd: float = 1.30
    bwd: float = 2.19
    recompute: float = 3.42
    ckpt_layer: float = 64.1
    fwd_fixed: float = 98.0
    bwd_fixed: float = 20.0
    other_kernels: float = 22.0
    opt_fixed: float = 19.8
    opt_tensor: float = 0.58


TRAIN_HOST = TrainHost()
# a hardware TOML's [measured] keys (`gpuscope hardware calibrate --host`) -> TrainHost fields
TRAIN_HOST_KEYS = {"host_train_fwd": "fwd", "host_train_bwd": "bwd", "host_train_recompute": "recompute",
                   "host_train_ckpt_layer": "ckpt_layer", "host_train_fwd_fixed": "fwd_fixed",
                   "host_train_bwd_fixed": "bwd_fixed", "host_train_other_kernels": "other_kernels",
                   "host_opt_fixed": "opt_fixed", "host_opt_tensor": "opt_tensor"}


def train_host_for(hw) -> TrainHost:
    """The training host costs: this machine's measured ones where the hardware TOML has them, else TRAIN_HOST."""
    from dataclasses import replace

    m = getattr(hw, "measured", None) or {}
    over = {f: float(m[k]) for k, f in TRAIN_HOST_KEYS.items() if m.get(k) is not None}
    if "recompute" in over and "ckpt_layer" not in over:
        # an older calibration, without ckpt_layer, put the whole recompute in its per-kernel cost
        over["ckpt_layer"] = 0.0
    return replace(TRAIN_HOST, **over) if over else TRAIN_HOST


STATIC_CACHE_ENGINES = tuple(e.value for e in PlannerEngine if e.static_cache)


def planner_engine(case: dict) -> str:
    """The planner engine that models a measured infer case: its bench engine (Engine.planner), with hf-graph
    under --defer-stop as hf-graph-defer. hf-eager under --defer-stop stays eager: a launch-bound step is host
    time whether or not the loop waits (one of eager's two syncs a token goes; Llama-3.2-1B p128 read 20.3 against
    22.6 ms/token, inside the eager runs' own spread, research/results/2026-11-30-h200-f)."""
    engine = case.get("engine", Engine.HF_EAGER.value)
    if engine not in Engine.values():
        return PlannerEngine.EAGER.value
    return Engine(engine).planner(defer_stop=bool(case.get("defer_stop"))).value


def engine_for(name: str, hw) -> EngineModel:
    """The engine's host costs, with this machine's measured ones (`gpuscope hardware calibrate`: host_launch_s,
    host_forward_s, host_step_s, host_setup_s, host_prefill_launch_s in the hardware TOML's [measured] table) where
    present."""
    from dataclasses import replace

    eng = ENGINES[name]
    m = getattr(hw, "measured", None) or {}
    over = {}
    if name == "eager":
        over = {f: float(m[k]) for f, k in (("launch_s", "host_launch_s"), ("forward_s", "host_forward_s"),
                                            ("prefill_launch_s", "host_prefill_launch_s")) if m.get(k) is not None}
    over |= {f: float(m[k]) for f, k in (("step_s", "host_step_s"), ("setup_s", "host_setup_s"))
             if m.get(k) is not None}
    from gpuscope.estimate.cpu import cpu_costs

    cpu = cpu_costs(hw)
    if cpu is not None:  # a CPU entry (this host's ceilings): its ops in series with their dispatch (estimate/cpu.py)
        over["cpu"] = cpu
    return replace(eng, **over) if over else eng
