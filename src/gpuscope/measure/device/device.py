"""A tiny device abstraction for the measurement layer: pick a device, synchronize, read memory, time regions.

Memory functions return ``None`` where the backend has no allocator statistics (CPU, and peaks on MPS), so
results carry ``null`` rather than a misleading zero. Timing uses device events on CUDA (and XPU when it has
them) with a synchronize before the start and after the end; elsewhere ``time.perf_counter`` around a
synchronize.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field

import torch


def pick_device(prefer: str | None = None) -> str:
    """'cuda' if available, else 'xpu', 'mps', 'cpu'. ``prefer`` (e.g. from a case) wins when it is available."""
    if prefer:
        kind = prefer.split(":")[0]
        if kind == "cpu" or _available(kind):
            return prefer
        raise RuntimeError(f"device '{prefer}' was asked for but is not available")
    for kind in ("cuda", "xpu", "mps"):
        if _available(kind):
            return kind
    return "cpu"


def _available(kind: str) -> bool:
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "xpu":
        return hasattr(torch, "xpu") and torch.xpu.is_available()
    if kind == "mps":
        return hasattr(torch.backends, "mps") and torch.backends.mps.is_available()
    return kind == "cpu"


@dataclass
class Device:
    name: str = field(default_factory=pick_device)

    def __post_init__(self) -> None:
        self.type = self.name.split(":")[0]
        self.torch_device = torch.device(self.name)
        self._mod = getattr(torch, self.type, None) if self.type in ("cuda", "xpu", "mps") else None
        self._has_stats = self.type in ("cuda", "xpu")

    # --- sync and memory -------------------------------------------------------------------------------
    def synchronize(self) -> None:
        if self._mod is not None:
            self._mod.synchronize()

    def reset_peak(self) -> None:
        if self._has_stats:
            self._mod.reset_peak_memory_stats()

    def allocated(self) -> int | None:
        if self._has_stats:
            return int(self._mod.memory_allocated())
        if self.type == "mps":
            return int(torch.mps.current_allocated_memory())
        return None

    def peak_allocated(self) -> int | None:
        return int(self._mod.max_memory_allocated()) if self._has_stats else None

    def reserved(self) -> int | None:
        if self._has_stats:
            return int(self._mod.memory_reserved())
        if self.type == "mps":
            return int(torch.mps.driver_allocated_memory())
        return None

    def peak_reserved(self) -> int | None:
        return int(self._mod.max_memory_reserved()) if self._has_stats else None

    def empty_cache(self) -> None:
        if self._mod is not None and hasattr(self._mod, "empty_cache"):
            self._mod.empty_cache()

    # --- identity ----------------------------------------------------------------------------------------
    def device_name(self) -> str:
        if self.type in ("cuda", "xpu"):
            return str(self._mod.get_device_name(self.index()))
        if self.type == "mps":
            return "Apple MPS"
        import platform

        return platform.processor() or platform.machine() or "cpu"

    def total_memory(self) -> int | None:
        if self.type in ("cuda", "xpu"):
            return int(self._mod.get_device_properties(self.index()).total_memory)
        return None

    def index(self) -> int:
        """The device's ordinal (its own, else the current one of its kind)."""
        return self.torch_device.index if self.torch_device.index is not None else self._mod.current_device()

    # --- timing ------------------------------------------------------------------------------------------
    def timer(self) -> "Timer":
        return Timer(self)

    def step_timer(self) -> "StepTimer":
        return StepTimer(self)

    @property
    def timer_kind(self) -> str:
        return "device_event" if self._events_ok() else "perf_counter+synchronize"

    def _events_ok(self) -> bool:
        return self.type in ("cuda", "xpu") and hasattr(self._mod, "Event")


class Timer:
    """``with dev.timer() as t: work()`` then ``t.s`` (device-event seconds on CUDA, else wall seconds).

    Synchronizes before the start so earlier queued work is not counted, and after the end. ``t.wall_s`` is the
    host wall time over the same region (it includes the final synchronize).
    """

    def __init__(self, dev: Device):
        self.dev = dev
        self.s: float | None = None
        self.wall_s: float | None = None

    def __enter__(self) -> "Timer":
        self.dev.synchronize()
        self._events = None
        if self.dev._events_ok():
            mod = self.dev._mod
            self._events = (mod.Event(enable_timing=True), mod.Event(enable_timing=True))
            self._events[0].record()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            return
        if self._events is not None:
            self._events[1].record()
        self.dev.synchronize()
        self.wall_s = time.perf_counter() - self._t0
        if self._events is not None:
            self.s = self._events[0].elapsed_time(self._events[1]) / 1e3
        else:
            self.s = self.wall_s


class StepTimer:
    """Back-to-back step times without a synchronize between steps (steady state, host and device overlap).

    ``st.start()``, then ``st.mark()`` after each step, then ``st.times_s()``. On CUDA/XPU it records one event per
    boundary and synchronizes once at the end; elsewhere it synchronizes and reads ``perf_counter`` at each mark.
    ``st.wall_s`` is the host wall time from start to the final synchronize.
    """

    def __init__(self, dev: Device):
        self.dev = dev
        self._marks: list = []

    def _now(self):
        if self.dev._events_ok():
            e = self.dev._mod.Event(enable_timing=True)
            e.record()
            return e
        self.dev.synchronize()
        return time.perf_counter()

    def start(self) -> None:
        self.dev.synchronize()
        self._t0 = time.perf_counter()
        self._marks = [self._now()]

    def mark(self) -> None:
        self._marks.append(self._now())

    def times_s(self) -> list[float]:
        self.dev.synchronize()
        self.wall_s = time.perf_counter() - self._t0
        m = self._marks
        if self.dev._events_ok():
            return [m[i].elapsed_time(m[i + 1]) / 1e3 for i in range(len(m) - 1)]
        return [m[i + 1] - m[i] for i in range(len(m) - 1)]


def repeats(n: int, min_time_s: float = 0.0, cap: int = 2000):
    """Yield 0, 1, ... until at least ``n`` repeats have run and ``min_time_s`` seconds of wall time have passed
    since the first (at most ``cap``). Why a time floor: a median of a few tiny, host-bound calls samples one
    moment of the host, and an H200 VM's host slowed ~1.5x in episodes of 0.5-2 s, a fifth of the time
    (research/results/2026-11-30-h200-h/README.md); repeats spread over a few seconds put those episodes in the tail,
    where the median does not see them."""
    t0 = time.perf_counter()
    i = 0
    while i < cap and (i < n or time.perf_counter() - t0 < min_time_s):
        yield i
        i += 1


def summarize(values: list[float]) -> dict:
    """Median, min, max and count of a list of seconds (empty -> Nones)."""
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def is_oom(exc: BaseException) -> bool:
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    if oom_types and isinstance(exc, oom_types):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def oom_result(dev: Device, phase: str, exc: BaseException) -> dict:
    """An out-of-memory failure as a result: where it happened, the peak reached, and a short message."""
    msg = " ".join(str(exc).split())
    return {
        "status": "oom",
        "phase": phase,
        "peak_bytes": dev.peak_allocated(),
        "peak_reserved_bytes": dev.peak_reserved(),
        "device_total_memory_bytes": dev.total_memory(),
        "error": f"{type(exc).__name__}: {msg[:300]}",
    }


def release(dev: Device) -> None:
    """Free what nothing references any more: a garbage collection, then the allocator's cached blocks."""
    gc.collect()
    dev.empty_cache()


def run_as_result(body, case: dict) -> dict:
    """Run ``body(case, dev, state)`` on the case's device; an out-of-memory error becomes a result recording the
    phase it happened in (``state["phase"]``) and the peak reached; anything else propagates."""
    dev = Device(pick_device(case.get("device")))
    state = {"phase": "setup"}
    try:
        return body(case, dev, state)
    except Exception as e:
        if not is_oom(e):
            raise
        res = oom_result(dev, state["phase"], e)
    release(dev)
    return res
