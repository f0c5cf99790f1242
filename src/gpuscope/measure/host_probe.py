"""How fast the host runs eager PyTorch right now: one fixed, tiny, host-bound forward, timed.

Why: on the lent H200 VM the host's speed moved by up to 2x between minutes while /proc/stat's steal stayed at 0
(2026-11-30, results/2026-11-30-h200-g): a tiny-Llama training forward read 17.8 ms at 8 layers where the same host
had read 7.9 ms the day before, and two calibrations four minutes apart read 22.4 and 17.5 us a kernel. A host-bound
estimate is only as good as the host speed it was calibrated at. The probe is the yardstick: `hardware calibrate
--host` records it beside the host costs it writes (``host_probe_s``), the workloads record it before and after
their timed phase, and the bench report sets the calibrated estimate at the host speed the run itself met beside
the plain one (explain/compare.host_scale).

The probe: a 2-layer tiny Llama (measure/host_overhead.TINY, the models the host costs are fitted on), one token,
no cache, under no_grad, synchronised after every forward; the median of ``iters`` forwards after 5 untimed ones.
Its GPU work is a few microseconds; what it times is Python, the transformers modules, the dispatcher and ~100
kernel launches, which is what a host-bound workload spends its time on. About 1-2 ms a forward on the lent H200
host, so ~40 ms a probe.
"""

from __future__ import annotations

import statistics
import time

import torch

from gpuscope.measure.device import Device

_MODELS: dict = {}


def _model(dev: Device):
    from gpuscope.measure.hf_model import build_model
    from gpuscope.measure.host_overhead import TINY

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


class HostProbe:
    """``with HostProbe(dev) as p: <timed phase>``; then ``p.summary()``: the probe before and after the phase and
    their mean (``host_probe_s``), which is what the phase's host speed is taken to be."""

    def __init__(self, dev: Device, iters: int = 30):
        self.dev, self.iters = dev, iters
        self.before = self.after = None

    def __enter__(self) -> "HostProbe":
        self.before = host_probe(self.dev, self.iters)
        release()  # the probe's model is not the workload's memory
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.after = host_probe(self.dev, self.iters)
            release()

    def summary(self) -> dict:
        both = [x for x in (self.before, self.after) if x is not None]
        return {"host_probe_s": statistics.fmean(both) if both else None, "host_probe_before_s": self.before,
                "host_probe_after_s": self.after}


def release() -> None:
    """Drop the cached probe models (HostProbe does after each probe, so a workload's memory figures hold only
    its own tensors)."""
    _MODELS.clear()
