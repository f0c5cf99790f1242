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
  >= 1.2 and above what a uniform router's sampling noise gives, measure/llm/moe_routing.py): the grouped expert
  GEMMs slow down (H200, Mixtral-8x7B prefill: 1.5x at a
  median of 1.25), and the planner, which assumes balanced routing, will be optimistic. No speed-up is claimed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from gpuscope.estimate.engines import ENGINES

GIB = 2**30
MIB = 2**20

THRESHOLDS = {
    "launch_idle_fraction": 0.5,
    "launch_min_kernels": 100,
    "launch_max_kernel_mean_s": 50e-6,
    "dataloader_fraction": 0.10,
    "sync_refill_fraction": 0.05,
    "sync_min_calls": 2,
    "matmul_align": 8,
    "matmul_misaligned_share": 0.05,
    "matmul_misaligned_slowdown": 1.5,  # typical cost of an unaligned 16-bit GEMM vs its padded shape (rough)
    "comm_fraction": 0.05,
    "comm_overlap_min": 0.5,
    "frag_fraction": 0.25,
    "frag_min_bytes": 256 * MIB,
    "throttle_fraction": 0.10,
    "headroom_used_max": 0.5,
    "headroom_target": 0.9,
    "plan_ratio": 1.3,
    "moe_imbalance": 1.2,
    "serial_host_share": 0.10,
    "gc_share": 0.05,
    "steal_share": 0.05,
}

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


@dataclass
class Finding:
    code: str
    title: str
    severity: str  # high | medium | low | info
    evidence: dict
    fix: str
    estimated_effect: str
    speedup: float | None = None  # estimated step-time factor if fixed (>= 1), where one can be given
    memory_saved_bytes: float | None = None
    docs: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _num(d: dict | None, *keys):
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d if isinstance(d, (int, float)) and not isinstance(d, bool) else None


def _sev(speedup: float) -> str:
    return "high" if speedup >= 1.5 else "medium" if speedup >= 1.15 else "low"


# --- rules -----------------------------------------------------------------------------------------------------
def launch_bound(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    """The GPU idles between short kernels for reasons other than waiting on the data loader (that time is the
    dataloader_stall finding's, and is taken out here so the two effects are not counted twice)."""
    if s.get("timeline") != "device_kernels":
        return None
    n, kmean, gap, busy = (_num(s, k) for k in ("kernel_count", "kernel_mean_s", "gap_mean_s", "busy_s"))
    window = _num(s, "active_s") or _num(s, "wall_s")
    if None in (n, kmean, gap, window, busy) or n == 0:
        return None
    dl = _num(s, "dataloader_s") or 0.0
    prof = _num(s, "profiler_overhead_s") or 0.0
    host = max(window - dl - prof, busy)  # the window without the data wait and the profiler's own host time
    idle = 1.0 - busy / host if host > 0 else 0.0
    if idle < t["launch_idle_fraction"] or n < t["launch_min_kernels"] or kmean > t["launch_max_kernel_mean_s"] \
            or gap < kmean:
        return None
    speedup = host / max(busy, 1e-12)
    ev = {"idle_fraction": idle, "kernel_count": n, "kernel_mean_us": kmean * 1e6, "gap_mean_us": gap * 1e6,
          "host_us_per_kernel": host / n * 1e6, "busy_s": busy, "active_s": window}
    if dl:
        ev["dataloader_s_excluded"] = dl
    if prof:
        ev["profiler_overhead_s_excluded"] = prof
    return Finding(
        "launch_bound", "CPU/launch-bound: the GPU idles between small kernels", _sev(speedup), ev,
        "Remove the per-kernel host cost: capture the step in CUDA graphs (torch.compile(mode='reduce-overhead')). "
        "gpuscope's graph loops: --engine gs-compile (torch.compile + one CUDA graph per step; 8.0x plain generate "
        "for Llama-3.2-1B at batch 1 on an H200) or gs-graph (no compile). HF generate with a static KV cache "
        "(cache_implementation='static', --engine hf-graph) compiles the same step but still waits on the GPU "
        "every token (~1.1-2.4 ms of host per token in series on an H200 host: the generate_waits finding). "
        "And/or raise the batch so each kernel does more work for the same launch cost.",
        f"the step can fall towards the GPU's busy time: up to {speedup:.1f}x faster "
        f"({host * 1e3:.1f} -> {busy * 1e3:.1f} ms); a larger batch raises tokens/s at nearly the "
        "same step time while launch-bound", speedup=speedup)


def dataloader_stall(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    f, dl = _num(s, "dataloader_fraction"), _num(s, "dataloader_s")
    wall = _num(s, "active_s") or _num(s, "wall_s")
    if f is None or dl is None or wall is None or f < t["dataloader_fraction"]:
        return None
    speedup = 1.0 / max(1e-9, 1.0 - f)
    ev = {"dataloader_s": dl, "dataloader_fraction": f, "calls": s.get("dataloader_calls"), "active_s": wall}
    pageable = _num(s, "h2d", "pageable_count")
    if pageable:
        ev["h2d_pageable_copies"] = pageable
    return Finding(
        "dataloader_stall", "Data-loader stall: the training loop waits for batches", _sev(speedup), ev,
        "Load in the background: DataLoader(num_workers=4..8 (one per spare core), pin_memory=True, "
        "prefetch_factor=2..4, persistent_workers=True), copy with .to(device, non_blocking=True); move heavy "
        "decoding/tokenisation out of __getitem__ (pre-tokenise).",
        f"up to {f:.0%} of the wall time is waiting on data: up to {speedup:.2f}x faster when loading overlaps "
        "compute", speedup=speedup)


def host_sync(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    if s.get("timeline") != "device_kernels":
        return None
    # the idle the syncs cost (profile.host_syncs: recoverable_s, bounded by the host's wait inside each sync);
    # summaries from before it carry only refill_s, all of the GPU's idle after syncs
    n, refill = _num(s, "syncs", "calls"), _num(s, "syncs", "recoverable_s")
    if refill is None:
        refill = _num(s, "syncs", "refill_s")
    window = _num(s, "active_s") or _num(s, "wall_s")
    if None in (n, refill, window) or window <= 0 or n < t["sync_min_calls"]:
        return None
    # The GPU cannot idle after syncs for longer than it idles at all: cap the fraction at the window's idle part
    # (1 - busy_s / window) where the summary has busy_s, and at 0.95 in any case (busy_s missing, or ~0), so that
    # a refill_s over-counted or measured on another window (refill_s > window was once read as "612% of the
    # window ... up to 1000000000x faster") still gives a fraction <= 1 and a finite speedup <= 1 / (1 - cap), 20x.
    busy = _num(s, "busy_s")
    cap = min(0.95, max(0.0, 1.0 - busy / window)) if busy is not None else 0.95
    frac = min(refill / window, cap)
    if frac < t["sync_refill_fraction"]:
        return None
    speedup = 1.0 / max(1e-9, 1.0 - frac)
    callers = (s.get("syncs") or {}).get("callers") or []
    ev = {"syncs": n, "recoverable_idle_s": refill, "gpu_idle_after_syncs_s": _num(s, "syncs", "refill_s"),
          "fraction_of_window": frac,
          "host_wait_s": _num(s, "syncs", "wait_s"), "issued_by": callers}
    steps = _num(s, "steps")
    if steps:
        ev["syncs_per_step"] = n / steps
    return Finding(
        "host_sync", "Host-device synchronisations drain the GPU's queue", _sev(speedup), ev,
        "Keep values on the device inside the loop: no .item(), .cpu(), .tolist() or print(tensor) per step (log "
        "every N steps, or accumulate the loss on the device); avoid data-dependent shapes (nonzero, boolean "
        "indexing) and blocking copies (.to(device) from pinned memory with non_blocking=True). "
        "torch.cuda.set_sync_debug_mode('warn') names each sync's line.",
        f"the GPU sat idle {refill * 1e3:.1f} ms ({frac:.0%} of the window) after {n:.0f} syncs with work still "
        f"queued when the host stopped: up to "
        f"{speedup:.2f}x faster without them", speedup=speedup)


def matmul_shapes(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    if s.get("timeline") != "device_kernels":  # tensor cores: a GPU question
        return None
    mms = s.get("matmuls") or []
    total = _num(s, "matmul_s") or sum(m.get("self_s", 0.0) for m in mms)
    if not mms or not total:
        return None
    a = t["matmul_align"]
    bad = [m for m in mms if m.get("n", 0) % a or m.get("k", 0) % a]
    # a dim of 1 (GEMV, bias grads) is not a tensor-core shape either way; ignore it
    bad = [m for m in bad if min(m.get("n", 0), m.get("k", 0)) > 1]
    share = sum(m["self_s"] for m in bad) / total
    if share < t["matmul_misaligned_share"]:
        return None
    saved = share * (1 - 1 / t["matmul_misaligned_slowdown"])
    mm_frac = total / s["wall_s"] if _num(s, "wall_s") else 1.0
    speedup = 1.0 / max(1e-9, 1.0 - saved * min(1.0, mm_frac))

    def pad(x):
        return x if x % a == 0 else (x + 63) // 64 * 64

    worst = sorted(bad, key=lambda m: -m["self_s"])[:5]
    return Finding(
        "matmul_shapes", f"Matmul shapes that waste the tensor cores (dims not a multiple of {a})", _sev(speedup),
        {"misaligned_share_of_matmul_time": share, "matmul_s": total,
         "shapes": [{"m": m["m"], "n": m["n"], "k": m["k"], "dtype": m.get("dtype"), "count": m["count"],
                     "self_s": m["self_s"], "pad_to": [pad(m["n"]), pad(m["k"])]} for m in worst]},
        "Pad the model's dimensions to multiples of 64 (e.g. vocab 50257 -> 50304, hidden/intermediate sizes), "
        "keep head_dim a multiple of 8, and use bf16/fp16 so the tensor cores are used.",
        f"{share:.0%} of matmul time is in unaligned shapes; at ~{t['matmul_misaligned_slowdown']}x their aligned "
        f"cost, up to {speedup:.2f}x on the step", speedup=speedup)


def comm_not_overlapped(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    c, wall = _num(s, "comm", "s"), _num(s, "wall_s")
    ov = _num(s, "comm", "overlap_fraction")
    if not c or not wall or ov is None:
        return None
    if c / wall < t["comm_fraction"] or ov >= t["comm_overlap_min"]:
        return None
    exposed = c * (1 - ov)
    speedup = wall / max(1e-12, wall - exposed)
    return Finding(
        "comm_not_overlapped", "Communication not overlapped with compute", _sev(speedup),
        {"comm_s": c, "comm_fraction": c / wall, "overlap_fraction": ov, "exposed_s": exposed},
        "Overlap collectives with compute: DDP with gradient bucketing (bucket_cap_mb 25-100, "
        "gradient_as_bucket_view=True, no find_unused_parameters), FSDP with backward_prefetch=BACKWARD_PRE and "
        "forward_prefetch=True, or torch.compile's compute/communication reordering; avoid a synchronize between "
        "backward and the collective.",
        f"{exposed * 1e3:.1f} ms of exposed communication per profile: up to {speedup:.2f}x faster if hidden",
        speedup=speedup)


def fragmentation(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    m = s.get("memory") or {}
    res, alloc = _num(m, "peak_reserved_bytes"), _num(m, "peak_allocated_bytes")
    retries = _num(m, "num_alloc_retries") or 0
    if res is None or alloc is None or res <= 0:
        return None
    gap = res - alloc
    frag = gap / res
    if not (retries > 0 or (frag >= t["frag_fraction"] and gap >= t["frag_min_bytes"])):
        return None
    if m.get("expandable_segments") and retries == 0:
        return None
    sev = "high" if retries > 0 else "medium"
    return Finding(
        "fragmentation", "Allocator fragmentation: reserved far above allocated", sev,
        {"peak_reserved_gib": res / GIB, "peak_allocated_gib": alloc / GIB, "unused_reserved_gib": gap / GIB,
         "fragmented_fraction": frag, "num_alloc_retries": retries,
         "expandable_segments": m.get("expandable_segments")},
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PYTORCH_ALLOC_CONF in newer PyTorch); keep shapes "
        "steady (pad sequences to a few bucket lengths, drop the last partial batch); do not call "
        "torch.cuda.empty_cache() in the loop.",
        f"frees up to {gap / GIB:.2f} GiB of cached but unusable memory"
        + (f" and removes {retries} allocator retries (each a cudaFree + synchronize)" if retries else ""),
        memory_saved_bytes=gap)


def throttling(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    nv = s.get("nvml") or {}
    frac = _num(nv, "throttled_fraction")
    if frac is None or frac < t["throttle_fraction"]:
        return None
    cmax, cmin, cmed = (_num(nv, k) for k in ("sm_clock_mhz_max", "sm_clock_mhz_min", "sm_clock_mhz_median"))
    speedup = (cmax / cmed) if cmax and cmed else None
    reasons = nv.get("throttle_reasons_seen") or []
    return Finding(
        "throttling", "Thermal or power throttling: the clocks were held down", "high" if frac >= 0.5 else "medium",
        {"throttled_fraction": frac, "reasons": reasons, "sm_clock_mhz_min": cmin, "sm_clock_mhz_median": cmed,
         "sm_clock_mhz_max": cmax, "temperature_c_max": nv.get("temperature_c_max"),
         "power_w_median": nv.get("power_w_median")},
        "Check cooling and the power limit (nvidia-smi -q -d PERFORMANCE,POWER; raise it with nvidia-smi -pl where "
        "allowed), other jobs on the same GPU, and the data-centre inlet temperature; benchmark numbers from a "
        "throttled run are not the card's steady state.",
        (f"clocks back at {cmax:.0f} MHz from a median {cmed:.0f} MHz: up to {speedup:.2f}x on compute-bound work"
         if speedup else f"{frac:.0%} of samples throttled"), speedup=speedup)


def memory_headroom(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    m = s.get("memory") or {}
    total, peak = _num(m, "device_total_bytes"), _num(m, "peak_reserved_bytes")
    if not total or peak is None:
        return None
    used = peak / total
    if used >= t["headroom_used_max"]:
        return None
    static = _num(m, "allocated_start_bytes") or 0.0
    dyn = max(1.0, (_num(m, "peak_allocated_bytes") or peak) - static)
    factor = max(1.0, (t["headroom_target"] * total - static) / dyn)
    return Finding(
        "memory_headroom", "Memory headroom left unused", "low" if factor < 2 else "medium",
        {"peak_reserved_gib": peak / GIB, "device_total_gib": total / GIB, "used_fraction": used,
         "static_gib": static / GIB, "batch_memory_growth_possible": factor},
        "Use it: a larger batch or micro-batch (gpuscope tune batch finds the largest and the throughput-optimal "
        "one), a longer sequence, or drop activation recompute if it is on.",
        f"the per-batch memory could grow about {factor:.1f}x before {t['headroom_target']:.0%} of the device is "
        "used; on a launch- or bandwidth-bound run tokens/s grows almost in proportion")


def slower_than_planned(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    cmp_ = s.get("estimate") or {}
    est, meas = _num(cmp_, "estimated_s"), _num(cmp_, "measured_s")
    if not est or not meas or meas / est < t["plan_ratio"]:
        return None
    r = meas / est
    return Finding(
        "slower_than_planned", f"{r:.1f}x slower than the planner's estimate for this configuration",
        _sev(r), {"metric": cmp_.get("metric"), "estimated_s": est, "measured_s": meas, "ratio": r,
                  "hardware": cmp_.get("hardware")},
        "The other findings say where the time goes; if none fires, check clocks, other processes on the device, "
        "and that the hardware entry (--gpu) is the device that ran.",
        f"matching the estimate would be {r:.1f}x faster", speedup=r)


def moe_imbalance(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    r = s.get("moe_routing") or {}
    med, n, e = _num(r, "imbalance_median"), _num(r, "rows_largest_call"), _num(r, "experts")
    if med is None or med < t["moe_imbalance"]:
        return None
    # Even a uniform router gives max/mean > 1 from sampling alone: the largest of E counts of n rows sits about
    # sqrt(2 ln E) standard deviations (sqrt(n / E)) above the mean n / E, i.e. max/mean ~ 1 + sqrt(2 ln E x E / n)
    # (1.13 for Mixtral's 2,048 rows over 8 experts; 1.42 for 64 rows over 4). Below that it is noise, not skew.
    noise = 1.0 + math.sqrt(2.0 * math.log(e) * e / n) if n and e and e > 1 else 1.0
    if med < noise:
        return None
    return Finding(
        "moe_imbalance", "MoE routing is uneven: the busiest expert gets more rows than the grouped GEMMs like",
        "medium", {"layers": r.get("layers"), "experts": r.get("experts"), "imbalance_median": med,
                   "imbalance_max": _num(r, "imbalance_max"), "rows_largest_call": r.get("rows_largest_call"),
                   "uniform_routing_noise": noise},
        "Random weights route unevenly (no load-balancing loss shaped them): time MoE models with a checkpoint's "
        "own weights (bench infer --weights) before trusting expert-bound timings. With a trained model, skewed "
        "routing makes hot experts the bottleneck: check the router's auxiliary loss / capacity factor, and under "
        "expert parallelism place hot experts apart.",
        f"the median layer gives its busiest expert {med:.2f}x the mean rows; on an H200 Mixtral's grouped expert "
        "GEMMs ran 1.5x slower at a median of 1.25 than with equal groups, and the planner assumes equal groups")


def generate_waits(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    case, cmp_ = s.get("case") or {}, s.get("estimate") or {}
    gen, n = case.get("gen"), _num(s, "syncs", "calls")
    serial, gpu = _num(cmp_, "planner_decode_serial_host_s"), _num(cmp_, "planner_decode_gpu_s")
    est = _num(cmp_, "estimated_s")
    if (case.get("engine") != "hf-graph" or case.get("defer_stop") or not isinstance(gen, int) or gen < 2
            or None in (n, serial, gpu, est)):
        return None
    step = gpu + serial
    if n < gen or serial / step < t["serial_host_share"]:
        return None
    ahead = ENGINES["hf-graph-defer"]  # the same step with the host one token ahead: the slower side sets the pace
    saved = (gen - 1) * max(0.0, step - max(gpu + ahead.gpu_step_s, serial))
    speedup = est / max(1e-12, est - saved)
    return Finding(
        "generate_waits", "HF generate waits on the GPU every token: the compiled step's host work is not hidden",
        _sev(speedup), {"syncs": n, "generated_tokens": gen, "syncs_per_token": n / gen,
                        "planner_host_in_series_ms": serial * 1e3, "planner_gpu_ms": gpu * 1e3,
                        "host_share_of_step": serial / step},
        "Let generate read its stop flag one token late, so the next step is queued while the GPU runs: "
        "transformers (5.17+) has DeferredStopCheck for this but enables it on MPS only; bench --defer-stop, or "
        "`with gpuscope.measure.llm.defer_stop.deferred_stop(): model.generate(...)` in your own code, enables it on "
        "CUDA/XPU with transformers' other conditions kept (Llama-3.1-8B at p128 on an H200: 7.76 -> 5.76 ms/token, "
        "5.14 with --fuse-proj, the same tokens). Or decode in a loop that never waits (gpuscope's --engine "
        "gs-compile: 5.7 ms/token) or a serving engine (vLLM, SGLang) that schedules ahead.",
        f"the planner puts {serial * 1e3:.2f} ms of each {step * 1e3:.2f} ms decode step on the host in series: "
        f"up to {speedup:.2f}x faster generate without the wait", speedup=speedup)


def gc_pauses(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    """Python's collector paused the host for a share of the bare run (measure/host/gc_pauses.GCPauses)."""
    pause, bare = _num(s, "gc", "gc_pause_s"), _num(s, "gc", "bare_s")
    if pause is None or not bare or pause / bare < t["gc_share"]:
        return None
    speedup = bare / max(1e-12, bare - pause)
    return Finding(
        "gc_pauses", "Python's garbage collector pauses the host during the run", _sev(speedup),
        {"gc_pause_s": pause, "bare_s": bare, "share": pause / bare,
         "collections_by_generation": (s.get("gc") or {}).get("gc_collections_by_generation"),
         "tracked_objects": _num(s, "gc", "tracked_objects")},
        "After warm-up (and after torch.compile / CUDA-graph capture), call gc.collect(); gc.freeze(): the live "
        "objects (model, compiled graphs, guards) leave the collector's reach, so each full collection stops walking "
        "them (vLLM does this after capture). bench infer --gc-freeze measures it. Or allocate fewer Python objects "
        "per step (no per-step lists/dicts of tensors kept alive).",
        f"the collector held the host {pause * 1e3:.1f} ms of a {bare * 1e3:.1f} ms run "
        f"({pause / bare:.0%}): up to {speedup:.2f}x if those pauses go", speedup=speedup)


def host_steal(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    """The hypervisor gave a share of the CPUs to other guests during the run (measure/host/load.HostLoad)."""
    steal = _num(s, "host_load", "steal_fraction")
    if steal is None or steal < t["steal_share"]:
        return None
    return Finding(
        "host_steal", "The virtual machine's CPUs were taken by the hypervisor during the run", "info",
        {"steal_fraction": steal, "busy_fraction": _num(s, "host_load", "busy_fraction"),
         "involuntary_switches": _num(s, "host_load", "involuntary_switches")},
        "Host-bound timings (eager decode, small training steps, launch-bound phases) read slow while other guests "
        "run on the same physical cores: measure again when the host is quiet, on a dedicated or bare-metal "
        "instance, and calibrate (`hardware calibrate --host`) in the same minutes as the runs it plans.",
        f"the hypervisor took {steal:.0%} of the CPUs' time while this ran; the host-side share of the step is "
        "slower by about as much or more")


RULES = (launch_bound, dataloader_stall, host_sync, matmul_shapes, comm_not_overlapped, fragmentation, throttling,
         memory_headroom, slower_than_planned, generate_waits, moe_imbalance, gc_pauses, host_steal)


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
    peak = _num(summary, "memory", "peak_allocated_bytes")
    rows.append({"metric": "peak_bytes", "estimated": est.peak_bytes_per_gpu, "measured": peak})
    out = {"hardware": est.hardware, "calibrated": est.calibrated, "rows": rows, "metric": metric,
           "estimated_s": est_t, "measured_s": meas_t, "measured_timing": timing, "fits": est.fits}
    if kind == "infer" and "decode_host_s" in est.time:
        out["planner_host_bound"] = est.time["decode_host_s"] > est.time.get("decode_gpu_s", 0.0)
        out["planner_decode_gpu_s"] = est.time.get("decode_gpu_s")
        out["planner_decode_host_s"] = est.time["decode_host_s"]
        out["planner_decode_serial_host_s"] = est.time.get("decode_serial_host_s")
    return out
