"""Timed repeats of one diffusion phase: device-event seconds on CUDA (perf_counter around a synchronize elsewhere:
measure/device/device.Timer), the host's own time to issue the phase's work (from the call to its return, before
the closing synchronize), the peak allocated memory, and NVML energy over the timed repeats.

A phase whose issue time is nearly its device time is host-bound: the GPU waits for kernels to be launched
(explain/rules_diffusion.py reads ``enqueue_s / s``). ``device_busy_s`` (optional, CUDA): one more call under
torch.profiler, the kernels' summed device time: what the step would take if launches cost nothing.
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


def device_busy(dev: Device, fn) -> dict | None:
    """One ``fn()`` under torch.profiler on CUDA: {"device_busy_s": summed kernel time, "kernels": count}; None on
    other devices (no device timeline to read)."""
    if dev.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    dev.synchronize()
    try:
        with torch.inference_mode(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            dev.synchronize()
    except RuntimeError as e:  # no CUPTI in this container, a profiler already running: said, not a failed point
        return {"device_busy_s": None, "device_busy_error": " ".join(str(e).split())[:200]}
    return busy_from(prof.events())


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
