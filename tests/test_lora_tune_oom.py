"""OOM tiers for LoRA / QLoRA fine-tuning (explain/oom_tiers.lora_oom_tiers, `doctor train --plan-only --lora-r`):
each lever's peak is the planner's for the changed configuration; offload tiers are analytic from its breakdown."""

from __future__ import annotations

import json

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_search import configure
from gpuscope.explain.oom_tiers import lora_oom_tiers
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

M8 = load_model("llama-3.1-8b")
HW = load_hardware("rtx4090")


def _tiers(**kw):
    d = lora_oom_tiers(M8, HW, **dict(dict(r=64, micro_batch=4, seq=2048), **kw))
    return d, {t.lever: t for t in d["tiers"]}


def test_every_lever_is_listed_with_its_planned_peak():
    d, by = _tiers()
    assert not d["base"]["fits"] and d["best"] is not None and d["best"].fits
    levers = " | ".join(by)
    for words in ("gradient checkpointing", "accumulation", "smaller rank", "attention projections only",
                  "adamw-8bit", "paged-adamw-8bit", "QLoRA", "activation offloading", "frozen base offloaded"):
        assert words in levers, words
    qlora = configure(M8, HW, lora_shape(M8, 64), seq=2048, micro_batch=4, recompute="none", optimizer="adamw",
                      qlora=True)
    assert by["QLoRA (base in 4-bit NF4)"].peak_bytes == qlora.peak_bytes
    small = configure(M8, HW, lora_shape(M8, 16), seq=2048, micro_batch=4, recompute="none", optimizer="adamw",
                      qlora=False)
    assert by["smaller rank (r 16)"].peak_bytes == small.peak_bytes
    assert all(t.saved_bytes > 0 for t in d["tiers"])  # every lever lowers the peak here
    ranks = [t.rank for t in d["tiers"]]
    assert ranks == list(range(1, len(ranks) + 1))
    fitting = [t for t in d["tiers"] if t.fits]
    assert fitting == d["tiers"][:len(fitting)]  # levers that fit come first


def test_offload_tiers_are_below_their_starting_point():
    d, by = _tiers(recompute="full", micro_batch=1)
    acts = by["activation offloading (checkpointed layer inputs to CPU) + checkpointing"]
    inputs = M8.num_layers * 2048 * M8.hidden_size * 2.0
    assert acts.peak_bytes == pytest.approx(d["base"]["peak_bytes"] - inputs + 2 * 2048 * M8.hidden_size * 2.0)
    weights = by["frozen base offloaded to CPU (accelerate device_map)"]
    assert weights.peak_bytes < d["base"]["peak_bytes"] - 10e9 and weights.slowdown > 1
    assert "gradient checkpointing" not in by  # already on


def test_qlora_run_has_no_qlora_lever():
    _, by = _tiers(qlora=True, recompute="full", micro_batch=1, r=16)
    assert not any("QLoRA" in k for k in by)


def test_doctor_plan_only_lora(capsys):
    from gpuscope.cli import main

    main(["doctor", "train", "--plan-only", "--gpu", "rtx4090", "--model", "llama-3.1-8b", "--micro-batch", "4",
          "--seq", "2048", "--lora-r", "16", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert d["oom"]["inputs"]["lora"] is True and d["oom"]["best"]["fits"]
    assert "LoRA convention" not in d["estimate"]["verdict"]  # it does not fit as given
    with pytest.raises(SystemExit) as e:
        main(["doctor", "train", "--gpu", "rtx4090", "--model", "llama-3.1-8b", "--lora-r", "16"])
    assert e.value.code == 2 and "need --plan-only" in capsys.readouterr().err
