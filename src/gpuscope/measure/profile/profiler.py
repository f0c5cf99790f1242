"""Profile a run with torch.profiler (+ NVML sampling) and reduce it to a summary dict for the doctor's rules.

Inside your own code::

    from gpuscope.measure.profile.profiler import profile_run
    with profile_run() as p:            # device: the first available accelerator, else cpu
        for batch in loader:
            train_step(batch)
            p.step()                     # optional: step boundaries give step times
    p.summary                            # the dict below; gpuscope.explain.findings.diagnose(p.summary)

A whole script in a child process (``gpuscope doctor -- python train.py``): measure/profile/script.py.

Summary keys (schema ``gpuscope.profile/1``, reduced by measure/profile/summary.py; times in seconds, bytes in bytes;
None where the device has no such counter):
- ``wall_s``, ``steps``, ``step_s_median``: the profiled region and its step marks.
- ``timeline``: ``device_kernels`` (CUDA/XPU kernels from the profiler's device activity) or ``cpu_ops`` (on CPU:
  the top-level aten ops stand in for kernels). ``active_s``: first kernel start to last kernel end (a script's
  set-up before its first kernel is left out); ``profiler_overhead_s``: the host time the profiler itself added
  (``active_s - bare_s`` where the workload was also timed without the profiler, ``profiler_overhead_source``
  ``bare_run``; a script run bare first, ``doctor --bare-run``: (profiled - bare median step) x steps,
  ``bare_steps``; else ``cpu_events`` x ``profiler_s_per_event``, calibrated on this host before the run,
  ``per_event``; never more than ``active_s`` less the data-loader wait and ``busy_s``); ``busy_s`` is the union of
  those intervals, ``idle_fraction`` = 1 - busy_s / active_s, ``kernel_count``, ``kernel_mean_s``,
  ``gap_mean_s``/``gap_median_s`` (between consecutive intervals of the union, positive gaps only).
- ``top_ops``: the ten ops with the most self time (device time on GPUs, CPU time on CPU).
- ``matmuls``: aten mm/addmm/bmm/baddbmm/linear grouped by (m, n, k, dtype), with count and self time.
- ``dataloader_s``/``dataloader_fraction`` (of ``active_s`` less ``profiler_overhead_s``): CPU time inside
  ``enumerate(DataLoader)#...__next__`` (the profiler's own annotation of every DataLoader iterator), outermost
  calls only.
- ``h2d``: host-to-device copies (count, seconds, bytes where known, how many from pageable memory).
- ``syncs`` (device timelines): host-device synchronisations (:func:`host_syncs`): calls, host wait, the GPU idle
  after them until the next kernel, data-loader waits left out (``refill_s``, ``refill_excluded_s``), the part of
  it removing them could give back (``recoverable_s``), and the aten ops that issued them (``.item()`` shows as
  ``aten::_local_scalar_dense``).
- ``moe_routing`` (gpuscope's workloads of MoE models, measure/profile/workload.py): rows per expert
  (measure/llm/moe_routing.py).
- ``comm``: collective kernels (names with nccl/rccl/ccl): seconds, and the fraction overlapped by compute kernels.
- ``memory``: allocator statistics (``torch.cuda.memory_stats``): allocated/reserved at start, peaks, retries,
  OOMs, inactive split bytes, device total.
- ``nvml``: ``NvmlSampler.summary()`` (power, clocks, utilisation, throttle fraction) or its ``unavailable`` reason.
"""

from __future__ import annotations

import contextlib
import time

import torch

from gpuscope.measure.device.device import Device, pick_device
from gpuscope.measure.profile.summary import is_device, memory_stats, summarize_profile



class ProfileSession:
    """What ``profile_run`` yields: ``step()`` marks a step boundary; ``summary`` is filled on exit."""

    def __init__(self, dev: Device, prof, sampler, max_steps: int | None = None):
        self.dev = dev
        self.prof = prof
        self.sampler = sampler
        self.max_steps = max_steps
        self.step_marks: list[float] = []
        self.summary: dict | None = None
        self.extra: dict = {}
        self.stopped_at: float | None = None
        self.bare_s: float | None = None  # profile_run's bare_s; the block may set it once it knows it

    def step(self) -> None:
        if self.stopped_at is not None:
            return
        self.dev.synchronize()
        self.step_marks.append(time.perf_counter())
        if self.max_steps is not None and len(self.step_marks) > self.max_steps:
            self.stop()

    def stop(self) -> None:
        """End the recorded window now (the block runs on without the profiler): its events stay as they are."""
        if self.stopped_at is None:
            self.dev.synchronize()
            self.stopped_at = time.perf_counter()
            self.prof.__exit__(None, None, None)
            if self.sampler:
                self.sampler.stop()


def _activities(dev: Device) -> list:
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(ProfilerActivity.CUDA)
    elif dev.type == "xpu" and hasattr(ProfilerActivity, "XPU"):
        acts.append(ProfilerActivity.XPU)
    return acts


@contextlib.contextmanager
def profile_run(device: str | None = None, *, record_shapes: bool = True, nvml: bool = True,
                nvml_interval_s: float = 0.1, bare_s: float | None = None, bare_step_s: float | None = None,
                max_steps: int | None = None):
    """Profile the block; ``session.summary`` holds the summary dict afterwards (also when the block raised).
    ``bare_s``: the same block's time measured without the profiler, where the caller could run it (gpuscope's
    own workloads): the profiler's overhead is then ``active_s - bare_s``, measured, instead of estimated per event
    (the block may set ``session.bare_s`` instead, where it knows it only at the end: doctor's budgeted generate).
    ``bare_step_s``: the median step of the same script run bare (``doctor --bare-run``): the overhead is then the
    profiled median step less it, times the profiled steps. ``max_steps``: stop recording after that many
    ``step()`` marks (the profiler holds every event until it stops, so an unbounded loop would grow without
    bound); the summary covers that window (``window_steps``)."""
    from torch.profiler import profile

    from gpuscope.measure.device.nvml import NvmlSampler

    dev = Device(pick_device(device))
    per_event = profiler_cost_per_event(dev, record_shapes=record_shapes)
    sampler = NvmlSampler(interval_s=nvml_interval_s) if (nvml and dev.type == "cuda") else None
    mem0 = memory_stats(dev)
    dev.reset_peak()
    prof = profile(activities=_activities(dev), record_shapes=record_shapes)
    sess = ProfileSession(dev, prof, sampler, max_steps)
    sess.bare_s = bare_s
    if sampler:
        sampler.start()
    prof.__enter__()
    dev.synchronize()
    t0 = time.perf_counter()  # after the profiler's own start-up
    sess.step_marks.append(t0)
    try:
        yield sess
    finally:
        window_closed = sess.stopped_at is not None
        sess.stop()
        sess.summary = summarize_profile(prof, dev, sess.stopped_at - t0, sess.step_marks, mem0, sampler, per_event,
                                         sess.bare_s, bare_step_s)
        sess.summary.update(sess.extra, window_steps=max_steps if window_closed else None)


_PROFILER_COST: dict = {}


def profiler_cost_per_event(dev: Device, n: int = 60, record_shapes: bool = True) -> float:
    """Seconds of host time the profiler adds per recorded CPU event on this host and device: ``n`` iterations of a
    tiny training step (linear, GELU, loss, backward through autograd, an in-place update) timed bare and under a
    profiler with the same options as the run (activities, ``record_shapes``), divided by the CPU events that
    profile recorded. Under torch.profiler a training script's host time per op grows severalfold (H200 runs of
    examples/train_slow_loader.py: 82 ms profiled against 41 ms bare in one session; 180 ms against 63 ms in the
    next), which would read as launch-bound time; the doctor subtracts events x this cost. The first version timed
    bare ``add_`` calls without ``record_shapes`` and measured 1.4-5 us per event where that script paid about
    7 us: autograd nodes and recorded shapes cost the profiler more than a lone kernel launch. Measured once per
    process and option set (~0.1 s)."""
    key = (str(dev.torch_device), record_shapes)
    if key in _PROFILER_COST:
        return _PROFILER_COST[key]
    from torch.profiler import profile

    g = torch.Generator(device="cpu").manual_seed(0)
    w = torch.randn(16, 16, generator=g).to(dev.torch_device).requires_grad_()
    x = torch.randn(8, 16, generator=g).to(dev.torch_device)

    @torch.enable_grad()  # profile_run may be entered under no_grad (inference workloads)
    def run() -> float:
        dev.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            loss = torch.nn.functional.gelu(x @ w).square().mean()
            loss.backward()
            with torch.no_grad():
                w.sub_(w.grad, alpha=1e-3)
            w.grad = None
        dev.synchronize()
        return time.perf_counter() - t

    run()
    bare = min(run() for _ in range(3))
    with profile(activities=_activities(dev), record_shapes=record_shapes) as prof:
        t_prof = run()
    events = sum(1 for e in (prof.events() or []) if not is_device(e))
    _PROFILER_COST[key] = max(0.0, t_prof - bare) / max(1, events)
    return _PROFILER_COST[key]
