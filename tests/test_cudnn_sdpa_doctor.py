"""doctor's cudnn_graph_builds finding: a plain-generate case on the planner's cuDNN path measured well above the
warm plan, by at least half the builds its decode steps would pay at new KV lengths."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuscope.estimate.cudnn_sdpa import GRAPH_BUILD_S
from gpuscope.estimate.infer import estimate_infer
from gpuscope.explain import findings as F
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model


def _summary(gpu: str, measured_s: float, engine: str = "hf-eager", gen: int = 32, attn: str = "sdpa",
             planner_engine: str = "eager") -> tuple[dict, float]:
    est = estimate_infer(load_model("llama-3.1-8b"), load_hardware(gpu), batch=4, prompt=2048, gen=gen,
                         engine=planner_engine)
    case = {"kind": "infer", "engine": engine, "gen": gen, "batch": 4, "prompt": 2048, "attn": attn}
    s = {"case": case, "bare_s": measured_s, "steps": 1}
    s["estimate"] = F.compare_estimate(est, s)
    return s, s["estimate"]["estimated_s"]


def _codes(s: dict) -> set[str]:
    return {f.code for f in F.diagnose(s)}


def test_compare_estimate_carries_the_cold_figures():
    s, warm = _summary("h200", 1.0)
    assert s["estimate"]["planner_cudnn_build_s_per_step"] == GRAPH_BUILD_S
    assert s["estimate"]["planner_decode_cold_s"] > GRAPH_BUILD_S
    s, _ = _summary("a100-80gb", 1.0)
    assert s["estimate"]["planner_cudnn_build_s_per_step"] == 0.0


def test_fires_when_the_run_paid_the_builds():
    _, warm = _summary("h200", 1.0)
    builds = 31 * GRAPH_BUILD_S
    s, _ = _summary("h200", warm + builds)  # a first generate: every step built its graph
    (f,) = [x for x in F.diagnose(s) if x.code == "cudnn_graph_builds"]
    assert f.evidence["builds"] == 31 and f.evidence["excess_over_builds"] == pytest.approx(1.0)
    assert f.evidence["planned_cold_s"] == pytest.approx(warm + builds)
    assert f.speedup == pytest.approx((warm + builds) / warm) and f.severity == "high"
    assert "enable_cudnn_sdp(False)" in f.fix and "warm up" in f.fix and "hf-graph" in f.fix
    assert "slower_than_planned" in _codes(s)


def test_quiet_off_the_path_or_without_the_builds():
    _, warm = _summary("h200", 1.0)
    builds = 31 * GRAPH_BUILD_S
    assert "cudnn_graph_builds" not in _codes(_summary("h200", warm * 1.1)[0])  # warm run, near plan
    # 1.4x the plan (a slow host level) but under half the builds above it
    assert "cudnn_graph_builds" not in _codes(_summary("h200", warm * 1.4)[0])
    assert warm * 0.4 < 0.5 * builds
    assert "cudnn_graph_builds" in _codes(_summary("h200", warm + 0.6 * builds)[0])
    for quiet in (_summary("a100-80gb", 3 * warm)[0],  # no cuDNN first on sm80
                  _summary("h200", warm + builds, engine="hf-graph", planner_engine="hf-graph")[0],
                  _summary("h200", warm + builds, engine="gs-graph", planner_engine="graph-unfused")[0],
                  _summary("h200", warm + builds, attn="eager")[0],  # no SDPA
                  _summary("h200", warm + builds, gen=1)[0]):
        assert "cudnn_graph_builds" not in _codes(quiet)


def test_a_summary_without_the_planner_keys_stays_quiet():
    est = SimpleNamespace(kind="infer", time={"prefill_s": 0.1, "decode_s_per_token": 0.02, "decode_host_s": 0.02,
                                              "decode_gpu_s": 0.01}, hardware="h200", calibrated=False,
                          peak_bytes_per_gpu=2e9, fits=True)
    s = {"case": {"kind": "infer", "engine": "hf-eager", "gen": 32}, "bare_s": 5.0, "steps": 1}
    s["estimate"] = F.compare_estimate(est, s)
    assert "cudnn_graph_builds" not in _codes(s) and "slower_than_planned" in _codes(s)
