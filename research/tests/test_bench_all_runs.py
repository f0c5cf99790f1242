"""`gpuscope bench all --quick` on one H200: wall time under five minutes, every measurement ok, the accuracy
bench printed against the rows recomputed here, and the counts of rows within target across repeated runs,
each planned on the calibration its run wrote.

Results: research/results/2026-11-29-h200-d, 2026-11-30-h200, -f, -g, -h, -i, -j (README.md in each).
"""

from __future__ import annotations

import json

import pytest

from gpuscope.explain.compare import compare_record, read_records
from gpuscope.specs.hardware import load_hardware

from results_data import nov29_d, nov30, nov30_f, nov30_g, nov30_h, nov30_i, nov30_j
from validation_rows import check_row


def test_copy_and_bench_all():
    copies = [r["result"]["gbs"] for r in nov29_d.by(lambda c, r: c.get("bench") == "memory" and c.get("op") == "copy")]
    assert len(copies) == 3 and min(copies) >= 4000
    h2d = [r["result"]["gbs"] for r in nov29_d.by(lambda c, r: c.get("bench") == "transfer" and c.get("op") == "h2d"
                                           and c.get("pinned"))]
    assert min(h2d) >= 50
    steps = (nov29_d.HERE / "steps.txt").read_text()
    (line,) = [x for x in steps.splitlines() if x.startswith("bench_all_quick")]
    assert float(line.split()[-1].rstrip("s")) < 300  # bench all on one H200 under 5 minutes


def test_bench_all_17_measurements_under_5_minutes():
    """`gpuscope bench all` (quick) on one H200 in under 5 minutes: 123 s, all 17 measurements ok."""
    steps = (nov30.HERE / "steps.txt").read_text().splitlines()
    (line,) = [x for x in steps if x.startswith("bench_all_final")]
    assert " rc=0 " in f" {line} " and float(line.split()[-1].rstrip("s")) < 300
    def from_bench_all(r):
        argv = r["provenance"].get("parent_argv") or r["provenance"].get("argv") or []
        return argv[-3:] == ["bench", "all", "--json"]

    call6 = [r for r in nov30.RECORDS if from_bench_all(r)]
    assert len(call6) == 17 and all(r["result"]["status"] == "ok" for r in call6)
    assert {r["case"]["kind"] for r in call6} == {"micro", "infer", "train"}


def test_bench_all_plans_on_its_own_calibration():
    """On the final tree: `gpuscope bench all --json` (quick; now calibrating by default on a GPU) ran in
    111 s on one H200, 17 of 17 ok, and planned its four workloads on the TOML it wrote from its own micro ceilings
    and host passes (12.9 us per decode kernel, spread 8%): memory within 3.3%, prefill/step within 14%, decode
    -9.8% and -19.7% (tiny GPT-2: inside the validation's 20% for decode, outside the 15% target). The catalog on
    the same records: within 18.7%."""
    steps = (nov30_f.HERE / "steps.txt").read_text().splitlines()
    (line,) = [x for x in steps if x.startswith("bench_all_cal")]
    assert " rc=0 " in f" {line} " and float(line.split()[-1].rstrip("s")) < 300
    assert all(r["result"]["status"] == "ok" for r in nov30_f.CALL6)
    assert {r["case"]["kind"] for r in nov30_f.CALL6} == {"micro", "infer", "train"}
    assert "spread 8%" in (nov30_f.HERE / "bench_all_cal.stderr.txt").read_text()
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    hw = load_hardware(str(nov30_f.RUN_CAL))
    assert hw.is_calibrated and hw.measured["host_launch_s"] == pytest.approx(12.9e-6, rel=0.01)
    rows = [row for rec in nov30_f.CALL6 if rec["case"]["kind"] != "micro" for row in compare_record(rec, hw)]
    assert len(rows) == 16
    for row in rows:
        check_row(row, (row.case, row.metric), {})
    times = [r for r in rows if not r.metric.endswith("bytes")]
    assert sum(abs(r.error) <= 0.15 for r in times) == len(times) - 1


def test_the_final_suite_twice_on_a_steady_host():
    """Call 3: bench all twice on the final tree, each on its own calibration (host 15.5 / 15.8 us a kernel):
    3 and 4 of 6 time rows within 15% as calibrated, 3 and 3 at the run's host speed; memory 4 of 4 each. The
    JSON's estimate_accuracy says the same as the rows recomputed here."""
    workloads = [r for r in nov30_g.FINAL3 if r["case"]["kind"] in ("infer", "train")]
    assert len(nov30_g.FINAL3) == 34 and len(workloads) == 8
    first, second = workloads[:4], workloads[4:]
    for recs, cal, plain, at_run, name in ((first, nov30_g.FINAL3_CALS["a"], 3, 3, "bench_all_1.json"),
                                           (second, nov30_g.FINAL3_CALS["b"], 4, 3, "bench_all_2.json")):
        rows = nov30_g.bench_rows(recs, cal)
        assert len(rows) == 6 and nov30_g.within(rows, "error") == plain \
            and nov30_g.within(rows, "error_at_run_host") == at_run
        acc = json.loads((nov30_g.HERE / name).read_text())["estimate_accuracy"]
        assert (acc["time_within"], acc["time_within_at_run_host"], acc["memory_within"]) == (plain, at_run, 4)
        assert all(abs(r["error"]) < 0.5 for _, r in rows)  # the worst: tiny GPT-2 decode, -48%, run 2


def test_the_suite_with_both_probes():
    """Call 8: bench all with the training probe: 5 of 6 time rows within 15% as calibrated, 1 of 6 at the run's
    host speed (re-planned with the per-layer checkpoint: 4 and 0; the tiny GPT-2 step reads +17%, the per-call
    training costs counted whole, roofline.TrainHost). The calibration (passes spread 72%) wrote a 3.12 ms probe
    beside a 17.6 us launch cost; the runs'
    probes read 2.05-2.19 ms. host_costs now pairs the probe with the median launch's pass (not run on a GPU)."""
    from gpuscope.pipeline.estimate import estimate_beside

    recs = [r for r in read_records(nov30_g.HERE / "measurements_final4.jsonl")
            if r["case"]["kind"] in ("infer", "train")]
    cal = nov30_g.HERE / "nvidia-h200-20261130T052321Z-ed2913.toml"
    rows = [(r["case_id"], row) for r in recs for row in estimate_beside(r, str(cal))["rows"]
            if row["metric"] in ("prefill_s", "decode_s_per_token", "step_s")]
    assert len(recs) == 4 and len(rows) == 6
    assert nov30_g.within(rows, "error") == 4 and nov30_g.within(rows, "error_at_run_host") == 0
    train = [r["result"] for r in recs if r["case"]["kind"] == "train"]
    assert all(t["host_probe_train_s"] and "host_probe_s" not in t for t in train)
    acc = json.loads((nov30_g.HERE / "bench_all_4.json").read_text())["estimate_accuracy"]
    assert (acc["time_within"], acc["time_within_at_run_host"]) == (5, 1)


def test_nine_runs_memory_within_5_percent():
    errs = nov30_h.errors("peak_bytes")
    assert len(errs) == 36 and max(abs(e) for e in errs) < 0.034


def test_decode_is_within_15_percent_in_every_run_prefill_and_training_not():
    """Decode per token: 18 of 18 within 15%. Prefill: 11 of 18. Training step: 6 of 18 as the runs planned
    them, low in 15, the GPT-2 fp32 full-recompute step in 8 of 9 runs (-14% to -40%). Re-planned with the
    current training host model (the checkpoint per layer, the per-call costs whole: roofline.TrainHost): 9 of 18,
    low in 14; GPT-2 -35% to +10%, below -13% in 4 of 9. These calibrations predate the split, so only the per-call
    change moves them."""
    decode, prefill, step = nov30_h.errors("decode_s_per_token"), nov30_h.errors("prefill_s"), nov30_h.errors("step_s")
    assert len(decode) == len(prefill) == len(step) == 18
    assert sum(abs(e) <= 0.15 for e in decode) == 18
    assert sum(abs(e) <= 0.15 for e in prefill) == 11
    assert sum(abs(e) <= 0.15 for e in step) == 9 and sum(e < 0 for e in step) == 14
    gpt2 = [e for (c, r), e in zip([w for w in nov30_h.WORKLOADS if w[1]["case"]["kind"] == "train"], step)
            if "gpt2" in r["case_id"]]
    assert len(gpt2) == 9 and sum(e < -0.13 for e in gpt2) == 4 and -0.36 < min(gpt2) and max(gpt2) < 0.11


def test_a_time_floor_turns_a_median_of_two_into_hundreds():
    """Calls 4 and 5 timed every phase of a smoke workload for at least 2 s (cases.SMOKE_MIN_TIME_S)."""
    for c, r in nov30_h.WORKLOADS:
        res = r["result"]
        n = res.get("ttft_repeats") or res.get("timed_steps")
        if c in ("call4", "call5"):
            assert r["case"]["min_time_s"] == 2.0 and n >= 170
        else:
            assert "min_time_s" not in r["case"] and n is None


def test_eight_runs_memory_within_5_percent():
    errs = [e for m in ("peak_bytes", "forward_peak_bytes", "backward_peak_bytes", "optimizer_peak_bytes")
            for e in nov30_i.errors(nov30_i.CALLS, m)]
    assert len(errs) == 76 and max(abs(e) for e in errs) < 0.034


def test_the_final_tree_time_rows():
    """Calls 2-4 (the final tree, six runs, 35 time rows): 20 within 15%: decode 8 of 12, prefill 7 of 12,
    training step 5 of 11. Calls 3 and 4 met a slower host (probe 2.2-3.6 ms against 1.8-2.2 in calls 1-2): call 4
    met none, its calibration read a 2.85 ms probe and its runs 2.7-3.6 ms."""
    final = ("call2", "call3", "call4")
    decode, prefill, step = (nov30_i.errors(final, m) for m in ("decode_s_per_token", "prefill_s", "step_s"))
    assert (len(decode), len(prefill), len(step)) == (12, 12, 11)
    assert [sum(abs(e) <= 0.15 for e in x) for x in (decode, prefill, step)] == [8, 7, 5]
    quiet = nov30_i.errors(("call2",), "step_s")
    assert len(quiet) == 4 and max(abs(e) for e in quiet) < 0.21


def test_bench_printed_the_same_accuracy_and_ran_under_five_minutes():
    """bench's own wall_s (the device's step times add the interpreter start: 175-221 s)."""
    assert set(nov30_j.BENCH) == {f"bench_all_{i}" for i in range(2, 8)}
    for name, b in nov30_j.BENCH.items():
        assert b["wall_s"] < 300, name
        acc = b["estimate_accuracy"]
        assert (acc["memory_within"], acc["memory_rows"]) == (3, 3)
        assert acc["time_rows"] == 4
        assert acc["time_within"] == (3 if name == "bench_all_3" else 4), name  # run 3: the -16.0% above
    walls = [b["wall_s"] for b in nov30_j.BENCH.values()]
    assert 168 < min(walls) < max(walls) < 215
    assert "estimates: 4 of 4 time rows within 15%" in (nov30_j.HERE / "call1_bench_all_1.stderr.txt").read_text()


def test_the_calibration_history_check_ran_live():
    """Calls 2, 3 and 5 carried the store in: runs 4-7 set their host probe beside 3, 4, 5 and 4 earlier
    calibrations of this machine; run 7's read 27% faster, and its calibration said so."""
    hist = {n: b.get("calibration_host_history") for n, b in nov30_j.BENCH.items()}
    assert hist["bench_all_2"] is None and hist["bench_all_3"] is None
    assert [hist[f"bench_all_{i}"]["calibrations"] for i in (4, 5, 6, 7)] == [3, 4, 5, 4]
    assert hist["bench_all_7"]["ratio"] == pytest.approx(0.73, abs=0.01)
    assert all(0.9 < hist[f"bench_all_{i}"]["ratio"] < 1.1 for i in (4, 5, 6))
    err = (nov30_j.HERE / "call5_bench_all_7.stderr.txt").read_text()
    assert "27% faster than the median of this machine's 4 earlier calibrations" in err
