"""Every preset through every planner path: no exception, finite non-negative numbers, parts within the whole."""

from __future__ import annotations

import math

import pytest

from gpuscope.estimate.infer import estimate_infer
from gpuscope.estimate.parallel import Layout, estimate_parallel
from gpuscope.estimate.train import estimate_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model, preset_names

H100 = load_hardware("h100")


def _finite(est) -> None:
    values = [est.peak_bytes_per_gpu, *est.time.values(), *est.throughput.values(), *est.breakdown_bytes.values()]
    assert all(math.isfinite(v) and v >= 0 for v in values), values
    assert sum(est.breakdown_bytes.values()) == pytest.approx(est.peak_bytes_per_gpu, rel=1e-6)


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_plans(name):
    m = load_model(name)
    _finite(estimate_infer(m, H100, batch=4, prompt=1024, gen=32))
    _finite(estimate_infer(m, H100, batch=1, prompt=512, gen=8, dtype="int4", engine="graph"))
    _finite(estimate_train(m, H100, micro_batch=1, seq=1024))
    fsdp = estimate_train(m, H100, micro_batch=1, seq=1024, num_gpus=4, strategy="fsdp", recompute="full")
    assert all(math.isfinite(v) and v >= 0 for v in fsdp.time.values())
    tp = 8 if m.num_heads % 8 == 0 else 1
    par = estimate_parallel(m, H100, Layout(tp=tp, pp=2, dp=4, global_batch=64, recompute="full"), seq=2048)
    assert math.isfinite(par.step_s) and par.step_s > 0 and 0 < par.mfu < 1
