"""The doctor's offload_fresh_pages rule (explain/rules_offload.py) on bench diffusion summaries."""

from __future__ import annotations

import pytest

from gpuscope.estimate.diffusion.offload import FAULT_S, PAGE_BYTES
from gpuscope.explain.rules_diffusion import RULES
from gpuscope.explain.rules_offload import diffusion_offload_fresh_pages


def summary(fault_bytes, total=3.0, offload="model", status="ok", planned=2.1):
    return {"diffusion": {"result": {"status": status, "total_s": total, "host_fault_bytes": fault_bytes,
                                     "host_page_faults": {"text": 1, "denoise": 2, "vae": 3}},
                          "plan": {"inputs": {"offload": offload}, "time": {"total_s": planned}}}}


def test_fires_on_fresh_pages_worth_a_share_of_the_call():
    f = diffusion_offload_fresh_pages(summary(0.575e9, total=3.085, planned=2.08))
    cost = 0.575e9 / PAGE_BYTES * FAULT_S
    assert f.code == "offload_fresh_pages" and f.evidence["fault_s"] == pytest.approx(cost)
    # the call less its faults, 2.55 s, is still above the plan: that is the effect
    assert f.speedup == pytest.approx(3.085 / max(2.08, 3.085 - cost)) and f.severity == "medium"
    assert "0.57 GB" in f.estimated_effect or "0.58 GB" in f.estimated_effect
    assert "--warmup" in f.fix


@pytest.mark.parametrize("kw", [dict(fault_bytes=0.1e9), dict(fault_bytes=2e9, offload="none"),
                                dict(fault_bytes=2e9, offload="sequential"), dict(fault_bytes=None),
                                dict(fault_bytes=2e9, status="oom"),
                                dict(fault_bytes=0.44e9, total=2.4, planned=2.08),  # settled: within 1.3x the plan
                                dict(fault_bytes=0.3e9, total=5.0, planned=2.0)])  # faults explain < half the excess
def test_quiet_otherwise(kw):
    assert diffusion_offload_fresh_pages(summary(**kw)) is None  # 0.1 GB: 0.1 s of 3 s, under 5%


def test_in_the_diffusion_rules():
    assert diffusion_offload_fresh_pages in RULES
    assert diffusion_offload_fresh_pages({}) is None
