"""The seventh H200 session (research/results/2026-11-30-h200-g, README.md there): the host's speed moved by up to 2x
between the calibration and the runs, with no steal; the host probe (measure/host_probe.py) explains most of the
calibrated planner's misses; the planner's training kernel counts against the profiler's; interleaved host fits.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpuscope.explain.compare import read_records

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-11-30-h200-g"
RECORDS = read_records(HERE / "measurements.jsonl")
WORKLOADS = [r for r in RECORDS if r["case"]["kind"] in ("infer", "train")]
CALL1 = [r for r in WORKLOADS if r["provenance"]["timestamp_utc"] < "2026-11-30T04:40"]
CALL2 = [r for r in WORKLOADS if r["provenance"]["timestamp_utc"] >= "2026-11-30T04:40"]
BENCH_ALL = [r for r in CALL2 if "tiny" in r["case_id"]]
AFTER = [r for r in CALL2 if r not in BENCH_ALL]
BENCH_ALL_CAL = HERE / "nvidia-h200-20261130T044452Z-c3dca7.toml"  # bench all wrote it and planned on it
CAL_END = HERE / "cal_end.toml"


def _rows(records, cal) -> list[tuple[str, dict]]:
    """The time rows as bench printed them in calls 2 and 3: every row, training included, set against the
    forward-only probe (``host_probe_s``; the TTFT row against ``host_probe_ttft_s`` where the run had it). Since
    call 7, bench sets a training run against the training probe only (test_training_runs_...)."""
    from gpuscope.explain.compare import at_host_speed, compare_record, host_scale
    from gpuscope.specs.hardware import load_hardware

    hw = load_hardware(str(cal))
    out = []
    for rec in records:
        res = rec["result"]
        scale, ttft = host_scale(res, hw), host_scale(res, hw, "host_probe_ttft_s")
        at_run = compare_record(rec, at_host_speed(hw, scale))
        at_ttft = compare_record(rec, at_host_speed(hw, ttft)) if ttft else at_run
        for r, a, t in zip(compare_record(rec, hw), at_run, at_ttft):
            if r.metric in ("prefill_s", "decode_s_per_token", "step_s"):
                out.append((r.case, {"metric": r.metric, "error": r.error,
                                     "error_at_run_host": (t if r.metric == "prefill_s" else a).error}))
    return out


def _within(rows, key: str) -> int:
    return sum(abs(r[key]) <= 0.15 for _, r in rows)


def test_the_set():
    assert len(RECORDS) == 40 and len(CALL1) == 3 and len(BENCH_ALL) == 4 and len(AFTER) == 4
    assert all(r["result"]["status"] == "ok" for r in RECORDS)
    assert all(r["result"].get("host_probe_s") for r in CALL2)  # call 2 ran with the probe


def test_the_host_moved_without_steal():
    """16.9 us a kernel in call 1, 29.3 and 32.8 us in call 2 (session 6: 12.9-22.4); /proc/stat's steal 0 in
    every workload, while the process used a whole CPU (host-bound)."""
    from gpuscope.specs.hardware import load_hardware

    launch = [load_hardware(str(HERE / n)).measured["host_launch_s"] for n in
              ("cal_tw.toml", BENCH_ALL_CAL.name, CAL_END.name)]
    assert [round(x * 1e6, 1) for x in launch] == [16.9, 32.8, 29.3]
    for r in WORKLOADS:
        load = r["result"].get("host_load_steps") or r["result"].get("host_load_generate")
        assert load["steal_fraction"] == 0.0
    gpt2 = [r["result"]["step_s"] for r in WORKLOADS if r["case_id"].startswith("train/gpt2/mb2-s128-amp-bf16-rc_none")]
    assert [round(x * 1e3, 1) for x in gpt2] == [38.3, 34.9]


def test_the_host_probe_explains_most_of_the_calibrated_misses():
    """bench all on its own calibration: 1 of 6 time rows within 15% as calibrated, 4 of 6 at the host speed each
    run met. The four workloads after it: 0 of 10 as calibrated (against either calibration), 7 of 10 at the run's
    host speed (8 until session 9: GPT-2 without recompute now reads +15.4% there, the per-call training costs
    counted whole, roofline.TrainHost)."""
    own = _rows(BENCH_ALL, BENCH_ALL_CAL)
    assert len(own) == 6 and _within(own, "error") == 1 and _within(own, "error_at_run_host") == 4
    after = _rows(AFTER, BENCH_ALL_CAL) + _rows(AFTER, CAL_END)
    assert len(after) == 10 and _within(after, "error") == 0 and _within(after, "error_at_run_host") == 7
    # the misses that remain at the run's host speed, each bounded
    left = {(n, r["metric"]): r["error_at_run_host"] for n, r in own + after if abs(r["error_at_run_host"]) > 0.15}
    assert set(left) == {("infer/tiny-llama/b2-p32-g8-fp32", "prefill_s"),
                         ("train/tiny-llama/mb2-s64-amp-bf16-rc_none", "step_s"),
                         ("train/gpt2/mb2-s128-amp-bf16-rc_full", "step_s"),
                         ("train/gpt2/mb2-s128-amp-bf16-rc_none", "step_s"),
                         ("infer/llama-3.2-1b/b1-p128-g64-bf16", "decode_s_per_token")}
    assert all(abs(e) < 0.35 for e in left.values())


def test_the_planner_under_counts_training_kernels():
    """Device kernels per layer of a training forward (profiler, per phase): GPT-2 33, Llama 49 at tiny and real
    widths; the planner counts 25 and 42. Backward: GPT-2 52, Llama 96 (101 at 1B widths)."""
    from gpuscope.estimate.train import layer_kernels, train_forward_ops
    from gpuscope.measure.host_overhead import TINY
    from gpuscope.specs.hf_config import spec_from_config

    cases = {(c["name"], c["recompute"]): c for c in json.loads((HERE / "train_width_seq.json").read_text())["cases"]}

    def per_layer(c, phase):
        k, n = c["kernels"][phase], c["layers"]
        return (k[-1] - k[0]) / (n[-1] - n[0])

    measured = {name: per_layer(cases[(name, "none")], "forward") for name, _ in cases}
    assert measured == {"gpt2-tiny": 33, "gpt2-real": 33, "llama-tiny": 49, "llama-1b-width": 49}
    assert per_layer(cases[("gpt2-real", "none")], "backward") == 52
    assert per_layer(cases[("gpt2-real", "full")], "backward") == 84
    for name in measured:  # the planner's per-layer count does not depend on the widths
        fam = "gpt2" if name.startswith("gpt2") else "llama"
        spec = spec_from_config(dict(TINY[fam], **{("n_layer" if fam == "gpt2" else "num_hidden_layers"): 2}))
        planned = layer_kernels(train_forward_ops(spec, 2, 64, 2.0, 4.0), 2)[0] / 2
        assert planned == (25 if fam == "gpt2" else 42)
        assert 1.1 < measured[name] / planned < 1.35  # under-counted: GPT-2 by 24%, Llama by 14%


def _max_residual(path: Path) -> float:
    out = []
    for c in json.loads(path.read_text())["cases"]:
        for k in ("forward_s", "backward_s"):
            xs, ys = c["layers"], c[k]
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
            out.append(max(abs(y - (my + b * (x - mx))) / y for x, y in zip(xs, ys)))
    return max(out)


def test_interleaved_training_fits_are_lines():
    """The same 16 fits (4 models x 2 recompute x forward/backward): timed depth by depth in call 1, a point lay
    51% off its line; timed round-robin in call 2, at most 14%."""
    assert _max_residual(HERE / "train_width_seq.json") > 0.45
    assert _max_residual(HERE / "train_width_interleaved.json") < 0.15


@pytest.mark.parametrize("name", ["cal_tw.toml", "cal_end.toml", "nvidia-h200-20261130T044452Z-c3dca7.toml"])
def test_the_calibrations_load(name):
    from gpuscope.specs.hardware import load_hardware

    hw = load_hardware(str(HERE / name))
    assert hw.is_calibrated and hw.measured["memory_bw_gbs"] > 4000


FINAL3 = read_records(HERE / "measurements_final3.jsonl")
FINAL3_CALS = {"a": HERE / "nvidia-h200-20261130T045647Z-0d633b.toml",
               "b": HERE / "nvidia-h200-20261130T045852Z-52e79b.toml"}


def test_the_final_suite_twice_on_a_steady_host():
    """Call 3: bench all twice on the final tree, each on its own calibration (host 15.5 / 15.8 us a kernel):
    3 and 4 of 6 time rows within 15% as calibrated, 3 and 3 at the run's host speed; memory 4 of 4 each. The
    JSON's estimate_accuracy says the same as the rows recomputed here."""
    workloads = [r for r in FINAL3 if r["case"]["kind"] in ("infer", "train")]
    assert len(FINAL3) == 34 and len(workloads) == 8
    first, second = workloads[:4], workloads[4:]
    for recs, cal, plain, at_run, name in ((first, FINAL3_CALS["a"], 3, 3, "bench_all_1.json"),
                                           (second, FINAL3_CALS["b"], 4, 3, "bench_all_2.json")):
        rows = _rows(recs, cal)
        assert len(rows) == 6 and _within(rows, "error") == plain and _within(rows, "error_at_run_host") == at_run
        acc = json.loads((HERE / name).read_text())["estimate_accuracy"]
        assert (acc["time_within"], acc["time_within_at_run_host"], acc["memory_within"]) == (plain, at_run, 4)
        assert all(abs(r["error"]) < 0.5 for _, r in rows)  # the worst: tiny GPT-2 decode, -48%, run 2


def _corr(a, b) -> float:
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return num / (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5


@pytest.mark.parametrize("name", ["probe_track.json", "probe_track_2.json"])
def test_the_probe_follows_generate_not_the_training_step(name):
    """Call 4: the probe and tiny GPT-2 generate correlate at 0.87-0.92 (generate's spread 52% -> 18-20% divided
    by the probe); a GPT-2 training step only at 0.56; the host forgets its speed within seconds."""
    rounds = json.loads((HERE / name).read_text())["rounds"]
    assert len(rounds) == 150
    pa = [r["probe_a"] for r in rounds]
    around = [(r["probe_a"] + r["probe_b"]) / 2 for r in rounds]
    infer = [r["infer"] for r in rounds]
    train_around = [(rounds[i]["probe_b"] + rounds[i + 1]["probe_a"]) / 2 for i in range(len(rounds) - 1)]
    train = [r["train"] for r in rounds[:-1]]
    assert _corr(around, infer) > 0.85
    assert 0.4 < _corr(train_around, train) < 0.65
    assert max(pa) / min(pa) > 1.8  # 2x within a minute
    assert _corr(pa[:-20], pa[20:]) < 0.1  # about 8 s apart: unrelated


def test_the_missing_training_kernels_are_autocasts_weight_casts():
    """Call 5 (kernel_list.json, kernels by name one layer adds): Llama 14 bf16 casts a layer and GPT-2 11; the
    gap to the planner's forward count (7 and 8 kernels a layer) is the weights' (and GPT-2's biases') casts."""
    klist = json.loads((HERE / "kernel_list.json").read_text())

    def casts(fam):
        return sum(v for k, v in klist[fam]["forward"]["per_layer"].items() if "bfloat16_copy_kernel" in k)

    per_layer = {fam: sum(klist[fam]["forward"]["per_layer"].values()) for fam in klist}
    assert per_layer == {"gpt2": 33, "llama": 49} and casts("llama") == 14 and casts("gpt2") == 11
    # Llama: q, k, v, o, gate, up, down; GPT-2: c_attn, c_proj, c_fc, mlp c_proj, each weight and bias
    weight_casts = {"llama": 3 + 1 + 3, "gpt2": 2 * 4}
    planner = {"llama": 42, "gpt2": 25}
    assert {f: per_layer[f] - planner[f] for f in klist} == weight_casts


def test_the_doctor_compares_the_bare_run_on_the_gpu():
    """Call 6: doctor train GPT-2 set the plan (22.6 ms) beside the bare 33.9 ms step, not the profiled 59.4 ms;
    doctor infer --defer-stop on hf-graph: no generate_waits finding, 130.7 ms bare against 122.7 planned."""
    train = json.loads((HERE / "doctor7_gpt2.json").read_text())
    est = train["estimate"]
    assert est["measured_timing"] == "bare"
    assert est["measured_s"] == pytest.approx(train["profile"]["bare_s"] / 5)
    assert train["profile"]["step_s_median"] > 1.5 * est["measured_s"]
    slow = next(f for f in train["findings"] if f["code"] == "slower_than_planned")
    assert slow["evidence"]["ratio"] == pytest.approx(1.50, abs=0.01)
    defer = json.loads((HERE / "doctor7_defer_1b.json").read_text())
    assert defer["target"]["case"]["defer_stop"] and defer["estimate"]["measured_timing"] == "bare"
    assert "generate_waits" not in [f["code"] for f in defer["findings"]]
    e = defer["estimate"]
    assert abs(e["measured_s"] - e["estimated_s"]) / e["measured_s"] < 0.15


def test_training_runs_of_these_calls_are_not_set_against_the_forward_probe():
    """Calls 2-3 recorded only the forward-only probe; call 7 showed a training step does not follow it (r = 0.44,
    probe_track_phases.json). bench now sets a training run against the training probe only, so these records get
    no second error; their inference rows keep theirs."""
    from gpuscope.cli.bench_report import estimate_beside

    for rec in BENCH_ALL + AFTER:
        est = estimate_beside(rec, str(BENCH_ALL_CAL))
        if rec["case"]["kind"] == "train":
            assert est["host_scale"] is None and all("error_at_run_host" not in r for r in est["rows"])
        else:
            assert est["host_scale"] and all("error_at_run_host" in r for r in est["rows"])


def test_the_training_probe_follows_the_training_step():
    """Call 7 (probe_track_phases.json, 150 rounds): GPT-2's training step follows the training probe (forward +
    backward of the tiny model) at r = 0.85, its spread 46% -> 23% divided by it; the forward-only probe at 0.44."""
    rounds = json.loads((HERE / "probe_track_phases.json").read_text())["rounds"]
    fwd_probe = [(r["probe_a"] + r["probe_b"]) / 2 for r in rounds]
    train_probe = [(r["probe_bwd_a"] + r["probe_bwd_b"]) / 2 for r in rounds]
    step = [sum(r["phases"].values()) for r in rounds]

    def spread(x):
        s = sorted(x)
        return (s[int(0.9 * len(s))] - s[int(0.1 * len(s))]) / statistics.median(s)

    assert len(rounds) == 150
    assert _corr(train_probe, step) > 0.8 and _corr(fwd_probe, step) < 0.5
    assert spread([a / b for a, b in zip(step, train_probe)]) < 0.6 * spread(step)
    assert spread([a / b for a, b in zip(step, fwd_probe)]) > spread(step)


def test_the_suite_with_both_probes():
    """Call 8: bench all with the training probe: 5 of 6 time rows within 15% as calibrated, 1 of 6 at the run's
    host speed (re-planned since session 9: 4 and 0; the tiny GPT-2 step reads +17%, the per-call training costs
    counted whole, roofline.TrainHost). The calibration (passes spread 72%) wrote a 3.12 ms probe beside a 17.6 us launch cost; the runs'
    probes read 2.05-2.19 ms. host_costs now pairs the probe with the median launch's pass (not run on a GPU)."""
    from gpuscope.cli.bench_report import estimate_beside

    recs = [r for r in read_records(HERE / "measurements_final4.jsonl") if r["case"]["kind"] in ("infer", "train")]
    cal = HERE / "nvidia-h200-20261130T052321Z-ed2913.toml"
    rows = [(r["case_id"], row) for r in recs for row in estimate_beside(r, str(cal))["rows"]
            if row["metric"] in ("prefill_s", "decode_s_per_token", "step_s")]
    assert len(recs) == 4 and len(rows) == 6
    assert _within(rows, "error") == 4 and _within(rows, "error_at_run_host") == 0
    train = [r["result"] for r in recs if r["case"]["kind"] == "train"]
    assert all(t["host_probe_train_s"] and "host_probe_s" not in t for t in train)
    acc = json.loads((HERE / "bench_all_4.json").read_text())["estimate_accuracy"]
    assert (acc["time_within"], acc["time_within_at_run_host"]) == (5, 1)
