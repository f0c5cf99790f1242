"""The tenth H200 session (research/results/2026-11-30-h200-j, README.md there): `bench all --quick` on an accelerator runs
GPU-sized workloads (measure/cases.gpu_quick_cases: Llama-3.1-8B hf-graph decode with the stop check deferred and
the projections fused, Llama-3.2-1B training in AMP bf16 with full recompute and in AMP fp16), seven runs; the
StaticCache's creation priced in an hf-graph TTFT (estimate/roofline.STATIC_CACHE_INIT) from
research/scripts/gpu_ttft_overhead.py; the fused 8B prefill against the plain one (research/scripts/gpu_prefill_fused.py).

Targets: issue 3's, memory 5% and time 15% on every row the suite runs, each run planned on its own calibration."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

import gpuscope.estimate.roofline as roofline
from gpuscope.explain.compare import compare_record, read_records
from gpuscope.measure.cases import case_id, gpu_quick_cases
from gpuscope.specs.hardware import load_hardware

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-11-30-h200-j"
RECORDS = read_records(HERE / "measurements.jsonl")
WORKLOADS = [r for r in RECORDS if r["case"]["kind"] in ("infer", "train")]
BENCH = {p.stem.split("_", 1)[1]: json.loads(p.read_text()) for p in sorted(HERE.glob("call*_bench_all_*.json"))}
TIME = ("prefill_s", "decode_s_per_token", "step_s")


def _calibration(run_id: str):
    (path,) = HERE.glob(f"call*_nvidia-h200-{run_id}.toml")
    return load_hardware(path)


def _rows(records=WORKLOADS):
    return [(rec["run_id"], row) for rec in records for row in compare_record(rec, _calibration(rec["run_id"]))]


def test_seven_runs_of_the_gpu_set_with_a_calibration_each():
    runs = {r["run_id"] for r in WORKLOADS}
    assert len(runs) == 7 and len(WORKLOADS) == 21
    for run in runs:  # the set as it is on an 80 GB-class GPU: bench all's fit changed nothing on the H200
        assert sorted(r["case_id"] for r in WORKLOADS if r["run_id"] == run) == \
            sorted(case_id(c) for c in gpu_quick_cases())
        assert all(r["result"]["status"] == "ok" for r in RECORDS if r["run_id"] == run)
        assert sum(r["run_id"] == run for r in RECORDS) == 17  # 13 micro, the host fits, 3 workloads


@pytest.mark.parametrize("run,row", [pytest.param(run, row, id=f"{run}:{row.case}:{row.metric}")
                                     for run, row in _rows() if row.metric in TIME or row.metric == "peak_bytes"])
def test_every_row_within_issue_3s_targets_on_its_own_calibration(run, row):
    tol = 0.05 if row.metric.endswith("bytes") else 0.15
    assert abs(row.error) <= tol, f"{run} {row.case} {row.metric}: {row.error:+.1%}"


def test_the_static_cache_term_is_what_brought_the_last_row_in(monkeypatch):
    """Without the StaticCache's creation in the TTFT (the planner bench printed in calls 1-3), call 2's first run
    planned the 8B TTFT 16.0% short; with it every prefill row moves up by 3.2-5.1 points (the term is in
    units of each calibration's prefill launch cost)."""
    rows = {(run, r.metric): r.error for run, r in _rows() if r.metric == "prefill_s"}
    assert len(rows) == 7 and max(abs(e) for e in rows.values()) < 0.12
    for name in ("hf-graph", "hf-graph-defer"):
        monkeypatch.setitem(roofline.ENGINES, name, replace(roofline.ENGINES[name], cache_init_units=0.0,
                                                              cache_init_layer_units=0.0))
    before = {(run, r.metric): r.error for run, r in _rows() if r.metric == "prefill_s"}
    assert before[("20261130T090147Z-cbab2d", "prefill_s")] == pytest.approx(-0.160, abs=0.002)
    assert all(0.03 < rows[k] - before[k] < 0.055 for k in rows)


def test_bench_printed_the_same_accuracy_and_ran_under_five_minutes():
    """bench's own wall_s (the device's step times add the interpreter start: 175-221 s)."""
    assert set(BENCH) == {f"bench_all_{i}" for i in range(2, 8)}
    for name, b in BENCH.items():
        assert b["wall_s"] < 300, name
        acc = b["estimate_accuracy"]
        assert (acc["memory_within"], acc["memory_rows"]) == (3, 3)
        assert acc["time_rows"] == 4
        assert acc["time_within"] == (3 if name == "bench_all_3" else 4), name  # run 3: the -16.0% above
    assert 168 < min(b["wall_s"] for b in BENCH.values()) < max(b["wall_s"] for b in BENCH.values()) < 215
    assert "estimates: 4 of 4 time rows within 15%" in (HERE / "call1_bench_all_1.stderr.txt").read_text()


def test_the_calibration_history_check_ran_live():
    """Calls 2, 3 and 5 carried the store in: runs 4-7 set their host probe beside 3, 4, 5 and 4 earlier
    calibrations of this machine; run 7's read 27% faster, and its calibration said so."""
    hist = {n: b.get("calibration_host_history") for n, b in BENCH.items()}
    assert hist["bench_all_2"] is None and hist["bench_all_3"] is None
    assert [hist[f"bench_all_{i}"]["calibrations"] for i in (4, 5, 6, 7)] == [3, 4, 5, 4]
    assert hist["bench_all_7"]["ratio"] == pytest.approx(0.73, abs=0.01)
    assert all(0.9 < hist[f"bench_all_{i}"]["ratio"] < 1.1 for i in (4, 5, 6))
    err = (HERE / "call5_bench_all_7.stderr.txt").read_text()
    assert "27% faster than the median of this machine's 4 earlier calibrations" in err


def test_the_8b_graph_decode_reads_weights_at_60_to_65_percent_of_copy_at_a_2048_prompt():
    """At p2048 the decode also reads a 2176-slot StaticCache, expanded to every query head under the mask
    (estimate/ops.py), so weights alone reach 60-65% of the run's copy bandwidth; issue 3's 70% case is p128 (75%,
    research/results/2026-11-30-h200-f)."""
    for b in BENCH.values():
        by = {m["name"]: m["result"] for m in b["measurements"]}
        copy = by["micro/memory/copy/quick"]["gbs"]
        (inf,) = [r for n, r in by.items() if n.startswith("infer/")]
        assert 0.58 < inf["decode_weights_gbs"] / copy < 0.66


def test_the_static_cache_constants_reproduce_the_ttft_experiment():
    """hf-graph minus hf-eager TTFT (medians over three alternating rounds) against the planner's term at the
    eager prefill host cost of that hour (about 21 us a kernel at the experiment's 2.1-2.6 ms probe)."""
    d = json.loads((HERE / "call4_ttft_overhead.json").read_text())["models"]
    eng = roofline.ENGINES["hf-graph"]
    diffs = {}
    for name, m in d.items():
        diffs[m["layers"]] = statistics.median(m["ttft_ms"]["hf-graph"]) - statistics.median(m["ttft_ms"]["hf-eager"])
    assert sorted(diffs) == [2, 16, 32]
    assert diffs[2] < diffs[16] < diffs[32]  # it grows with depth
    for layers, ms in diffs.items():
        assert eng.cache_init_s(21e-6, layers) * 1e3 == pytest.approx(ms, abs=0.25), (layers, ms)


def test_fused_projections_cost_the_8b_prefill_1_to_3_ms():
    """Fused q|k|v and gate|up: the bare prefill forward read 63.3-64.0 ms against 60.7-61.9 plain, 1.4-3.1 ms more
    round by round (the SiLU and product over the fused output's strided halves), while the GEMMs took the same
    time; the kernel totals of one TTFT each differ by 2%."""
    d = json.loads((HERE / "call2_prefill_fused.json").read_text())
    diffs = [f - p for p, f in zip(d["prefill_ms"]["plain"], d["prefill_ms"]["fused"])]
    assert len(diffs) == 3 and all(1.0 < x < 4.0 for x in diffs) and statistics.mean(diffs) > 2.0
    k = {n: v["total_ms"] for n, v in d["kernels"].items()}
    assert k["fused"] / k["plain"] == pytest.approx(1.02, abs=0.01)


def test_full_recompute_re_runs_the_layers_only():
    """The 1B AMP full-recompute step read 8-12% above the plan in every run as bench printed it; the plan re-ran the
    whole forward, the 128k-vocabulary head and loss included, which HF's checkpointing does not. Re-planned with
    the layers only: +2.0% to +5.7%. Its no-recompute twin: within 2% before and after."""
    printed = [m["estimate"] for b in BENCH.values() for m in b["measurements"] if "rc_full" in m["name"]]
    printed = [r["error"] for e in printed for r in e["rows"] if r["metric"] == "step_s"]
    assert len(printed) == 6 and all(0.08 <= e <= 0.125 for e in printed)
    now = [r.error for run, r in _rows() if r.metric == "step_s" and "rc_full" in r.case]
    assert len(now) == 7 and all(0.015 < e < 0.06 for e in now)
    twin = [r.error for run, r in _rows() if r.metric == "step_s" and "rc_none" in r.case]
    assert len(twin) == 7 and all(abs(e) < 0.02 for e in twin)
