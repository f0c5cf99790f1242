"""doctor infer/train on a CPU: the timed phases end at a budget and the profile covers what ran, progress is said
per token and step, and the CPU finding reads the decode step against the weights and the host's bandwidth."""

from __future__ import annotations

import pytest

from gpuscope.workloads.sets import TINY_LLAMA


def _infer(gen: int, budget: float | None, events: list | None = None) -> dict:
    from gpuscope.measure.profile.workload import profile_workload

    case = {"kind": "infer", "model": "tiny-llama", "config": dict(TINY_LLAMA), "batch": 1, "prompt": 8, "gen": gen,
            "dtype": "fp32", "device": "cpu"}
    on = (lambda phase, i, n: events.append((phase, i, n))) if events is not None else None
    return profile_workload(case, "cpu", on, budget)


def test_budget_ends_the_bare_generate_and_the_profile_covers_a_part_of_it(monkeypatch):
    from gpuscope.measure.profile import token_clock

    clock = iter(range(0, 10**6))  # the clock one "second" later at each reading: a token a second
    monkeypatch.setattr(token_clock, "_now", lambda: float(next(clock)))
    events: list = []
    s = _infer(gen=40, budget=5.0, events=events)  # bare: 6 tokens (past 5 s); profiled: 3 (1.25 s past the first)
    tok = s["tokens"]
    assert s["status"] == "ok" and tok["asked"] == 40 and tok["bare"]["tokens"] == 6 and tok["ran"] == 3
    assert "after 6 of 40 tokens, the profiled one after 3" in tok["stopped_why"]
    assert tok["bare"]["decode_s_median"] == 1.0 and tok["bare"]["first_token_s"] == 1.0
    assert s["case"]["gen"] == 3 and s["case"]["gen_asked"] == 40  # what the estimate compares
    assert s["steps"] == 1 and s["bare_s"] == 3.0 and s["profiler_overhead_source"] == "bare_run"
    phases = [e[0] for e in events]
    assert phases[0] == "building the model" and "warm-up generate" in phases
    assert ("bare generate, token", 6, 40) in events and ("profiled generate, token", 3, 6) in events
    assert ("profiled generate, token", 4, 6) not in events and phases[-1] == "reading the profile"


def test_min_tokens_run_whatever_the_budget(monkeypatch):
    from gpuscope.measure.profile import token_clock

    clock = iter(range(0, 10**6))
    monkeypatch.setattr(token_clock, "_now", lambda: float(next(clock)))
    tok = _infer(gen=40, budget=1e-6)["tokens"]
    assert tok["bare"]["tokens"] == tok["ran"] == token_clock.MIN_TOKENS


def test_no_budget_runs_every_token_asked():
    s = _infer(gen=5, budget=None)
    assert s["tokens"]["ran"] == 5 and s["tokens"]["stopped_why"] is None and s["case"]["gen"] == 5
    assert s["tokens"]["bare"]["tokens"] == 5 and s["tokens"]["bare"]["decode_s_median"] > 0
    assert s["weight_bytes"] > 0 and "gen_asked" not in s["case"]


def test_train_steps_end_at_the_budget():
    from gpuscope.measure.profile.workload import profile_workload

    case = {"kind": "train", "model": "tiny-llama", "config": dict(TINY_LLAMA), "micro_batch": 1, "seq": 16,
            "precision": "fp32", "steps": 50, "device": "cpu"}
    s = profile_workload(case, "cpu", None, 1e-9)  # the budget passes after the first step
    assert s["train_steps"]["ran"] == 2 and s["steps"] == 2 and s["case"]["steps"] == 2
    assert s["case"]["steps_asked"] == 50 and "after 2 of 50" in s["train_steps"]["stopped_why"]


def _cpu_summary(step=0.62, bw=21.0, dtype="fp32", batch=1, device_type="cpu"):
    return {"device_type": device_type, "case": {"kind": "infer", "batch": batch, "dtype": dtype},
            "tokens": {"bare": {"decode_s_median": step, "first_token_s": 5.0}}, "weight_bytes": 4.94e9,
            "host_bw_gbs": bw}


def test_cpu_decode_finding():
    from gpuscope.explain.doctor_cpu import cpu_decode_weights

    f = cpu_decode_weights(_cpu_summary())
    assert f.code == "cpu_decode_weights" and f.severity == "info" and f.speedup is None  # 38% of the step
    assert f.evidence["achieved_gbs"] == pytest.approx(4.94 / 0.62)
    assert f.evidence["weight_read_share_of_step"] == pytest.approx(4.94 / 21.0 / 0.62)
    fast = cpu_decode_weights(_cpu_summary(step=0.30))  # the weight read is 78% of the step: bf16 halves it
    assert fast.speedup == pytest.approx(1 / (1 - 4.94 / 21.0 / 0.30 / 2)) and "bf16 weights" in fast.estimated_effect
    assert cpu_decode_weights(_cpu_summary(step=0.30, dtype="bf16")).speedup is None
    assert cpu_decode_weights(dict(_cpu_summary(), host_bw_gbs=None)).evidence["weight_read_share_of_step"] is None
    for quiet in (_cpu_summary(device_type="cuda"), _cpu_summary(batch=64), dict(_cpu_summary(), tokens={})):
        assert cpu_decode_weights(quiet) is None


def test_report_plans_a_cpu_run_on_the_kept_host_ceilings(monkeypatch):
    from gpuscope.explain import doctor_report
    from gpuscope.pipeline import host_ceilings
    from gpuscope.specs.hardware import load_hardware

    hw = load_hardware("h100")
    monkeypatch.setattr(host_ceilings, "lookup", lambda host, name: (hw, "this host's measured ceilings (x.toml)"))
    got, why, source = doctor_report.hardware_for(None, "x86_64", "cpu")
    assert got is hw and why is None and "x.toml" in source
    monkeypatch.setattr(host_ceilings, "lookup", lambda host, name: None)
    got, why, source = doctor_report.hardware_for(None, "x86_64", "cpu")
    assert got is None and "no ceilings measured for this host" in why
    s = dict(_cpu_summary(), wall_s=1.0)
    s.pop("host_bw_gbs")
    codes = [f.code for f in doctor_report._findings(s, hw)]
    assert "cpu_decode_weights" in codes and s["host_bw_gbs"] == pytest.approx(hw.achievable_bw_gbs())
