"""The doctor's rules: pure functions from a profile summary (``gpuscope.measure.profile.profiler``, schema
``gpuscope.profile/1``) to findings, each with the numbers that triggered it, a fix and its estimated effect.

No torch here: every rule reads plain dict keys, so it is tested on synthetic summaries. A rule returns ``None``
when it stays quiet or when the summary lacks what it needs (e.g. NVML on a CPU run).

Thresholds (``THRESHOLDS``; each rule documents why):
- launch_bound: device idle >= 50% of the wall time, >= 100 kernels, mean kernel <= 50 us and the mean gap
  between kernels >= the mean kernel. The H200 runs (research/results/2026-11-29-h200) showed eager batch-1 decode at
  ~17 us host per kernel with kernels of a few us: the GPU idles most of the step. Only on a device timeline.
- dataloader_stall: >= 10% of the wall time inside ``DataLoader.__next__`` in the main process.
- host_sync: host-device synchronisations (``.item()``, ``.cpu()``, ``print(tensor)``, data-dependent shapes such
  as ``nonzero``, blocking copies) cost >= 5% of the window: each drains the device queue and the GPU waits for the
  host to launch the next kernel. Counted is only the idle a sync could give back, per sync the lesser of the host's
  wait inside it (the work still queued) and the gap after it, data-loader waits excluded (profile.host_syncs:
  recoverable_s); a sync on an already drained GPU costs nothing. At least 2 syncs. Only on a device timeline.
- matmul_shapes: matmuls with n or k not a multiple of 8 (16-bit tensor cores want 16-byte multiples: 8 elements
  for fp16/bf16; cuBLAS picks padded or CUDA-core kernels otherwise) taking >= 5% of matmul time. m is the token
  count and usually not under the model's control, so it is not checked. Only on a device timeline.
- comm_not_overlapped: collectives >= 5% of the wall time and < 50% of them overlapped by compute kernels.
- fragmentation: (peak reserved - peak allocated) >= 25% of peak reserved and >= 256 MiB, or any allocator retry
  (``num_alloc_retries``: cudaMalloc failed, the cache was flushed and the call retried: a synchronizing stall).
- throttling: >= 10% of NVML samples with a clock-holding reason (power cap, thermal, hardware slowdown).
- memory_headroom: peak reserved < 50% of the device's memory (the batch could grow).
- slower_than_planned: measured time > 1.3x the planner's estimate for the same configuration.
- generate_waits: HF generate over a compiled static-cache step (--engine hf-graph) reads its stopping criteria on
  the host every token (one cudaStreamSynchronize per token on CUDA), so the compiled call's host work (Dynamo's
  guards, the CUDA-graph tree's checks, the launch) runs while the GPU idles. Fires on an hf-graph case with at
  least one sync per generated token when the planner's host time in series is >= 10% of its decode step
  (H200: 1.4 ms of a 6.5-7.1 ms Llama-3.1-8B step). The speed-up is the planner's, against the same step in a loop
  that never waits (gs-compile).
- moe_imbalance: an MoE router sends the experts uneven rows (median over layers of max/mean rows per expert
  >= 1.2 and above what a uniform router's sampling noise gives, measure/llm/moe_routing.py): the planner prices
  the grouped expert GEMMs in whole tile units per expert under a uniform router's binomial counts (estimate/moe.py),
  so a more skewed router is slower than planned. No speed-up is claimed.
- cudnn_graph_builds: a plain-generate case (hf-eager, SDPA) on the planner's cuDNN path (estimate/cudnn_sdpa.py:
  sm90/sm100 under torch >= 2.10 with cuDNN > 9.15) measured >= plan_ratio x the warm plan, the excess >= half the
  graph builds its G - 1 steps would pay at new KV lengths (cudnn_build_share 0.5: the H200's new-length steps sat
  at 1.0-1.5x of one 42.6 ms build above the seen ones, research/tests/test_h200_dec02c_cudnn.py; a warm run's
  excess is a host level, well under half of them).
- offload_fresh_pages (diffusion, explain/rules_offload.py): a model-offload point measured >= plan_ratio x its
  steady-state plan whose timed calls met minor page faults worth >= offload_fault_share (0.05) of the call and half
  the excess, at FAULT_S a page. The plan ratio keeps it quiet on a settled run: after four warm-ups the bench's
  SDXL call still met 0.44 GB (mmapped tensors, 17% at FAULT_S) yet ran within 8% of the plan; after two it met
  0.57 GB and ran 1.48x the catalog plan (research/results/2026-12-02-h200-d/offload.md).
"""

from __future__ import annotations

from gpuscope.explain.finding import SEVERITY_ORDER, THRESHOLDS, Finding, num, severity
from gpuscope.explain.rules_cudnn import cudnn_graph_builds
from gpuscope.explain.rules_gpu import comm_not_overlapped, matmul_shapes, moe_imbalance, throttling
from gpuscope.explain.rules_host import dataloader_stall, gc_pauses, generate_waits, host_steal, host_sync, launch_bound
from gpuscope.explain.rules_memory import fragmentation, memory_headroom
from gpuscope.explain.rules_diffusion import RULES as DIFFUSION_RULES  # a `bench diffusion` point's summary


def slower_than_planned(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    cmp_ = s.get("estimate") or {}
    est, meas = num(cmp_, "estimated_s"), num(cmp_, "measured_s")
    if not est or not meas or meas / est < t["plan_ratio"]:
        return None
    r = meas / est
    return Finding(
        "slower_than_planned", f"{r:.1f}x slower than the planner's estimate for this configuration",
        severity(r), {"metric": cmp_.get("metric"), "estimated_s": est, "measured_s": meas, "ratio": r,
                  "hardware": cmp_.get("hardware")},
        "The other findings say where the time goes; if none fires, check clocks, other processes on the device, "
        "and that the hardware entry (--gpu) is the device that ran.",
        f"matching the estimate would be {r:.1f}x faster", speedup=r)


RULES = (launch_bound, dataloader_stall, host_sync, matmul_shapes, comm_not_overlapped, fragmentation, throttling,
         memory_headroom, slower_than_planned, generate_waits, moe_imbalance, gc_pauses, host_steal,
         cudnn_graph_builds) + DIFFUSION_RULES


def diagnose(summary: dict, thresholds: dict | None = None) -> list[Finding]:
    """Every rule on the summary; findings sorted by severity, then estimated speedup."""
    t = dict(THRESHOLDS, **(thresholds or {}))
    out = [f for rule in RULES if (f := rule(summary, t)) is not None]
    return sorted(out, key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), -(f.speedup or 1.0)))


def bare_time(summary: dict) -> tuple[float | None, str]:
    """(seconds of one step or generate call, how it was timed) from a profile summary: the bare run of gpuscope's
    own workloads (``bare_s`` over ``steps`` steps), else a bare-run script's median step (``bare_step_s``), else
    the profiled median step (the profiler's overhead included), else the profiled wall time."""
    steps = summary.get("steps") or 0
    if summary.get("bare_s") and steps:
        return summary["bare_s"] / steps, "bare"
    if summary.get("bare_step_s"):
        return summary["bare_step_s"], "bare"
    if summary.get("step_s_median"):
        return summary["step_s_median"], "profiled"
    return summary.get("wall_s"), "profiled"


def compare_estimate(est, summary: dict) -> dict:
    """The planner's Estimate (same configuration) beside a profile summary of a gpuscope workload. Pure.

    infer: the profiled ``generate`` of G tokens vs prefill_s + (G - 1) x decode_s_per_token; train: the median
    profiled step vs step_s; memory: the peak allocated vs peak_bytes_per_gpu. ``estimated_s``/``measured_s`` feed
    the ``slower_than_planned`` rule; ``planner_host_bound`` says whether the planner itself expects the decode
    step to be limited by host launch time (eager engine). The time compared is the bare (unprofiled) one where
    the profile has it (``measured_timing``): the profiler's own cost is not the workload's (GPT-2 training on an
    H200: 52.0 ms a step profiled, 31.7 ms bare; research/results/2026-11-30-h200-f)."""
    rows = []
    kind = est.kind
    meas_t, timing = bare_time(summary)
    if kind == "infer":
        g = (summary.get("case") or {}).get("gen") or 1
        est_t = est.time["prefill_s"] + (g - 1) * est.time["decode_s_per_token"]
        metric = "generate_s"
    else:
        est_t, metric = est.time["step_s"], "step_s"
    rows.append({"metric": metric, "estimated": est_t, "measured": meas_t})
    peak = num(summary, "memory", "peak_allocated_bytes")
    rows.append({"metric": "peak_bytes", "estimated": est.peak_bytes_per_gpu, "measured": peak})
    out = {"hardware": est.hardware, "calibrated": est.calibrated, "rows": rows, "metric": metric,
           "estimated_s": est_t, "measured_s": meas_t, "measured_timing": timing, "fits": est.fits}
    if kind == "infer" and "decode_host_s" in est.time:
        out["planner_host_bound"] = est.time["decode_host_s"] > est.time.get("decode_gpu_s", 0.0)
        out["planner_decode_gpu_s"] = est.time.get("decode_gpu_s")
        out["planner_decode_host_s"] = est.time["decode_host_s"]
        out["planner_decode_serial_host_s"] = est.time.get("decode_serial_host_s")
        out["planner_cudnn_build_s_per_step"] = est.time.get("cudnn_sdpa_build_s_per_step")
        out["planner_decode_cold_s"] = est.time.get("decode_s_per_token_cold")
    return out
