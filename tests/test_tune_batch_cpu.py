"""tune batch within a time budget, its CPU defaults, and its line per batch size."""

from __future__ import annotations


class _FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_budget_stops_growing_before_a_trial_that_would_end_past_it():
    from gpuscope.measure.tune.batch import search_batch

    clock, seen = _FakeClock(), []
    curve = {1: 100.0, 2: 190.0, 4: 350.0, 8: 600.0, 16: 900.0}

    def trial(b):  # a trial takes b seconds
        clock.t += b
        return {"tokens_per_s": curve[b]}

    r = search_batch(trial, max_batch=256, budget_s=20.0, clock=clock, on_row=seen.append)
    assert [x["batch"] for x in r["rows"]] == [1, 2, 4, 8] and [x["batch"] for x in seen] == [1, 2, 4, 8]
    assert "batch 16 would take about 16 s" in r["budget_stop"] and not r["limit_reached"]
    assert r["max_batch"] == 8 and r["knee_batch"] == 8 and not r["knee_reached"]  # 4 -> 8 still gained 71%
    assert [x["trial_s"] for x in r["rows"]] == [1.0, 2.0, 4.0, 8.0]
    free = search_batch(trial, max_batch=16, clock=clock)
    assert free["budget_stop"] is None and free["limit_reached"] and free["max_batch"] == 16
    flat = search_batch(lambda b: {"tokens_per_s": min(b, 4) * 100.0}, max_batch=32)
    assert flat["knee_batch"] == 4 and flat["knee_reached"]  # 8, 16 and 32 measured: no gain past 4


def test_budget_also_bounds_the_bisection():
    import torch

    from gpuscope.measure.tune.batch import search_batch

    clock = _FakeClock()

    def trial(b):
        clock.t += b
        if b > 5:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return {"tokens_per_s": float(b)}

    r = search_batch(trial, max_batch=64, budget_s=16.0, clock=clock)  # 1+2+4, 8 OOMs at t=15: no room for 6
    assert [x["batch"] for x in r["rows"]] == [1, 2, 4, 8] and r["first_oom"] == 8 and r["max_batch"] == 4
    assert "batch 6" in r["budget_stop"]
    r = search_batch(trial, max_batch=64, clock=clock)  # no budget: bisection to 5
    assert r["max_batch"] == 5 and r["budget_stop"] is None


def test_cpu_defaults_and_what_is_given_is_kept():
    from gpuscope.cli.tune import BATCH_CPU, _batch_defaults

    given = dict(prompt=None, gen=16, dtype=None, seq=None, precision=None, max_batch=None, budget=None)
    v, note = _batch_defaults("infer", "cpu", given)
    assert v["prompt"] == BATCH_CPU["prompt"] and v["gen"] == 16 and v["dtype"] == "fp32"
    assert v["max_batch"] == BATCH_CPU["max_batch"] and v["budget"] == BATCH_CPU["budget"]
    assert "--prompt 32" in note and "--gen" not in note and "--seq" not in note and "--budget 60" in note
    v, note = _batch_defaults("train", "cpu", dict(given, seq=64, budget=5.0))
    assert v["seq"] == 64 and v["precision"] == "fp32" and v["budget"] == 5.0 and "--precision fp32" in note


def test_tune_batch_cli_on_a_cpu_says_each_batch_and_its_defaults(tmp_path, capsys):
    import json

    from gpuscope.cli import main

    cfg = tmp_path / "config.json"
    from gpuscope.workloads.sets import TINY_LLAMA

    cfg.write_text(json.dumps(TINY_LLAMA))
    try:
        main(["tune", "batch", "infer", "--config", str(cfg), "--device", "cpu", "--max-batch", "4", "--gen", "3"])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "tune batch on a CPU: --prompt 32, --dtype fp32, --budget 60" in out.err
    for b in (1, 2, 4):
        assert f"  batch {b}: " in out.err
    assert "knee:" in out.out
    from gpuscope.report.doctor_view import _knee

    rows = [{"status": "ok"}, {"status": "ok"}]
    assert _knee({"knee_batch": 4, "knee_reached": False, "rows": rows}).endswith("still rose at the largest batch tried)")
    assert _knee({"knee_batch": 4, "knee_reached": False, "rows": rows[:1]}).endswith("(not reached: no other batch measured)")
    assert _knee({"knee_batch": 4, "knee_reached": True}) == "4"
