"""A train case that bench runs with fused=False is planned as torch's for-loop AdamW (what AdamW(fused=False)
runs: measure/distributed/optim.py), not as foreach; a fused case as fused."""

from __future__ import annotations

from gpuscope.estimate.train import estimate_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.workloads.case import model_spec
from gpuscope.workloads.train import TrainCase, estimate


def _case(fused: bool) -> TrainCase:
    return TrainCase(model="llama-3.2-1b", micro_batch=2, seq=1024, precision="amp-bf16", fused=fused)


def test_an_unfused_case_is_priced_as_the_for_loop():
    hw = load_hardware("h200")
    case = _case(False)
    kw = dict(micro_batch=2, seq=1024, precision="amp-bf16", optimizer="adamw", recompute="none", grad_accum=1)
    got = estimate(case, hw)
    loop = estimate_train(model_spec(case), hw, fused=False, adamw_impl="for-loop", **kw)
    foreach = estimate_train(model_spec(case), hw, fused=False, adamw_impl="foreach", **kw)
    assert got.phases_bytes == loop.phases_bytes
    assert got.time["step_s"] == loop.time["step_s"]
    # the two unfused paths differ at the step (foreach holds a list the size of all parameters, the for-loop two
    # tensors the size of the largest), so the test tells them apart
    assert foreach.phases_bytes["optimizer"] > got.phases_bytes["optimizer"]


def test_a_fused_case_is_priced_as_fused():
    hw = load_hardware("h200")
    case = _case(True)
    got = estimate(case, hw)
    fused = estimate_train(model_spec(case), hw, micro_batch=2, seq=1024, precision="amp-bf16", optimizer="adamw",
                           recompute="none", fused=True, grad_accum=1)
    assert got.time["step_s"] == fused.time["step_s"]
