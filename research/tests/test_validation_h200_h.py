"""The eighth H200 session (research/results/2026-11-30-h200-h, README.md there): nine runs of `bench all`, each planned on
its own calibration, as the host calibration changed call by call (probes between rounds, each pass taken to the
passes' median probe, a round's derived costs from one moment, timed phases of at least 2 s, every round taken to a
reference speed); the host's speed is not a property of the CPU the process runs on.

Every workload is planned again here with the current planner on the calibration its run wrote, so a change to the
planner that moves these rows shows up as a failing count.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpuscope.explain.compare import read_records

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-11-30-h200-h"
CALLS = ("call1", "call3", "call4", "call5")
RECORDS = {c: read_records(HERE / f"{c}_measurements.jsonl") for c in CALLS}
WORKLOADS = [(c, r) for c in CALLS for r in RECORDS[c] if r["case"]["kind"] in ("infer", "train")]
HOST = [(c, r) for c in CALLS for r in RECORDS[c] if r["case"]["kind"] == "host"]


def _calibration(call: str, run_id: str):
    from gpuscope.specs.hardware import load_hardware

    (path,) = HERE.glob(f"{call}_nvidia-h200-{run_id}.toml")
    return load_hardware(str(path))


def _errors(metric: str, calls=CALLS) -> list[float]:
    from gpuscope.explain.compare import compare_record

    return [row.error for c, r in WORKLOADS if c in calls
            for row in compare_record(r, _calibration(c, r["run_id"])) if row.metric == metric]


def test_the_set():
    """Nine suite runs of 17 measurements each, all ok, each under issue 3's five minutes."""
    runs = sorted(HERE.glob("call*_bench_all_*.json"))
    assert len(runs) == 9 and len(WORKLOADS) == 36 and len(HOST) == 7  # call 1 predates the stored host fits
    for p in runs:
        d = json.loads(p.read_text())
        assert len(d["measurements"]) == 17 and all(m["status"] == "ok" for m in d["measurements"])
        assert d["wall_s"] < 300


def test_memory_is_within_5_percent_in_every_run():
    errs = _errors("peak_bytes")
    assert len(errs) == 36 and max(abs(e) for e in errs) < 0.034


def test_decode_is_within_15_percent_in_every_run_prefill_and_training_not():
    """Decode per token: 18 of 18 within 15%. Prefill: 11 of 18. Training step: 6 of 18 as the runs planned
    them, low in 15, the GPT-2 fp32 full-recompute step in 8 of 9 runs (-14% to -40%). Re-planned since session
    9 (the checkpoint per layer, the per-call costs whole: roofline.TrainHost): 9 of 18, low in 14; GPT-2 -35% to
    +10%, below -13% in 4 of 9. These calibrations predate the split, so only the per-call change moves them."""
    decode, prefill, step = _errors("decode_s_per_token"), _errors("prefill_s"), _errors("step_s")
    assert len(decode) == len(prefill) == len(step) == 18
    assert sum(abs(e) <= 0.15 for e in decode) == 18
    assert sum(abs(e) <= 0.15 for e in prefill) == 11
    assert sum(abs(e) <= 0.15 for e in step) == 9 and sum(e < 0 for e in step) == 14
    gpt2 = [e for (c, r), e in zip([w for w in WORKLOADS if w[1]["case"]["kind"] == "train"], step)
            if "gpt2" in r["case_id"]]
    assert len(gpt2) == 9 and sum(e < -0.13 for e in gpt2) == 4 and -0.36 < min(gpt2) and max(gpt2) < 0.11


def test_a_time_floor_turns_a_median_of_two_into_hundreds():
    """Calls 4 and 5 timed every phase of a smoke workload for at least 2 s (cases.SMOKE_MIN_TIME_S)."""
    for c, r in WORKLOADS:
        res = r["result"]
        n = res.get("ttft_repeats") or res.get("timed_steps")
        if c in ("call4", "call5"):
            assert r["case"]["min_time_s"] == 2.0 and n >= 170
        else:
            assert "min_time_s" not in r["case"] and n is None


@pytest.mark.parametrize("call", ["call4", "call5"])
def test_the_stored_passes_give_the_written_costs(monkeypatch, call):
    """host_costs, run again on the passes each calibration stored (their launch cost and probe), writes the same
    launch cost and probe as the TOML the run planned on."""
    import gpuscope.measure.calibrate as cal

    for c, r in HOST:
        if c != call:
            continue
        stored = iter(r["result"]["host"]["host_detail"]["passes"])
        monkeypatch.setattr(cal, "_host_pass", lambda dev, use_real: (lambda p: {
            "host_launch_s": p["real_width"]["decode_launch_s"], "host_probe_s": p["host_probe_s"],
            "host_detail": p})(next(stored)))
        again = cal.host_costs("cpu", passes=3)
        hw = _calibration(c, r["run_id"])
        assert again["host_launch_s"] == pytest.approx(hw.measured["host_launch_s"], rel=1e-9)
        assert again["host_probe_s"] == pytest.approx(hw.measured["host_probe_s"], rel=1e-9)


def test_rounds_taken_to_one_speed_agree_where_the_passes_did_not():
    """Call 5, first calibration: its passes spread 79% as measured (one met a slow episode) and 14% with each
    round taken to the reference speed by the probe after it; call 4's first, with only each pass taken to its own
    probe, 56% and 39%."""
    spreads = {r["run_id"]: (r["result"]["host"]["host_detail"]["launch_spread"],
                             r["result"]["host"]["host_detail"]["launch_spread_at_probe"]) for c, r in HOST}
    assert [round(x, 2) for x in spreads["20261130T063847Z-6d38c9"]] == [0.79, 0.14]
    assert [round(x, 2) for x in spreads["20261130T062744Z-07e7da"]] == [0.56, 0.39]


def test_the_forward_probe_does_not_carry_training_speed():
    """Call 5's two calibrations on the same host read the training probe at 2.51x and 3.20x the forward probe
    taken after the same training rounds: converting the training fits through the forward probe moved the first
    calibration's training estimates 1.5x low (written 5.29 ms against 8.00 ms read during the fits). Hence
    train_host_costs now takes them to the training probe read during the decode passes."""
    call5 = [r["result"]["train"]["host_train_detail"] for c, r in HOST if c == "call5"]
    ratios = [d["train_per_forward_probe"] for d in call5]
    assert [round(x, 2) for x in ratios] == [2.51, 3.20]
    first = next(r["result"]["train"] for c, r in HOST if c == "call5")
    assert round(first["host_probe_train_s"] * 1e3, 2) == 5.29 and round(call5[0]["host_probe_train_s"] * 1e3, 2) == 8.0


def test_the_host_speed_is_not_the_cpus():
    """The probe pinned to each of the 16 CPUs, six sweeps: every CPU read fast and slow (26-77% apart); pinned to
    the fastest CPU, unpinned and pinned to the slowest, interleaved, the three series slow down together (the
    pinned-fast and unpinned series correlate at 0.80) and have the same median within 1%."""
    d = json.loads((HERE / "call2_cpu_pin.json").read_text())
    sweeps = d["sweeps_s"]
    ranges = [(max(s[c] for s in sweeps) - min(s[c] for s in sweeps)) / min(s[c] for s in sweeps) for c in sweeps[0]]
    assert len(ranges) == 16 and min(ranges) > 0.25
    best, free = ([v for _, v in d["runs"][k]] for k in ("pinned_best", "unpinned"))
    assert statistics.correlation(best, free) > 0.75
    medians = [d["summary"][k]["median_ms"] for k in ("pinned_best", "unpinned", "pinned_worst")]
    assert (max(medians) - min(medians)) / min(medians) < 0.012
