"""Mixture-of-experts on one H200: plain `generate` decodes experts with batched_mm (a gathered copy of each routed
expert), the prefill's grouped GEMMs pay whole 256-row units per expert (estimate/moe.py), and the doctor's
moe_imbalance rule.

Results: research/results/2026-11-29-h200-c and research/results/2026-11-29-h200-d (README.md in each).
"""

from __future__ import annotations

import json

import pytest

from gpuscope.explain.compare import compare_record
from gpuscope.specs.hardware import hardware_for_device as hardware_for

from results_data import nov29_c, nov29_d


def test_generate_decode_experts_read_as_batched_mm():
    """Plain generate on a GPU runs MoE decode steps with transformers' batched_mm (each routed row gathers a copy of
    its expert's weights, then a bmm): the Mixtral-8x7B b1 kernel table (doctor_mixtral.json) has the gathers and
    bmms at 16.6 ms per decode step; the planner's routed-experts op must match within 10% (one read of the two
    experts would be 5.5 ms), and only for the generate engine."""
    import json

    from gpuscope.estimate.infer import estimate_infer
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.models import load_model

    d = json.loads((nov29_c.RESULTS.parent / "doctor_mixtral.json").read_text())
    p = d["profile"]
    decode_steps = d["target"]["case"]["gen"] - 1
    gather = sum(o["self_s"] for o in p["top_ops"] if o["name"].startswith("void at::native::vectorized_gather"))
    bmm = sum(x["self_s"] for x in p["matmuls"] if x["op"] == "aten::bmm" and x["n"] == 1 and x["m"] >= 4096)
    measured = (gather + bmm) / decode_steps
    assert 0.015 < measured < 0.018
    m, hw = load_model("mixtral-8x7b"), load_hardware("h200")

    def experts_s(engine):
        e = estimate_infer(m, hw, batch=1, prompt=1024, gen=16, engine=engine, with_ops=True)
        return sum(o["gpu_s"] for o in e.ops if o["phase"] == "decode" and o["name"] == "experts")

    assert experts_s("eager") == pytest.approx(measured, rel=0.10)
    assert experts_s("graph") < 0.5 * measured  # gpuscope's graph loops keep grouped_mm: one read per expert


def test_mixtral_batch8_decode_is_generates_batched_mm():
    """At batch 8 plain generate gathers 16 expert copies per layer and step: planned (from the batch-1 kernel
    table) 136 ms per token, measured 128.5; the bare decode forward (grouped_mm) of the same run is 2.8x faster."""
    (rec,) = nov29_d.by(lambda c, r: c.get("model") == "mixtral-8x7b")
    r = rec["result"]
    assert r["tpot_s"] / r["decode_forward_s"] > 2.5
    (row,) = [x for x in compare_record(rec, hardware_for("NVIDIA H200")) if x.metric == "decode_s_per_token"]
    assert abs(row.error) < 0.10


def test_mixtral_prefill_grouped_gemms_pay_whole_row_units():
    """torch._grouped_mm gives each expert whole 256-row units on an H200 (estimate/moe.py): per layer, the measured
    groups' gate_up time over the equal groups' is the units' ratio (sum ceil(r / 256) / 8), and the planner's
    experts op (rows per expert ~ Binomial, half a unit above the rows at 256 a expert) is the profile's grouped
    GEMMs; with equal groups (the planner before: the rows alone) they are 1.4-1.7x faster."""
    import math

    from gpuscope.estimate.infer import estimate_infer
    from gpuscope.estimate.moe import measured_padded_rows
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.models import load_model

    rt = json.loads((nov29_d.HERE / "moe_routing.json").read_text())
    assert rt["layers"] == 32 and all(sum(c) == rt["routed_rows"] == 2048 for c in rt["rows_per_expert"])
    g = {x["name"]: x for x in rt["grouped_mm"]}
    ratios = [s / g["gate_up"]["equal_s"] / (measured_padded_rows(c, 28672) / 2048)
              for s, c in zip(g["gate_up"]["routed_s"], rt["rows_per_expert"])]
    assert all(abs(r - 1) < 0.12 for r in ratios) and abs(sum(ratios) / 32 - 1) < 0.05
    per128 = [s / g["gate_up"]["equal_s"] / (sum(math.ceil(r / 128) for r in c) / 16)
              for s, c in zip(g["gate_up"]["routed_s"], rt["rows_per_expert"])]
    assert sum(per128) / 32 > 1.15  # a 128-row unit (one tile) does not explain it
    equal_s = 32 * (g["gate_up"]["equal_s"] + g["down"]["equal_s"])
    routed_s = g["gate_up"]["routed_s_sum"] + g["down"]["routed_s_sum"]
    assert 1.35 < routed_s / equal_s < 1.7
    e = estimate_infer(load_model("mixtral-8x7b"), load_hardware("h200"), batch=1, prompt=1024, gen=1,
                       engine="eager", with_ops=True)
    planned = sum(o["gpu_s"] for o in e.ops if o["phase"] == "prefill" and o["name"] == "experts")
    prof = json.loads((nov29_d.HERE / "doctor_mixtral_prefill.json").read_text())["profile"]
    grouped = sum(o["self_s"] for o in prof["top_ops"] if "GroupProblemShape" in o["name"])
    assert grouped == pytest.approx(routed_s, rel=0.15)  # the profile's grouped GEMMs are the measured groups'
    assert planned == pytest.approx(grouped, rel=0.10)
    assert prof["syncs"]["wait_s"] < 0.001  # not host-device syncs


def test_the_h200_mixtral_routing_would_be_flagged():
    """The routing measured on the H200 (moe_routing.json) through the doctor's moe_imbalance rule: the median
    layer's skew (1.25) is above a uniform router's sampling noise for 2,048 rows over 8 experts (1.13)."""
    import statistics

    from gpuscope.explain.rules_gpu import moe_imbalance

    rt = json.loads((nov29_d.HERE / "moe_routing.json").read_text())
    imb = rt["imbalance_max_over_mean"]
    f = moe_imbalance({"moe_routing": {"layers": rt["layers"], "experts": rt["experts"], "rows_largest_call": 2048,
                                       "imbalance_median": statistics.median(imb), "imbalance_max": max(imb)}})
    assert f is not None and f.evidence["uniform_routing_noise"] < 1.15 < f.evidence["imbalance_median"]
