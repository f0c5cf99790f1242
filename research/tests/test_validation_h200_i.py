"""The ninth H200 session (research/results/2026-11-30-h200-i, README.md there).

Call 1: `bench all` twice on calibrations whose training fits are taken to the training probe read during the
decode passes (040c5dd), then research/scripts/gpu_train_phases.py: every training phase of eight tiny cases (Llama and
GPT-2; amp-bf16 and fp32; with and without full recompute) at 2/4/8 layers, two sweeps, every round taken to one
training-probe speed, so the cases compare. It located the GPT-2 full-recompute bias: the checkpoint costs per
layer, not per kernel, and the per-call costs do not follow the kernels outside the layers (roofline.TrainHost).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.explain.compare import read_records

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-11-30-h200-i"
PHASES = json.loads((HERE / "call1_train_phases.json").read_text())
PHASES_CALL3 = json.loads((HERE / "call3_train_phases.json").read_text())  # one sweep, a slower host state


def _by_sweep(sweep: int, phases=None) -> dict:
    return {(r["family"], r["precision"], r["recompute"]): r for r in (phases or PHASES)["runs"]
            if r["sweep"] == sweep}


def _training_keys(costs: dict) -> dict:
    """The hardware-TOML keys of a train_host_costs result (its detail left out)."""
    return {k: v for k, v in costs.items() if k.startswith(("host_train_", "host_opt_")) and k != "host_train_detail"}


def _planned_steps(sweep: int, monkeypatch, tmp_path, phases=None) -> dict:
    """Each case's 2-layer step as the planner plans it on a calibration whose training fits are this sweep's
    Llama amp-bf16 ones: the calibration's own code (calibrate.train_host_costs) on the recorded fits, its TOML
    written and loaded, then estimate_train for the case's tiny model (host-bound: GPU time is microseconds)."""
    import gpuscope.measure.host_overhead as ho
    from gpuscope.estimate.train import estimate_train
    from gpuscope.measure.calibrate import calibration_toml, train_host_costs
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.hf_config import spec_from_config

    by = _by_sweep(sweep, phases)
    monkeypatch.setattr(ho, "measure_train_family", lambda fam, dev, precision, recompute, steps, **kw:
                        by[(fam, precision, recompute)])
    launch = 10e-6  # any unit: the fits are in seconds at the probe unit, and the planner multiplies back
    c = train_host_costs(launch, "cpu")
    measured = {"memory_bw_gbs": 4170.0, "host_launch_s": launch, **_training_keys(c)}
    path = tmp_path / f"sweep{sweep}.toml"
    path.write_text(calibration_toml("NVIDIA H200", "cuda", measured, None, "Mode: test."))
    hw = load_hardware(str(path))
    out = {}
    for (fam, prec, rc), r in by.items():
        cfg = dict(ho.TINY[fam], **{("n_layer" if fam == "gpt2" else "num_hidden_layers"): 2})
        est = estimate_train(spec_from_config(cfg), hw, micro_batch=2, seq=64, precision=prec, recompute=rc)
        out[(fam, prec, rc)] = (est.time["step_s"], r["forward_s"][0] + r["backward_s"][0] + r["optimizer_s"][0])
    return out


def test_the_phases_set():
    """Two sweeps of eight cases (the second in reverse order), each at 2/4/8 layers, kernels counted in the first."""
    assert PHASES["probe_unit_s"] == 0.005 and len(PHASES["runs"]) == 16
    for sweep in (0, 1):
        assert len(_by_sweep(sweep)) == 8
    k = _by_sweep(0)
    # the profiler's forward kernels at 2/4/8 layers: GPT-2 fp32 19 a layer, Llama amp-bf16 49
    assert k[("gpt2", "fp32", "full")]["kernels"]["forward"] == [60, 98, 174]
    assert k[("llama", "amp-bf16", "none")]["kernels"]["forward"] == [132, 230, 426]


def test_the_checkpoint_costs_per_layer_and_its_backward_per_kernel():
    """What full recompute adds to a layer's forward does not follow the layer's kernels (GPT-2: 21 planner
    kernels, Llama: 42; Llama fp32 runs SDPA's math path, more kernels still); what it adds to the backward does."""
    ckpt, per_kernel = {}, {}
    for sweep in (0, 1):
        by = _by_sweep(sweep)
        for fam, prec, k in (("gpt2", "fp32", 21), ("gpt2", "amp-bf16", 25), ("llama", "amp-bf16", 42)):
            f, n = by[(fam, prec, "full")], by[(fam, prec, "none")]
            ckpt.setdefault(fam, []).append(f["forward_layer_s"] - n["forward_layer_s"])
            per_kernel.setdefault(fam, []).append((f["backward_layer_s"] - n["backward_layer_s"]) / k)
    assert all(0.2e-3 < x < 0.55e-3 for xs in ckpt.values() for x in xs)  # per layer, whatever the kernels
    assert all(33e-6 < x < 51e-6 for xs in per_kernel.values() for x in xs)
    # priced per kernel instead, GPT-2's checkpoint would be half Llama's
    assert min(ckpt["gpt2"]) < 0.55 * max(ckpt["llama"]) < max(ckpt["gpt2"])


@pytest.mark.parametrize("sweep, within", [(0, 7), (1, 8)])
def test_one_llama_calibration_plans_the_other_cases(sweep, within, monkeypatch, tmp_path):
    """At one host speed, the Llama amp-bf16 fits plan the eight cases' 2-layer steps within 15% in 15 of 16
    (the 16th, GPT-2 amp-bf16 full recompute, -15.1%); GPT-2 fp32 full recompute (the `bench all` case) -7% and
    -10%. The planner at daba888 (the whole recompute per kernel, the per-call costs net of Llama's 22 kernels
    outside the layers plus the model's own) missed 7 of 16 here: GPT-2 fp32 full -21% and -25%, GPT-2 amp-bf16
    full -26% and -25% (results README, section 2)."""
    steps = _planned_steps(sweep, monkeypatch, tmp_path)
    errors = {k: est / meas - 1 for k, (est, meas) in steps.items()}
    assert sum(abs(e) <= 0.15 for e in errors.values()) == within and all(abs(e) < 0.16 for e in errors.values())
    assert -0.11 < errors[("gpt2", "fp32", "full")] < -0.06


def test_the_same_in_call3_on_a_slower_host(monkeypatch, tmp_path):
    """Call 3's one sweep (probes 8.2-12.6 ms against 7.2-10.7 in call 1): 7 of 8 within 15%, GPT-2 fp32 full
    -6%. GPT-2 amp-bf16 full stays the low one (-19%; -15% and -12% in call 1): autocast's casts, 11 a GPT-2 layer
    against the planner's 4 (research/results/2026-11-30-h200-g, section 3). The planner at daba888 missed 4 of 8."""
    errors = {k: est / meas - 1 for k, (est, meas) in
              _planned_steps(0, monkeypatch, tmp_path, PHASES_CALL3).items()}
    assert sum(abs(e) <= 0.15 for e in errors.values()) == 7
    assert -0.20 < errors[("gpt2", "amp-bf16", "full")] < -0.15 and abs(errors[("gpt2", "fp32", "full")]) < 0.07


CALLS = ("call1", "call2", "call3", "call4")
RECORDS = {c: read_records(HERE / f"{c}_measurements.jsonl") for c in CALLS}
WORKLOADS = [(c, r) for c in CALLS for r in RECORDS[c] if r["case"]["kind"] in ("infer", "train")]
HOST = {(c, r["run_id"]): r for c in CALLS for r in RECORDS[c] if r["case"]["kind"] == "host"}


def _toml(call: str, run_id: str) -> Path:
    (path,) = HERE.glob(f"{call}_nvidia-h200-{run_id}.toml")
    return path


def _refit(host_row: dict, monkeypatch) -> dict:
    """The training keys calibrate.train_host_costs writes from a stored calibration's own fits and probes."""
    import gpuscope.measure.host_overhead as ho
    import gpuscope.measure.host_probe as hp
    from gpuscope.measure.calibrate import train_host_costs

    d = host_row["result"]["train"]["host_train_detail"]

    class Probe:  # the rounds' training probes as the calibration read them
        def __init__(self, *a, **kw):
            self.samples = d["train_probe_rounds_s"]

        def median(self):
            return d["host_probe_train_s"]

    monkeypatch.setattr(ho, "measure_train_family", lambda fam, dev, precision, recompute, steps, **kw: d[recompute])
    monkeypatch.setattr(hp, "RoundProbe", Probe)
    return train_host_costs(d["launch_s"], "cpu", train_probe_s=d["train_probe_at_passes_s"])


@pytest.mark.parametrize("key", [k for k in HOST if k[0] != "call1"], ids=lambda k: f"{k[0]}-{k[1][-6:]}")
def test_a_stored_calibration_refits_to_its_own_toml(key, monkeypatch):
    """Calls 2-4 ran the final tree: their stored fits, through train_host_costs again, give the TOML's keys."""
    import tomllib

    measured = tomllib.loads(_toml(*key).read_text())["measured"]
    c = _refit(HOST[key], monkeypatch)
    for k in ("host_train_fwd", "host_train_bwd", "host_train_recompute", "host_train_ckpt_layer",
              "host_train_fwd_fixed", "host_train_bwd_fixed", "host_opt_fixed", "host_opt_tensor"):
        assert measured[k] == pytest.approx(c[k], rel=1e-9), k
    assert measured["host_train_other_kernels"] == 0.0


def _errors(calls, metric) -> list[float]:
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    return [row.error for c, r in WORKLOADS if c in calls
            for row in compare_record(r, load_hardware(str(_toml(c, r["run_id"])))) if row.metric == metric]


def test_the_runs():
    """Eight `bench all` runs: call 1 two (the tree before the training change), call 2 two, call 3 three, call 4
    one. Call 3's first was stopped by the script's own 185 s step limit after three workloads (its JSON never
    written; its store kept them). The seven complete ones: all ok, 153-194 s (issue 3: under five minutes)."""
    runs = sorted(HERE.glob("call*_bench_all_*.json"))
    assert len(runs) == 7
    walls = []
    for p in runs:
        d = json.loads(p.read_text())
        assert len(d["measurements"]) == 17 and all(m["status"] == "ok" for m in d["measurements"])
        walls.append(d["wall_s"])
    assert 150 < min(walls) and max(walls) < 195
    assert len(HOST) == 8 and len(WORKLOADS) == 31  # call 3 run 1: three workloads, the GPT-2 training not reached


def test_memory_is_within_5_percent_in_every_run():
    errs = [e for m in ("peak_bytes", "forward_peak_bytes", "backward_peak_bytes", "optimizer_peak_bytes")
            for e in _errors(CALLS, m)]
    assert len(errs) == 76 and max(abs(e) for e in errs) < 0.034


def test_the_final_tree_time_rows():
    """Calls 2-4 (the final tree, six runs, 35 time rows): 20 within 15%: decode 8 of 12, prefill 7 of 12,
    training step 5 of 11. Calls 3 and 4 met a slower host (probe 2.2-3.6 ms against 1.8-2.2 in calls 1-2): call 4
    met none, its calibration read a 2.85 ms probe and its runs 2.7-3.6 ms."""
    final = ("call2", "call3", "call4")
    decode, prefill, step = (_errors(final, m) for m in ("decode_s_per_token", "prefill_s", "step_s"))
    assert (len(decode), len(prefill), len(step)) == (12, 12, 11)
    assert [sum(abs(e) <= 0.15 for e in x) for x in (decode, prefill, step)] == [8, 7, 5]
    quiet = _errors(("call2",), "step_s")
    assert len(quiet) == 4 and max(abs(e) for e in quiet) < 0.21


def test_call1_replanned_with_the_checkpoint_per_layer(monkeypatch, tmp_path):
    """Call 1's calibrations predate the split; refitted from their stored fits, the training rows (as run: Llama
    -21% and +15%, GPT-2 fp32 full -28% and +16%) read -21% and +15%, GPT-2 -14% and +36%. The +36%: that
    calibration's no-recompute backward read 0.87 ms a layer with a 1.76 ms intercept (the 8-layer point low), and
    the intercept now counts whole."""
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    out = []
    for c, r in WORKLOADS:
        if c != "call1" or r["case"]["kind"] != "train":
            continue
        keys = _training_keys(_refit(HOST[(c, r["run_id"])], monkeypatch))
        text = _toml(c, r["run_id"]).read_text()
        lines = [ln for ln in text.splitlines() if not ln.split("=")[0].strip() in keys]
        i = lines.index("[measured]") + 1
        lines[i:i] = [f"{k} = {v!r}" for k, v in keys.items()]
        p = tmp_path / f"{r['run_id']}.toml"
        p.write_text("\n".join(lines) + "\n")
        out += [row.error for row in compare_record(r, load_hardware(str(p))) if row.metric == "step_s"]
    assert [round(e, 2) for e in out] == [-0.21, -0.14, 0.15, 0.36]


def test_the_final_tree_by_the_calibrations_host_speed():
    """The final tree's runs split by the forward probe their calibration read: 2.03-2.18 ms (calls 2 and 3.2), 15
    of 18 time rows within 15%; 2.85-3.14 ms (calls 3.1, 3.3, 4.1), 5 of 17."""
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    fast, slow = [0, 0], [0, 0]
    for c, r in WORKLOADS:
        if c == "call1":
            continue
        probe = HOST[(c, r["run_id"])]["result"]["host"]["host_probe_s"]
        assert 2.0e-3 < probe < 2.2e-3 or 2.8e-3 < probe < 3.2e-3
        tally = fast if probe < 2.5e-3 else slow
        for row in compare_record(r, load_hardware(str(_toml(c, r["run_id"])))):
            if row.metric in ("prefill_s", "decode_s_per_token", "step_s"):
                tally[0] += abs(row.error) <= 0.15
                tally[1] += 1
    assert fast == [15, 18] and slow == [5, 17]


def test_the_store_history_names_the_slow_calibrations():
    """explain/host_history.py on this session's eight calibrations, in the order they ran, as if one results store
    had kept them all: each one beside the earlier ones of the machine. It speaks for exactly the three that read
    2.85-3.14 ms (+50%, +47%, +32% against the earlier median), the calibrations whose runs landed 5 of 17 time
    rows; the first two have too little history to say anything."""
    from gpuscope.explain.host_history import history_line, host_history

    rows = sorted(HOST.values(), key=lambda r: r["provenance"]["timestamp_utc"])
    store = [{"status": r["result"]["status"], "hostname": r["provenance"]["hostname"],
              "device_name": r["provenance"]["device_name"], "result": r["result"]} for r in rows]
    said = []
    for i, r in enumerate(store):
        h = host_history(store[:i], "NVIDIA H200", "vm", r["result"]["host"]["host_probe_s"])
        assert (h is None) == (i < 3)
        if history_line(h):
            said.append((rows[i]["run_id"][-6:], round(h["ratio"] - 1, 2)))
    assert said == [("7c9570", 0.5), ("a6d5ae", 0.47), ("31bf9f", 0.32)]
    assert host_history(store, "NVIDIA H100", "vm", 3e-3) is None  # another device: no history


def test_the_run_host_speed_did_not_add_rows():
    """bench's second error ("host xN": the estimate at the host speed the run's probes met) on the final tree:
    20 of 35 time rows within 15%, the same count as the plain estimate. Session h's nine runs: 35 and 35 of 54.
    The probes say how the host moved; they do not carry a tiny workload's time to 15%."""
    from gpuscope.cli.bench_report import estimate_beside

    plain = at_host = n = 0
    for c, r in WORKLOADS:
        if c == "call1":
            continue
        for row in estimate_beside(r, str(_toml(c, r["run_id"])))["rows"]:
            if row["metric"] in ("prefill_s", "decode_s_per_token", "step_s"):
                n += 1
                plain += abs(row["error"]) <= 0.15
                at_host += abs(row["error_at_run_host"]) <= 0.15
    assert (n, plain, at_host) == (35, 20, 20)


def test_the_same_step_timed_a_minute_earlier_predicts_no_better():
    """The noise floor of a host-bound row on this VM. Each calibration times the tiny Llama amp-bf16 step at 2
    layers itself (the suite's own training case, but for a 256-token vocabulary), a minute before the suite runs
    it. Taken to the calibration's host speed, that time predicts the suite's measured step within 15% in 4 of
    the 8 runs (-22% to +11%); the planner, on the same calibrations, in 3 (one more at +15.3%)."""
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    direct, planned = [], []
    for c, r in WORKLOADS:
        if r["case"]["kind"] != "train" or "llama" not in r["case_id"]:
            continue
        d = HOST[(c, r["run_id"])]["result"]["train"]["host_train_detail"]
        to = (d["train_probe_at_passes_s"] or d["host_probe_train_s"]) / d["probe_unit_s"]
        n = d["none"]
        assert n["layers"][0] == 2 and n["precision"] == "amp-bf16"
        two = (n["forward_s"][0] + n["backward_s"][0] + n["optimizer_s"][0]) * to
        direct.append(two / r["result"]["step_s"] - 1)
        planned += [row.error for row in compare_record(r, load_hardware(str(_toml(c, r["run_id"]))))
                    if row.metric == "step_s"]
    assert len(direct) == len(planned) == 8
    assert sum(abs(e) <= 0.15 for e in direct) == 4 and sum(abs(e) <= 0.15 for e in planned) == 3
    assert -0.23 < min(direct) and max(direct) < 0.12
