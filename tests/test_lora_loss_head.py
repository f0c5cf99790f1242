"""The loss head's backward as both training planners price it (estimate/loss.py): 22 bytes a logit (nll_loss's zero
fill, log_softmax's backward, the upcast's backward), not twice the forward's 20."""

from __future__ import annotations

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_train import estimate_lora_train
from gpuscope.estimate.loss import LOSS_BWD_B, LOSS_FWD_B, LOSS_OP
from gpuscope.estimate.train import estimate_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model


def _loss_ops(est) -> dict[str, dict]:
    return {o["phase"]: o for o in est.ops if o["name"].startswith(LOSS_OP)}


@pytest.mark.parametrize("planner", ["full", "lora", "qlora"])
def test_loss_backward_moves_its_kernels_bytes(planner):
    m, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    T, V = 4 * 2048, m.vocab_size
    if planner == "full":
        est = estimate_train(m, hw, micro_batch=4, seq=2048, recompute="full", with_ops=True)
    else:
        est = estimate_lora_train(m, hw, lora_shape(m, 16), micro_batch=4, seq=2048, recompute="full",
                                  qlora=planner == "qlora", with_ops=True)
    ops = _loss_ops(est)
    assert ops["forward"]["bytes"] == pytest.approx(LOSS_FWD_B * T * V)
    assert ops["backward"]["bytes"] == pytest.approx(LOSS_BWD_B * T * V)
    assert ops["backward"]["name"] == LOSS_OP + "_bwd" and ops["backward"]["kernels"] == 4
    # 22 against the forward's 20: the backward takes about the forward's time, not twice it
    assert 1.0 < ops["backward"]["gpu_s"] / ops["forward"]["gpu_s"] < 1.2


def test_loss_backward_is_the_traffic_of_its_three_passes():
    assert LOSS_BWD_B == 4.0 + (4.0 + 4.0 + 4.0) + (4.0 + 2.0) < 2 * LOSS_FWD_B
