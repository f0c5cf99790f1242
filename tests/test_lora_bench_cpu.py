"""`bench train --lora-r` on the CPU: a tiny random-weight Llama through peft, the estimate beside it.

The case key of a full-training case is unchanged (no LoRA field is written when unset); a LoRA case runs one
warm-up and two timed steps with only the adapters in the optimizer, and the measured trainable count equals
the planner's (estimate/lora.py) and peft's.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from gpuscope.estimate.lora import lora_params  # noqa: E402
from gpuscope.specs.hardware import load_hardware  # noqa: E402
from gpuscope.specs.hf_config import spec_from_config  # noqa: E402
from gpuscope.workloads import train as train_kind  # noqa: E402
from gpuscope.workloads.sets import TINY_LLAMA, train_case  # noqa: E402


def test_full_training_case_key_unchanged():
    d = train_case("tiny-llama", 2, 64, config=TINY_LLAMA)
    assert not any(k.startswith("lora") for k in d)
    lora = train_case("tiny-llama", 2, 64, config=TINY_LLAMA, lora_r=8)
    assert lora["lora_r"] == 8 and train_kind.CASE.from_dict(lora).key != train_kind.CASE.from_dict(d).key
    assert train_kind.CASE.from_dict(lora).name.endswith("-lora_r8")


@pytest.mark.parametrize("targets", [None, "q_proj,v_proj"])
def test_tiny_lora_train_case_runs_with_estimate_beside(targets):
    extra = {"lora_targets": targets} if targets else {}
    d = train_case("tiny-llama", 2, 64, precision="amp-bf16", steps=2, warmup=1, config=TINY_LLAMA, lora_r=8,
                   device="cpu", **extra)
    case = train_kind.CASE.from_dict(d)
    res = train_kind.run(case)
    assert res["status"] == "ok", res
    expected = lora_params(spec_from_config(TINY_LLAMA), 8, targets or "all-linear")
    assert res["lora_trainable_params"] == expected
    # AdamW on the fp32 adapters only: exp_avg and exp_avg_sq, plus a 4-byte step count per adapter tensor
    assert res["step_s"] > 0 and 0 <= res["optimizer_state_bytes"] - 8 * expected <= 4 * 64
    est = train_kind.estimate(case, load_hardware("h200"))
    assert est.lora["trainable_params"] == expected
    rows = {name: (e, m) for name, e, m in train_kind.rows(case, est, res)}
    assert rows["step_s"][0] > 0 and rows["step_s"][1] > 0
