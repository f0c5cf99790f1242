"""How gpuscope's microbenchmarks time an operation (the method: measure/micro/bench.py's docstring): the mode's
iteration counts, the L2 flush between iterations, one iteration at a time (``time_op``), queued back to back
(``time_queued``), and bursts after an idle gap (``burst_times``), and the statistics of the times."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import torch

from gpuscope.measure.device.device import Device

MIB = 2**20


@dataclass(frozen=True)
class Settings:
    warmup: int
    min_iters: int
    min_time_s: float
    max_time_s: float


def settings(mode: str, dev: Device) -> Settings:
    host = dev.type == "cpu"
    if mode == "quick":
        return Settings(warmup=1 if host else 3, min_iters=3 if host else 10, min_time_s=0.02 if host else 0.2,
                        max_time_s=1.0 if host else 3.0)
    return Settings(warmup=2 if host else 5, min_iters=5 if host else 20, min_time_s=0.1 if host else 0.5,
                    max_time_s=3.0 if host else 10.0)


class L2Flusher:
    """Overwrites a buffer larger than the last-level cache; call before each timed iteration."""

    def __init__(self, dev: Device):
        size = 32 * MIB
        if dev.type == "cuda":
            l2 = int(getattr(torch.cuda.get_device_properties(dev.index()), "L2_cache_size", 0) or 0)
            size = max(4 * l2, 64 * MIB)
        elif dev.type != "cpu":
            size = 256 * MIB
        self.bytes = size
        self.buf = torch.empty(size, dtype=torch.int8, device=dev.torch_device)

    def __call__(self) -> None:
        self.buf.zero_()


def _warm(fn, n: int, before=None) -> None:
    for i in range(n):
        if before:
            before(i)
        fn(i)


def _queue(dev: Device, fn, n: int, first: int = 0, before=None) -> list:
    """Queue ``n`` iterations back to back, each ``before(i)`` then ``fn(i)`` between its own pair of device events,
    with no synchronize; returns the event pairs (read them with :func:`_elapsed` after a synchronize)."""
    mod = dev._mod
    evs = [(mod.Event(enable_timing=True), mod.Event(enable_timing=True)) for _ in range(n)]
    for j, (a, b) in enumerate(evs):
        if before:
            before(first + j)
        a.record()
        fn(first + j)
        b.record()
    return evs


def _elapsed(evs: list) -> list[float]:
    return [a.elapsed_time(b) / 1e3 for a, b in evs]


def time_op(dev: Device, fn, st: Settings, before=None) -> list[float]:
    """Seconds of each timed call of ``fn(i)``; ``before(i)`` runs untimed first (flush, rotation)."""
    _warm(fn, st.warmup, before)
    times: list[float] = []
    t_start = time.perf_counter()
    i = st.warmup
    while len(times) < st.min_iters or sum(times) < st.min_time_s:
        if before:
            before(i)
        with dev.timer() as t:
            fn(i)
        times.append(t.s)
        i += 1
        if time.perf_counter() - t_start > st.max_time_s and len(times) >= 3:
            break
    return times


def time_queued(dev: Device, fn, st: Settings, before=None) -> list[float]:
    """Like :func:`time_op`, but on devices with events the iterations are queued back to back: ``before(i)``,
    a start event, ``fn(i)``, an end event, with one synchronize per batch, so no iteration starts on an idle GPU
    (see the module docstring). Batches grow until ``min_iters`` and ``min_time_s`` are reached (``max_time_s``
    caps it). Without events it is :func:`time_op`."""
    if not dev._events_ok():
        return time_op(dev, fn, st, before)
    _warm(fn, st.warmup, before)
    dev.synchronize()
    times: list[float] = []
    t_start, i, batch = time.perf_counter(), st.warmup, max(1, min(st.min_iters, 64))
    while True:
        evs = _queue(dev, fn, batch, i, before)
        i += batch
        dev.synchronize()
        times += _elapsed(evs)
        done = len(times) >= st.min_iters and sum(times) >= st.min_time_s
        if done or (time.perf_counter() - t_start > st.max_time_s and len(times) >= 3):
            return times
        mean = sum(times) / len(times)
        want = max(st.min_iters - len(times), math.ceil((st.min_time_s - sum(times)) / max(mean, 1e-9)), 1)
        batch = min(want, 4 * batch, 4096)


def burst_times(dev: Device, fn, bursts: int, iters: int, idle_s: float, before=None, probe=None):
    """``bursts`` queued bursts of ``iters`` timed iterations, each after ``idle_s`` of idle (the clock returns to
    boost). Returns (seconds of every iteration, the SM clock ``probe()`` read mid-burst for each burst, or [])."""
    times: list[float] = []
    clocks: list[float] = []
    for _ in range(bursts):
        dev.synchronize()
        if idle_s > 0:
            time.sleep(idle_s)
        if dev._events_ok():
            evs = _queue(dev, fn, iters, 0, before)
            clk = probe() if probe else None  # the host queued the burst well ahead of the GPU: it is running
            dev.synchronize()
            times += _elapsed(evs)
        else:
            clk = probe() if probe else None
            times += time_op(dev, fn, Settings(warmup=0, min_iters=iters, min_time_s=0.0,
                                               max_time_s=float("inf")), before)
        if clk is not None:
            clocks.append(clk)
    return times, clocks


def stats(times: list[float]) -> dict:
    med = statistics.median(times)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [med, med, med]
    return {"time_s": med, "time_s_min": min(times), "time_s_max": max(times), "time_s_mean": statistics.fmean(times),
            "iters": len(times), "rel_iqr": (q[2] - q[0]) / med if med > 0 else None}
