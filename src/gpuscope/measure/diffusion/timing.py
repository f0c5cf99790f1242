"""Timed repeats of one diffusion phase: device-event seconds on CUDA (perf_counter around a synchronize elsewhere:
measure/device/device.Timer), the host's own time to issue the phase's work (from the call to its return, before
the closing synchronize), the peak allocated memory, and NVML energy over the timed repeats.

A phase whose issue time is nearly its device time is host-bound: the GPU waits for kernels to be launched
(explain/rules_diffusion.py reads ``enqueue_s / s``). ``profiled`` (``--profile``): one more call under
torch.profiler: the kernels' summed device time (``device_busy_s``: what the step would take if launches cost
nothing), the top kernels by device time and the top host operators.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch

from gpuscope.measure.device.device import Device, repeats, summarize
from gpuscope.measure.device.nvml import PhaseEnergy
from gpuscope.measure.host.probe import HostProbe


def timed(dev: Device, fn, n: int, warmup: int, min_time_s: float = 0.0, probe: bool = False) -> dict:
    """``fn()`` ``warmup`` times untimed, then at least ``n`` times (and ``min_time_s`` seconds): {"s": median,
    "spread": (max - min) / median, "enqueue_s": median issue time, "peak_bytes", "energy_j", "power_w", ...};
    ``probe``: measure/host/probe.py's host probe just before and after the timed repeats (``host_probe_s``: the
    host speed a host-bound phase met, which `bench` sets the calibrated estimate at)."""
    for _ in range(warmup):
        fn()
    times, issue = [], []
    with contextlib.ExitStack() as stack:
        hp = stack.enter_context(HostProbe(dev)) if probe else None
        dev.synchronize()
        dev.reset_peak()
        t0 = time.perf_counter()
        with PhaseEnergy(dev) as energy:
            for _ in repeats(n, min_time_s):
                with dev.timer() as t:
                    s0 = time.perf_counter()
                    fn()
                    issue.append(time.perf_counter() - s0)
                times.append(t.s)
        wall = time.perf_counter() - t0
        peak = dev.peak_allocated()  # before the closing probe allocates its model
    st = summarize(times)
    return {"s": st["median"], "min_s": st["min"], "max_s": st["max"], "n": st["n"],
            "spread": (st["max"] - st["min"]) / st["median"] if st["median"] else None,
            "enqueue_s": statistics.median(issue), "peak_bytes": peak,
            "energy_j": energy.joules, "energy_source": energy.source, "wall_s": wall,
            "power_w": energy.joules / wall if energy.joules and wall > 0 else None,
            **(hp.summary() if hp is not None else {})}


def busy_from(events) -> dict:
    """Summed kernel time of a profile's events (one stream: the device's busy time) and the kernel count. The
    kernels are their own events (device type CUDA); a CPU op's self device time holds the same kernels again, so
    only where a profile lists no kernel events are those summed instead."""
    cuda = torch.autograd.DeviceType.CUDA
    kernels = [e for e in events if e.device_type == cuda]
    if kernels:
        busy_us = sum(e.device_time_total for e in kernels)
    else:
        busy_us = sum(e.self_device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CPU)
    return {"device_busy_s": busy_us / 1e6, "kernels": len(kernels)}


def profiled(dev: Device, fn, top: int = 25) -> dict:
    """One ``fn()`` under torch.profiler, host (CPU) and device activity: on CUDA the device's busy time and kernel
    count (busy_from), the ``kernel_table`` (the ``top`` kernels by summed device time: name, calls, seconds,
    share of the busy time) and the device's span (first kernel start to last kernel end) and idle time within it;
    everywhere ``host_ops`` (the ``top`` operators by self host time) and ``profiled_host_s`` (the call's host time
    under the profiler, which adds its own cost per op). On a CPU the kernel table is the operators' self time."""
    from torch.profiler import ProfilerActivity, profile

    cuda = dev.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    dev.synchronize()
    try:
        with torch.inference_mode(), profile(activities=acts) as prof:
            t0 = time.perf_counter()
            fn()
            host = time.perf_counter() - t0
            dev.synchronize()
    except RuntimeError as e:  # no CUPTI, a profiler already running: said, not a failed point
        return {"device_busy_s": None, "device_busy_error": " ".join(str(e).split())[:200]}
    events = prof.events()
    out = {**(busy_from(events) if cuda else {"device_busy_s": None}), "profiled_host_s": host,
           "host_ops": table(events, "cpu", top)}
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    out["kernel_table"] = table(kernels, "cuda", top) if cuda else out["host_ops"]
    if kernels:
        span = (max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels)) / 1e6
        out.update(device_span_s=span, device_idle_s=max(0.0, span - out["device_busy_s"]))
    return out


def table(events, side: str, top: int) -> list[dict]:
    """Events grouped by name, the largest ``top`` by summed time (kernels: device time; cpu: self host time)."""
    cpu = torch.autograd.DeviceType.CPU
    sums: dict[str, list] = {}
    for e in events:
        if side == "cpu" and e.device_type != cpu:
            continue
        us = e.device_time_total if side == "cuda" else e.self_cpu_time_total
        row = sums.setdefault(e.name, [0, 0.0])
        row[0] += 1
        row[1] += us
    total = sum(v[1] for v in sums.values()) or 1.0
    rows = sorted(sums.items(), key=lambda kv: -kv[1][1])[:top]
    return [{"name": n[:160], "calls": c, "s": us / 1e6, "share": us / total} for n, (c, us) in rows]
