"""The reduction of a torch.profiler run to the doctor's summary dict (its keys: measure/profile/profiler.py's
docstring): the busy timeline and its gaps, top ops, matmul shapes, data-loader waits, host-to-device copies,
host-device synchronisations and what they cost, collective overlap, allocator statistics and NVML."""

from __future__ import annotations

import os
import statistics

import torch

from gpuscope.measure.device.device import Device

SCHEMA = "gpuscope.profile/1"
DATALOADER_TAG = "enumerate(DataLoader)"
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")
COMM_TAGS = ("nccl", "rccl", "ccl:", "allreduce", "all_reduce", "allgather", "reducescatter")


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _overlap(xs: list[tuple[float, float]], ys_union: list[tuple[float, float]]) -> float:
    """Length of the intersection of the intervals xs (unioned first) with an already-unioned list."""
    total, j = 0.0, 0
    for a, b in _union(xs):
        while j < len(ys_union) and ys_union[j][1] <= a:
            j += 1
        k = j
        while k < len(ys_union) and ys_union[k][0] < b:
            total += max(0.0, min(b, ys_union[k][1]) - max(a, ys_union[k][0]))
            k += 1
    return total


SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "hipStreamSynchronize",
             "hipDeviceSynchronize", "hipEventSynchronize")


def host_syncs(syncs: list[tuple[float, float, str]], kernel_starts: list[float],
               exclude: list[tuple[float, float]] | None = None) -> dict:
    """Host-device synchronisations and the GPU time they cost. ``syncs``: (start, end, caller) of each runtime
    sync call (caller: the aten op that issued it, e.g. aten::_local_scalar_dense for ``.item()``);
    ``kernel_starts``: sorted start times of the device kernels; ``exclude``: host intervals (start, end) that are
    not the syncs' cost, in the same clock and unit (seconds): the outermost DataLoader ``__next__`` calls.

    After a sync returns the device queue is empty, so the GPU idles until the host launches the next kernel.
    ``refill_s`` is the length of the union of the intervals [sync end, next kernel start] over all syncs, less its
    overlap with the union of ``exclude`` (that part is ``refill_excluded_s``):
    - union, not a sum per sync: several syncs in a row before the same kernel (a run of blocking ``aten::copy_``
      from pageable memory, then ``.item()``) share one idle gap; summing per sync counted it once per sync
      (an H200 run of examples/train_slow_loader.py reported 23.8 s of refill inside a 3.9 s window);
    - data waits excluded: the gap after a sync also holds the host's wait inside the DataLoader's ``__next__``,
      which is the data loader's cost (``dataloader_s``, the dataloader_stall finding), not the sync's; counting
      it here too double-counted the data wait.
    ``wait_s``: host time blocked inside the syncs (their own durations, summed).

    ``recoverable_s``: what removing the syncs could give back, sum over syncs of min(host wait inside the sync,
    its idle gap less data waits). Idle after a sync is not all the sync's fault: a host that is slower than the GPU
    (launch-bound, or busy in Python) leaves the GPU idle with or without syncs. Without the sync the host would have
    stayed ahead of the GPU by exactly the work still queued when it reached the sync, which is the time it waited
    there; that queued work is the most the next gap could have been filled with. A sync the GPU had already drained
    (wait ~0) costs nothing: the H200 slow-loader run had 4.9 s of post-sync idle but 19 ms of waits in 171 syncs."""
    import bisect

    gaps, callers, per_sync = [], {}, []
    excl_u = _union(list(exclude or []))
    for a, b, who in syncs:
        k = bisect.bisect_left(kernel_starts, b)
        if k < len(kernel_starts):
            gaps.append((b, kernel_starts[k]))
            gap = kernel_starts[k] - b - (_overlap([(b, kernel_starts[k])], excl_u) if excl_u else 0.0)
            per_sync.append(min(b - a, max(0.0, gap)))
        callers[who] = callers.get(who, 0) + 1
    gap_u = _union(gaps)
    idle = sum(b - a for a, b in gap_u)
    excluded = _overlap(gap_u, excl_u) if gap_u else 0.0
    top = sorted(callers.items(), key=lambda kv: -kv[1])[:5]
    return {"calls": len(syncs), "wait_s": sum(b - a for a, b, _ in syncs), "refill_s": max(0.0, idle - excluded),
            "refill_excluded_s": excluded, "recoverable_s": sum(per_sync),
            "callers": [{"op": k, "count": v} for k, v in top]}


def _caller(e) -> str:
    p = e.cpu_parent
    while p is not None and not p.name.startswith("aten::"):
        p = p.cpu_parent
    return p.name if p is not None else "(python)"


def is_device(e) -> bool:
    from torch.autograd import DeviceType

    return e.device_type != DeviceType.CPU


def _top_level(events) -> list:
    """CPU aten ops that are not inside another aten op (DataLoader/user annotations do not count as parents)."""
    out = []
    for e in events:
        if is_device(e) or not e.name.startswith("aten::"):
            continue
        p, nested = e.cpu_parent, False
        while p is not None:
            if p.name.startswith("aten::"):
                nested = True
                break
            p = p.cpu_parent
        if not nested:
            out.append(e)
    return out


def _mnk(name: str, shapes: list) -> tuple[int, int, int] | None:
    try:
        if name in ("aten::mm", "aten::_scaled_mm"):
            m, k = shapes[0][-2:]
            n = shapes[1][-1]
        elif name == "aten::addmm":
            (m, k), (_, n) = shapes[1], shapes[2]
        elif name == "aten::bmm":
            m, k = shapes[0][-2:]
            n = shapes[1][-1]
        elif name == "aten::baddbmm":
            m, k = shapes[1][-2:]
            n = shapes[2][-1]
        else:
            return None
        return int(m), int(n), int(k)
    except (IndexError, TypeError, ValueError):
        return None


def _matmuls(events, use_device: bool) -> list[dict]:
    groups: dict[tuple, dict] = {}
    for e in events:
        if is_device(e) or e.name not in MATMUL_OPS:
            continue
        mnk = _mnk(e.name, list(e.input_shapes or []))
        if mnk is None:
            continue
        dts = list(getattr(e, "input_dtypes", None) or [])
        dt = next((d for d in dts if d), "")
        key = (e.name, *mnk, dt)
        g = groups.setdefault(key, {"op": e.name, "m": mnk[0], "n": mnk[1], "k": mnk[2], "dtype": dt,
                                    "count": 0, "self_s": 0.0})
        g["count"] += 1
        g["self_s"] += (e.self_device_time_total if use_device else e.self_cpu_time_total) / 1e6
    return sorted(groups.values(), key=lambda g: -g["self_s"])


def memory_stats(dev: Device) -> dict:
    if dev.type != "cuda":
        return {"allocated_bytes": dev.allocated(), "reserved_bytes": dev.reserved()}
    st = torch.cuda.memory_stats(dev.torch_device)
    return {"allocated_bytes": st.get("allocated_bytes.all.current"), "reserved_bytes": st.get(
        "reserved_bytes.all.current")}


def allocator(dev: Device, mem0: dict) -> dict:
    out = {"device_total_bytes": dev.total_memory(), "allocated_start_bytes": mem0.get("allocated_bytes"),
           "reserved_start_bytes": mem0.get("reserved_bytes"), "peak_allocated_bytes": dev.peak_allocated(),
           "peak_reserved_bytes": dev.peak_reserved(), "allocated_end_bytes": dev.allocated(),
           "reserved_end_bytes": dev.reserved(), "num_alloc_retries": None, "num_ooms": None,
           "inactive_split_bytes": None, "expandable_segments": None}
    if dev.type == "cuda":
        st = torch.cuda.memory_stats(dev.torch_device)
        out.update(num_alloc_retries=st.get("num_alloc_retries"), num_ooms=st.get("num_ooms"),
                   inactive_split_bytes=st.get("inactive_split_bytes.all.current"))
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", "")
        out["expandable_segments"] = "expandable_segments:true" in conf.replace(" ", "").lower()
    return out


def _split_device_events(events) -> tuple[list, list]:
    """(kernels, copies) of the device events: memcpy/memset are copies, the rest kernels."""
    dev_events = [e for e in events if is_device(e)]
    copies = [e for e in dev_events if "memcpy" in e.name.lower() or "memset" in e.name.lower()]
    copy_ids = {id(e) for e in copies}
    return [e for e in dev_events if id(e) not in copy_ids], copies


def _top_ops(events, kernels, use_device: bool) -> list[dict]:
    """Ops by self time: device kernels on GPUs, CPU ops' self time on CPU."""
    agg: dict[str, list] = {}
    for e in (kernels if use_device else [e for e in events if not is_device(e)]):
        t = (e.time_range.end - e.time_range.start if use_device else e.self_cpu_time_total) / 1e6
        a = agg.setdefault(e.name, [0, 0.0])
        a[0] += 1
        a[1] += t
    return sorted(({"name": k, "count": v[0], "self_s": v[1]} for k, v in agg.items()), key=lambda d: -d["self_s"])


def _dataloader_waits(events) -> tuple[list, float]:
    """The outermost DataLoader ``__next__`` annotations and their CPU seconds."""
    dl = [e for e in events if not is_device(e) and DATALOADER_TAG in e.name]
    outer = [e for e in dl if not (e.cpu_parent is not None and DATALOADER_TAG in e.cpu_parent.name)]
    return outer, sum(e.cpu_time_total for e in outer) / 1e6


def _h2d_copies(copies, use_device: bool) -> dict:
    """Host-to-device copies: count, seconds, and how many came from pageable memory (none on CPU)."""
    if not use_device:  # on CPU there are no host-to-device copies
        return {"count": 0, "s": 0.0, "pageable_count": 0}
    h2d = [e for e in copies if "htod" in e.name.lower().replace(" ", "")]
    return {"count": len(h2d), "s": sum((e.time_range.end - e.time_range.start) for e in h2d) / 1e6,
            "pageable_count": sum(1 for e in h2d if "pageable" in e.name.lower())}


def _communication(kernels) -> dict:
    """Collective kernels: their union's seconds and the fraction of it overlapped by compute kernels."""
    comm = [e for e in kernels if any(t in e.name.lower() for t in COMM_TAGS)]
    comm_ids = {id(e) for e in comm}
    compute_u = _union([(e.time_range.start / 1e6, e.time_range.end / 1e6) for e in kernels if id(e) not in comm_ids])
    comm_iv = [(e.time_range.start / 1e6, e.time_range.end / 1e6) for e in comm]
    comm_s = sum(b - a for a, b in _union(comm_iv))
    return {"kernels": len(comm), "s": comm_s,
            "overlap_fraction": (_overlap(comm_iv, compute_u) / comm_s) if comm_s > 0 else None}


def _sync_costs(events, iv, dl_outer) -> dict:
    """host_syncs over the runtime's sync calls, against the kernels' starts, the data-loader waits left out."""
    syncs = [(e.time_range.start / 1e6, e.time_range.end / 1e6, _caller(e)) for e in events
             if not is_device(e) and e.name in SYNC_APIS]
    dl_iv = [(e.time_range.start / 1e6, e.time_range.end / 1e6) for e in dl_outer]  # same clock as syncs
    return host_syncs(sorted(syncs), sorted(a for a, _ in iv), dl_iv)


def _nvml_summary(sampler) -> dict:
    if sampler is None:
        return {"unavailable": "no NVIDIA device profiled"}
    r = sampler.result(with_samples=False)
    return r["summary"] if r.get("summary") else {"unavailable": r.get("unavailable")}


def _profiler_overhead(active: float, steps: list[float], cpu_events: int, per_event_s: float, bare_s, bare_step_s,
                       dl_s: float, busy: float) -> tuple[float, str]:
    """The profiler's own host time and how it was had: measured (the window less the same work timed bare) where
    the caller ran it bare, else estimated (CPU events x the cost per event calibrated on this host). Either way it
    cannot exceed what is left of the window after the data-loader wait and the GPU's busy time: the estimate
    varies 2x between runs of the same script (H200: 5.6-15.5 us per event against 10.5-10.9 us calibrated), and
    an over-estimate must not turn the rest of the window into a data-loader stall or erase the GPU's busy time."""
    if bare_s is not None:
        over, source = max(0.0, active - bare_s), "bare_run"
    elif bare_step_s is not None and steps:
        over, source = max(0.0, statistics.median(steps) - bare_step_s) * len(steps), "bare_steps"
    else:
        over, source = cpu_events * per_event_s, "per_event"
    return min(over, max(0.0, active - dl_s - busy)), source


def _busy_fields(units, iv, busy_u, active: float, steps: list[float]) -> dict:
    """The timeline's busy time, idle fraction, kernel count and the gaps between busy intervals."""
    busy = sum(b - a for a, b in busy_u)
    gaps = [b0 - a1 for (_, a1), (b0, _) in zip(busy_u, busy_u[1:]) if b0 - a1 > 0]
    durs = [b - a for a, b in iv]
    return {"busy_s": busy, "idle_fraction": max(0.0, 1.0 - busy / active) if active > 0 else None,
            "kernel_count": len(units), "kernel_mean_s": statistics.fmean(durs) if durs else None,
            "gap_mean_s": statistics.fmean(gaps) if gaps else 0.0,
            "gap_median_s": statistics.median(gaps) if gaps else 0.0,
            "kernels_per_step": len(units) / len(steps) if steps else None}


def summarize_profile(prof, dev: Device, wall_s: float, marks: list[float], mem0: dict, sampler=None,
                      per_event_s: float = 0.0, bare_s: float | None = None,
                      bare_step_s: float | None = None) -> dict:
    """The summary dict of a finished profile (keys: measure/profile/profiler.py's docstring)."""
    events = list(prof.events() or [])
    cpu_events = sum(1 for e in events if not is_device(e))
    kernels, copies = _split_device_events(events)
    use_device = bool(kernels)
    units = kernels if use_device else _top_level(events)
    iv = [(e.time_range.start / 1e6, e.time_range.end / 1e6) for e in units]
    busy_u = _union(iv)
    # The active window: first kernel (op) start to last end. A script's set-up before its first kernel (imports,
    # building the model on the CPU) is not idle GPU time the doctor can do anything about.
    active = min(wall_s, busy_u[-1][1] - busy_u[0][0]) if busy_u else wall_s
    steps = [b - a for a, b in zip(marks, marks[1:])]
    busy = _busy_fields(units, iv, busy_u, active, steps)
    dl_outer, dl_s = _dataloader_waits(events)
    prof_over, over_source = _profiler_overhead(active, steps, cpu_events, per_event_s, bare_s, bare_step_s, dl_s,
                                                busy["busy_s"])
    mms = _matmuls(events, use_device)
    return {
        "schema": SCHEMA,
        "device": dev.name, "device_type": dev.type, "device_name": dev.device_name(),
        "torch": torch.__version__,
        "wall_s": wall_s,
        "steps": len(steps), "step_s_median": statistics.median(steps) if steps else None,
        "timeline": "device_kernels" if use_device else "cpu_ops",
        "active_s": active,
        "cpu_events": cpu_events, "profiler_s_per_event": per_event_s,
        "profiler_overhead_s": prof_over, "profiler_overhead_source": over_source, "bare_s": bare_s,
        "bare_step_s": bare_step_s,
        **busy,
        "top_ops": _top_ops(events, kernels, use_device)[:10],
        "matmuls": mms[:20],
        "matmul_s": sum(m["self_s"] for m in mms),
        "dataloader_s": dl_s, "dataloader_calls": len(dl_outer),
        # of the active window less the profiler's own host time (the loader's wait is not inflated by it)
        "dataloader_fraction": dl_s / (active - prof_over) if active - prof_over > 0 else None,
        "h2d": _h2d_copies(copies, use_device),
        "syncs": _sync_costs(events, iv, dl_outer) if use_device else None,
        "comm": _communication(kernels),
        "memory": allocator(dev, mem0),
        "nvml": _nvml_summary(sampler),
    }
