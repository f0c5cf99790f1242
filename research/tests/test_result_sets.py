"""Each dated results folder holds the runs its README lists (counts of records, kinds, runs, all ok).

The row-by-row check of the planner against these records is research/tests/test_results.py; this module checks that
the records it reads are the set each README describes, so a lost or added record fails here first.
"""

from __future__ import annotations

import json

from gpuscope.workloads import case_id
from gpuscope.workloads.sets import gpu_quick_cases

from results_data import nov29, nov29_b, nov29_c, nov29_d, nov29_x2, nov30, nov30_f, nov30_g, nov30_h, nov30_i, nov30_j


def test_h200_first_set_28_infer_and_train_cases():
    assert len(nov29.RECORDS) == 28
    kinds = {r["case"]["kind"] for r in nov29.RECORDS}
    assert kinds == {"infer", "train"}


def test_the_set_holds_every_engine_and_the_7b_training_cases():
    assert len(nov29_b.RECORDS) == 9
    engines = {r["case"].get("engine", "hf-eager") for r in nov29_b.RECORDS if r["case"]["kind"] == "infer"}
    assert engines == {"hf-eager", "gs-graph", "gs-compile"}
    assert sum(r["case"]["kind"] == "train" for r in nov29_b.RECORDS) == 3


def test_h200_c_set_7_infer_1_compression():
    kinds = sorted(r["case"]["kind"] for r in nov29_c.RECORDS)
    assert kinds.count("infer") == 7 and kinds.count("compression") == 1
    assert all(r["result"]["status"] == "ok" for r in nov29_c.RECORDS)


def test_h200_d_set_47_records():
    kinds = [r["case"]["kind"] for r in nov29_d.RECORDS]
    assert len(nov29_d.RECORDS) == 47 and kinds.count("infer") == 6 and kinds.count("train") == 8
    assert all(r["result"]["status"] == "ok" for r in nov29_d.RECORDS)
    assert all(r["result"].get("device_name") == "NVIDIA H200" for r in nov29_d.RECORDS)


def test_h200_x2_set_ddp_and_fsdp():
    got = {(r["case"]["strategy"], r["case"]["model"]) for r in nov29_x2.TRAIN}
    assert got == {("ddp", "llama-3.2-1b"), ("fsdp", "llama-3.2-1b"), ("ddp", "llama-2-7b"), ("fsdp", "llama-2-7b")}
    assert all(r["result"]["status"] == "ok" for r in nov29_x2.TRAIN)


def test_h200_e_set_45_records():
    kinds = [r["case"]["kind"] for r in nov30.RECORDS]
    assert len(nov30.RECORDS) == 45 and kinds.count("infer") == 11 and kinds.count("train") == 5
    assert all(r["result"]["status"] == "ok" and r["result"]["device_name"] == "NVIDIA H200" for r in nov30.RECORDS)
    assert len(nov30.CALL4) == 6


def test_h200_f_set_56_records():
    assert len(nov30_f.RECORDS) == 56 and len(nov30_f.WORKLOADS) == 19 and len(nov30_f.CALL3) == 21 \
        and len(nov30_f.CALL5) == 4
    assert len(nov30_f.CALL6) == 17
    assert all(r["result"]["status"] == "ok" and r["result"]["device_name"] == "NVIDIA H200" for r in nov30_f.RECORDS)
    deferred = [r for r in nov30_f.WORKLOADS if r["case"].get("defer_stop")]
    assert len(deferred) == 5 and all(r["result"]["stop_check"] == "deferred" for r in deferred)


def test_h200_g_set_40_records():
    assert len(nov30_g.RECORDS) == 40 and len(nov30_g.CALL1) == 3 and len(nov30_g.BENCH_ALL) == 4 \
        and len(nov30_g.AFTER) == 4
    assert all(r["result"]["status"] == "ok" for r in nov30_g.RECORDS)
    assert all(r["result"].get("host_probe_s") for r in nov30_g.CALL2)  # call 2 ran with the probe


def test_h200_h_nine_suite_runs():
    """Nine suite runs of 17 measurements each, all ok, each under the five-minute target."""
    runs = sorted(nov30_h.HERE.glob("call*_bench_all_*.json"))
    # call 1 predates the stored host fits
    assert len(runs) == 9 and len(nov30_h.WORKLOADS) == 36 and len(nov30_h.HOST) == 7
    for p in runs:
        d = json.loads(p.read_text())
        assert len(d["measurements"]) == 17 and all(m["status"] == "ok" for m in d["measurements"])
        assert d["wall_s"] < 300


def test_h200_i_eight_suite_runs():
    """Eight `bench all` runs: call 1 two (the tree before the training change), call 2 two, call 3 three, call 4
    one. Call 3's first was stopped by the script's own 185 s step limit after three workloads (its JSON never
    written; its store kept them). The seven complete ones: all ok, 153-194 s (target: under five minutes)."""
    runs = sorted(nov30_i.HERE.glob("call*_bench_all_*.json"))
    assert len(runs) == 7
    walls = []
    for p in runs:
        d = json.loads(p.read_text())
        assert len(d["measurements"]) == 17 and all(m["status"] == "ok" for m in d["measurements"])
        walls.append(d["wall_s"])
    assert 150 < min(walls) and max(walls) < 195
    # call 3 run 1: three workloads, the GPT-2 training not reached
    assert len(nov30_i.HOST) == 8 and len(nov30_i.WORKLOADS) == 31


def test_h200_i_training_phases_set():
    """Two sweeps of eight cases (the second in reverse order), each at 2/4/8 layers, kernels counted in the first."""
    assert nov30_i.PHASES["probe_unit_s"] == 0.005 and len(nov30_i.PHASES["runs"]) == 16
    for sweep in (0, 1):
        assert len(nov30_i.by_sweep(sweep)) == 8
    k = nov30_i.by_sweep(0)
    # the profiler's forward kernels at 2/4/8 layers: GPT-2 fp32 19 a layer, Llama amp-bf16 49
    assert k[("gpt2", "fp32", "full")]["kernels"]["forward"] == [60, 98, 174]
    assert k[("llama", "amp-bf16", "none")]["kernels"]["forward"] == [132, 230, 426]


def test_seven_runs_of_the_gpu_set_with_a_calibration_each():
    runs = {r["run_id"] for r in nov30_j.WORKLOADS}
    assert len(runs) == 7 and len(nov30_j.WORKLOADS) == 21
    for run in runs:  # the set as it is on an 80 GB-class GPU: bench all's fit changed nothing on the H200
        assert sorted(r["case_id"] for r in nov30_j.WORKLOADS if r["run_id"] == run) == \
            sorted(case_id(c) for c in gpu_quick_cases())
        assert all(r["result"]["status"] == "ok" for r in nov30_j.RECORDS if r["run_id"] == run)
        assert sum(r["run_id"] == run for r in nov30_j.RECORDS) == 17  # 13 micro, the host fits, 3 workloads
