"""How fast the host runs eager PyTorch right now: one fixed, tiny, host-bound forward, timed.

Why: on an H200 VM the host's speed moved by up to 2x between minutes while /proc/stat's steal stayed at 0
(research/results/2026-11-30-h200-g/README.md): a tiny-Llama training forward read 17.8 ms at 8 layers against 7.9
ms on another day, and two calibrations four minutes apart read 22.4 and 17.5 us a kernel. A host-bound
estimate is only as good as the host speed it was calibrated at. The probe is the yardstick: `hardware calibrate
--host` records it beside the host costs it writes (``host_probe_s``), the workloads record it before and after
their timed phase, and the bench report sets the calibrated estimate at the host speed the run itself met beside
the plain one (explain/compare.host_scale).

The probe: a 2-layer tiny Llama (measure/models/tiny.TINY, the models the host costs are fitted on), one token,
no cache, under no_grad, synchronised after every forward; the median of ``iters`` forwards after 5 untimed ones.
Its GPU work is a few microseconds; what it times is Python, the transformers modules, the dispatcher and ~100
kernel launches, which is what a host-bound workload spends its time on. About 1-2 ms a forward on an H200 VM's
host, so ~40 ms a probe.

Training has its own probe (``kind="train"``: the same model's forward with a loss and its backward, 8 tokens,
median of 15; ~10 ms each on that host). Round after round beside a GPT-2 training step on the H200
(research/results/2026-11-30-h200-g/probe_track_phases.json), the step followed the training probe at r = 0.85 (its
spread 46% -> 23% divided by it) and the forward-only probe at r = 0.44 (dividing widened it). Backward runs on
autograd's
own device thread, which a forward-only probe never exercises; tiny GPT-2 generate followed the forward probe at
r = 0.87 and the training probe at 0.54.
"""

from __future__ import annotations

import statistics
import time

import torch

from gpuscope.measure.device.device import Device
from gpuscope.measure.models.hf_model import build_model
from gpuscope.measure.models.tiny import TINY

_MODELS: dict = {}


def _model(dev: Device):
    key = str(dev.torch_device)
    if key not in _MODELS:
        dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
        model, _ = build_model(dict(TINY["llama"], num_hidden_layers=2), dev, dtype, use_cache=False)
        _MODELS[key] = model.eval()
    return _MODELS[key]


@torch.no_grad()
def host_probe(dev: Device, iters: int = 30) -> float:
    """Median seconds of the probe forward on ``dev`` (see the module's docstring)."""
    model = _model(dev)
    ids = torch.ones((1, 1), dtype=torch.long, device=dev.torch_device)
    times = []
    for i in range(iters + 5):
        dev.synchronize()
        t0 = time.perf_counter()
        model(ids, use_cache=False)
        dev.synchronize()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.enable_grad()  # also between the rounds of a fit that runs under no_grad (measure_family)
def host_probe_train(dev: Device, iters: int = 15, model=None) -> float:
    """Median seconds of the training probe: the probe model's forward with a loss over 8 tokens and its backward
    (gradients dropped after), synchronised; after 3 untimed ones. ``model``: another model to run it on
    (research/scripts/gpu_probe_track.py's fp32 copy)."""
    model = (model if model is not None else _model(dev)).train()
    ids = torch.ones((1, 8), dtype=torch.long, device=dev.torch_device)
    times = []
    for i in range(iters + 3):
        dev.synchronize()
        t0 = time.perf_counter()
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        dev.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    model.eval()
    return statistics.median(times)


PROBES = {"infer": (host_probe, "host_probe"), "train": (host_probe_train, "host_probe_train")}


class RoundProbe:
    """A probe taken between the rounds of a fit (``host/overhead.interleaved(..., between=probe)``), so that the
    host speed it records is that of the whole fit and not of its two ends: a calibration pass takes ~10 s and an
    H200 VM's host speed decorrelated within ~8 s (research/results/2026-11-30-h200-g/probe_track.json), so a probe
    before and after a pass sampled two moments of it. Each call appends one probe (the same median as HostProbe's,
    so the speeds compare: ~70 ms forward / ~0.1 s training on that host); ``median()`` is the fit's host speed.

    ``to`` (seconds): each call returns ``to / probe``, the factor that takes the round just timed to a host whose
    probe reads ``to``, and ``interleaved`` applies it to that round's samples. Why per round: an H200 VM's host
    slowed ~1.5x in episodes of 0.5-2 s, and a pass's four rounds of Llama-3.2-1B-wide decode that fell in one read
    25 us a kernel where the pass's other fits and the next passes read 16-17 (research/results/2026-11-30-h200-h); a
    probe per pass cannot correct a part of the pass. Without ``to`` a call returns None (nothing is scaled).
    The probe's model stays cached until ``release()``: for calibrations, not for workloads whose memory is read."""

    def __init__(self, dev: Device, kind: str = "infer", to: float | None = None):
        self.dev, self.fn, self.to = dev, PROBES[kind][0], to
        self.samples: list[float] = []

    def __call__(self) -> float | None:
        p = self.fn(self.dev)
        self.samples.append(p)
        return self.to / p if (self.to and p > 0) else None

    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


class HostProbe:
    """``with HostProbe(dev) as p: <timed phase>``; then ``p.summary()``: the probe before and after the phase and
    their mean (``host_probe_s``, or ``host_probe_train_s`` for ``kind="train"``), which is what the phase's host
    speed is taken to be."""

    def __init__(self, dev: Device, kind: str = "infer"):
        self.dev, (self.fn, self.key) = dev, PROBES[kind]
        self.before = self.after = None

    def __enter__(self) -> "HostProbe":
        self.before = self.fn(self.dev)
        release()  # the probe's model is not the workload's memory
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.after = self.fn(self.dev)
            release()

    def summary(self) -> dict:
        both = [x for x in (self.before, self.after) if x is not None]
        return {f"{self.key}_s": statistics.fmean(both) if both else None, f"{self.key}_before_s": self.before,
                f"{self.key}_after_s": self.after}


def release() -> None:
    """Drop the cached probe models (HostProbe does after each probe, so a workload's memory figures hold only
    its own tensors)."""
    _MODELS.clear()
