"""The doctor's host-side rules: launch-bound steps, data-loader stalls, host-device syncs, generate's per-token
wait, garbage-collector pauses and CPU steal (thresholds and their reasons: explain/findings.py).
"""

from __future__ import annotations

from gpuscope.estimate.engines import ENGINES
from gpuscope.explain.finding import Finding, THRESHOLDS, num, severity


def launch_bound(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    """The GPU idles between short kernels for reasons other than waiting on the data loader (that time is the
    dataloader_stall finding's, and is taken out here so the two effects are not counted twice)."""
    if s.get("timeline") != "device_kernels":
        return None
    n, kmean, gap, busy = (num(s, k) for k in ("kernel_count", "kernel_mean_s", "gap_mean_s", "busy_s"))
    window = num(s, "active_s") or num(s, "wall_s")
    if None in (n, kmean, gap, window, busy) or n == 0:
        return None
    dl = num(s, "dataloader_s") or 0.0
    prof = num(s, "profiler_overhead_s") or 0.0
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
        "launch_bound", "CPU/launch-bound: the GPU idles between small kernels", severity(speedup), ev,
        "Remove the per-kernel host cost: capture the step in graphs (CUDA graphs; HIP graphs on ROCm through the same "
        "torch.cuda API; XPU graphs on Intel GPUs in newer PyTorch; torch.compile(mode='reduce-overhead')). "
        "gpuscope's graph loops: --engine gs-compile (torch.compile + one CUDA graph per step; 8.0x plain generate "
        "for Llama-3.2-1B at batch 1 on an H200) or gs-graph (no compile). HF generate with a static KV cache "
        "(cache_implementation='static', --engine hf-graph) compiles the same step but still waits on the GPU "
        "every token (~1.1-2.4 ms of host per token in series on an H200 host: the generate_waits finding). "
        "And/or raise the batch so each kernel does more work for the same launch cost.",
        f"the step can fall towards the GPU's busy time: up to {speedup:.1f}x faster "
        f"({host * 1e3:.1f} -> {busy * 1e3:.1f} ms); a larger batch raises tokens/s at nearly the "
        "same step time while launch-bound", speedup=speedup)


def dataloader_stall(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    f, dl = num(s, "dataloader_fraction"), num(s, "dataloader_s")
    wall = num(s, "active_s") or num(s, "wall_s")
    if f is None or dl is None or wall is None or f < t["dataloader_fraction"]:
        return None
    speedup = 1.0 / max(1e-9, 1.0 - f)
    ev = {"dataloader_s": dl, "dataloader_fraction": f, "calls": s.get("dataloader_calls"), "active_s": wall}
    pageable = num(s, "h2d", "pageable_count")
    if pageable:
        ev["h2d_pageable_copies"] = pageable
    return Finding(
        "dataloader_stall", "Data-loader stall: the training loop waits for batches", severity(speedup), ev,
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
    n, refill = num(s, "syncs", "calls"), num(s, "syncs", "recoverable_s")
    if refill is None:
        refill = num(s, "syncs", "refill_s")
    window = num(s, "active_s") or num(s, "wall_s")
    if None in (n, refill, window) or window <= 0 or n < t["sync_min_calls"]:
        return None
    # The GPU cannot idle after syncs for longer than it idles at all: cap the fraction at the window's idle part
    # (1 - busy_s / window) where the summary has busy_s, and at 0.95 in any case (busy_s missing, or ~0), so that
    # a refill_s over-counted or measured on another window (refill_s > window was once read as "612% of the
    # window ... up to 1000000000x faster") still gives a fraction <= 1 and a finite speedup <= 1 / (1 - cap), 20x.
    busy = num(s, "busy_s")
    cap = min(0.95, max(0.0, 1.0 - busy / window)) if busy is not None else 0.95
    frac = min(refill / window, cap)
    if frac < t["sync_refill_fraction"]:
        return None
    speedup = 1.0 / max(1e-9, 1.0 - frac)
    callers = (s.get("syncs") or {}).get("callers") or []
    ev = {"syncs": n, "recoverable_idle_s": refill, "gpu_idle_after_syncs_s": num(s, "syncs", "refill_s"),
          "fraction_of_window": frac,
          "host_wait_s": num(s, "syncs", "wait_s"), "issued_by": callers}
    steps = num(s, "steps")
    if steps:
        ev["syncs_per_step"] = n / steps
    return Finding(
        "host_sync", "Host-device synchronisations drain the GPU's queue", severity(speedup), ev,
        "Keep values on the device inside the loop: no .item(), .cpu(), .tolist() or print(tensor) per step (log "
        "every N steps, or accumulate the loss on the device); avoid data-dependent shapes (nonzero, boolean "
        "indexing) and blocking copies (.to(device) from pinned memory with non_blocking=True). "
        "torch.cuda.set_sync_debug_mode('warn') names each sync's line.",
        f"the GPU sat idle {refill * 1e3:.1f} ms ({frac:.0%} of the window) after {n:.0f} syncs with work still "
        f"queued when the host stopped: up to "
        f"{speedup:.2f}x faster without them", speedup=speedup)


def generate_waits(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    case, cmp_ = s.get("case") or {}, s.get("estimate") or {}
    gen, n = case.get("gen"), num(s, "syncs", "calls")
    serial, gpu = num(cmp_, "planner_decode_serial_host_s"), num(cmp_, "planner_decode_gpu_s")
    est = num(cmp_, "estimated_s")
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
        severity(speedup), {"syncs": n, "generated_tokens": gen, "syncs_per_token": n / gen,
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
    pause, bare = num(s, "gc", "gc_pause_s"), num(s, "gc", "bare_s")
    if pause is None or not bare or pause / bare < t["gc_share"]:
        return None
    speedup = bare / max(1e-12, bare - pause)
    return Finding(
        "gc_pauses", "Python's garbage collector pauses the host during the run", severity(speedup),
        {"gc_pause_s": pause, "bare_s": bare, "share": pause / bare,
         "collections_by_generation": (s.get("gc") or {}).get("gc_collections_by_generation"),
         "tracked_objects": num(s, "gc", "tracked_objects")},
        "After warm-up (and after torch.compile / graph capture), call gc.collect(); gc.freeze(): the live "
        "objects (model, compiled graphs, guards) leave the collector's reach, so each full collection stops walking "
        "them (vLLM does this after capture). bench infer --gc-freeze measures it. Or allocate fewer Python objects "
        "per step (no per-step lists/dicts of tensors kept alive).",
        f"the collector held the host {pause * 1e3:.1f} ms of a {bare * 1e3:.1f} ms run "
        f"({pause / bare:.0%}): up to {speedup:.2f}x if those pauses go", speedup=speedup)


def host_steal(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    """The hypervisor gave a share of the CPUs to other guests during the run (measure/host/load.HostLoad)."""
    steal = num(s, "host_load", "steal_fraction")
    if steal is None or steal < t["steal_share"]:
        return None
    return Finding(
        "host_steal", "The virtual machine's CPUs were taken by the hypervisor during the run", "info",
        {"steal_fraction": steal, "busy_fraction": num(s, "host_load", "busy_fraction"),
         "involuntary_switches": num(s, "host_load", "involuntary_switches")},
        "Host-bound timings (eager decode, small training steps, launch-bound phases) read slow while other guests "
        "run on the same physical cores: measure again when the host is quiet, on a dedicated or bare-metal "
        "instance, and calibrate (`hardware calibrate --host`) in the same minutes as the runs it plans.",
        f"the hypervisor took {steal:.0%} of the CPUs' time while this ran; the host-side share of the step is "
        "slower by about as much or more")
