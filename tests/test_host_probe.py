"""The host probe (measure/host/probe.py), interleaved host fits (measure/host/overhead.interleaved) and the
estimate at the host speed a run met (explain/compare.host_scale / at_host_speed, pipeline/estimate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

RESULTS = Path(__file__).resolve().parents[1] / "research" / "results"


def test_interleaved_fit_keeps_a_drifting_host_out_of_the_slope():
    """A host that slows down while the depths are timed: one depth after the other, the drift lands in the
    per-layer slope; round-robin, every depth sees the same drift and the slope stays that of the depths."""
    from gpuscope.measure.host.overhead import fit_line as _fit, interleaved

    layers, per_layer, fixed = [2, 4, 8], 1e-3, 2e-3
    clock = {"calls": 0}

    def job(n):
        def run():
            clock["calls"] += 1
            speed = 1.0 + 0.01 * clock["calls"]  # the host slows 1% a call
            return [(fixed + per_layer * n) * speed]
        return run

    seq = []
    for n in layers:  # one depth after the other: 10 samples each
        seq.append(sorted(job(n)()[0] for _ in range(10))[5])
    _, slope_seq = _fit(layers, seq)
    clock["calls"] = 0
    inter = [sorted(x)[5] for x in interleaved([job(n) for n in layers], 10)]
    _, slope_inter = _fit(layers, inter)
    level = sum(t / (fixed + per_layer * n) for t, n in zip(inter, layers)) / 3  # the drift, common to all
    # one depth after the other, the 30% drift over the fit reads as 40% more host time per layer; round-robin,
    # the slope is the level's (1.17) within 2%: what is left is the drift inside one round
    assert slope_seq / per_layer / level > 1.15
    assert slope_inter / per_layer == pytest.approx(level, rel=0.025)


def test_host_probe_brackets_a_phase_and_frees_its_model():
    from gpuscope.measure.host import probe as hp
    from gpuscope.measure.device.device import Device, pick_device

    dev = Device(pick_device("cpu"))
    for kind, key in (("infer", "host_probe"), ("train", "host_probe_train")):
        with hp.HostProbe(dev, kind) as p:
            assert hp._MODELS == {}  # released before the phase runs
        s = p.summary()
        assert s[f"{key}_before_s"] > 0 and s[f"{key}_after_s"] > 0  # no speed bound: CI shares two cores
        assert s[f"{key}_s"] == pytest.approx((s[f"{key}_before_s"] + s[f"{key}_after_s"]) / 2)
        assert hp._MODELS == {}
    hp.host_probe_train(dev, iters=1)
    assert all(p.grad is None for p in hp._MODELS[str(dev.torch_device)].parameters())  # gradients dropped


def test_training_host_fit_is_expressed_at_the_decode_passes_host_speed(monkeypatch):
    """calibrate's training fits run a minute after the decode passes that measured the launch cost. The training
    probe runs after every round of both: each training round is taken to a fixed training-probe speed, then to
    what the training probe read while the decode passes ran, and only then divided by the launch cost; the
    training probe is written at that speed."""
    import gpuscope.measure.host.overhead as ho
    import gpuscope.measure.host.probe as hp
    from gpuscope.measure.host.costs import train_host_costs

    launch = 10e-6

    def fit(f, b):
        layers, tensors = [2, 4, 8], [21, 39, 75]
        return {"layers": layers, "param_tensors": tensors, "forward_fixed_s": 1.5e-3, "forward_layer_s": f,
                "backward_fixed_s": 0.5e-3, "backward_layer_s": b, "optimizer_fixed_s": 2e-4,
                "optimizer_tensor_s": 8e-6}

    def family(fam, dev, precision, recompute, steps, probe=None):
        factor = [probe() for _ in range(3)][-1]  # between rounds; interleaved scales each round by what it returns
        raw = fit(42 * 4 * launch, 42 * 8 * launch) if recompute == "none" else fit(42 * 6 * launch, 42 * 18 * launch)
        return {k: v * factor if k.endswith("_s") else v for k, v in raw.items()}

    monkeypatch.setattr(ho, "measure_train_family", family)
    monkeypatch.setitem(hp.PROBES, "train", (lambda dev: 9e-3, "host_probe_train"))
    c = train_host_costs(launch, "cpu")  # no speed of the decode passes given: the fits' own
    assert c["host_train_fwd"] == pytest.approx(4.0) and c["host_probe_train_s"] == pytest.approx(9e-3)
    assert len(c["host_train_detail"]["train_probe_rounds_s"]) == 6
    # the decode passes met a host 1.5x faster (a 6 ms training probe against 9 ms during these fits): 4 launches
    # a kernel at this minute's speed are 2.67 at the passes'
    c = train_host_costs(launch, "cpu", train_probe_s=6e-3)
    assert c["host_train_fwd"] == pytest.approx(4.0 / 1.5) and c["host_train_bwd"] == pytest.approx(8.0 / 1.5)
    assert c["host_probe_train_s"] == pytest.approx(6e-3)


def _tiny_train_record(step_s: float, probe_s: float | None) -> dict:
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 256, "num_hidden_layers": 2, "max_position_embeddings": 512}
    res = {"status": "ok", "device_name": "NVIDIA H200", "step_s": step_s, "peak_bytes": 5e6}
    if probe_s:
        res["host_probe_train_s"] = probe_s
    return {"case": {"kind": "train", "config": cfg, "model": "tiny-llama", "micro_batch": 2, "seq": 32,
                     "precision": "amp-bf16"}, "result": res, "case_id": "train/tiny"}


def test_estimate_beside_at_the_host_speed_the_run_met(tmp_path):
    """A run whose host probe read 1.5x the calibration's: beside the calibrated estimate, bench reports it at
    1.5x the host costs; a host-bound step's estimate grows by nearly that, the memory row not at all."""
    from gpuscope.pipeline.estimate import estimate_beside
    from gpuscope.report.bench_view import estimate_table

    cal = tmp_path / "cal.toml"
    cal.write_text('base = "nvidia_h200_sxm"\nname = "H200 (test)"\n\n[measured]\nmemory_bw_gbs = 4100.0\n'
                   "host_launch_s = 17e-6\nhost_forward_s = 0.0\nhost_step_s = 4e-4\nhost_train_fwd_fixed = 0.0\n"
                   "host_probe_s = 1e-4\nhost_probe_train_s = 1e-3\n")
    est = estimate_beside(_tiny_train_record(0.02, 1.5e-3), str(cal))
    assert est["host_scale"] == pytest.approx(1.5)
    rows = {r["metric"]: r for r in est["rows"]}
    step = rows["step_s"]
    assert step["estimated_at_run_host"] / step["estimated"] == pytest.approx(1.5, rel=0.05)
    assert step["error_at_run_host"] == pytest.approx(step["estimated_at_run_host"] / 0.02 - 1)
    assert rows["peak_bytes"]["estimated_at_run_host"] == rows["peak_bytes"]["estimated"]
    assert any("host x1.50" in str(c.header) for c in estimate_table("tiny", est).columns)
    # no probe in the record (older results) or none in the TOML (the catalog): the plain estimate only
    plain = estimate_beside(_tiny_train_record(0.02, None), str(cal))
    assert plain["host_scale"] is None and "error_at_run_host" not in plain["rows"][0]
    assert estimate_beside(_tiny_train_record(0.02, 1.5e-3), "h200")["host_scale"] is None
    # a training run is set against the training probe only: the forward-only one does not follow a step
    fwd_only = _tiny_train_record(0.02, None)
    fwd_only["result"]["host_probe_s"] = 1.5e-4
    assert estimate_beside(fwd_only, str(cal))["host_scale"] is None


def test_calibration_toml_keeps_measured_zeros_and_the_probe(tmp_path):
    """A fit's intercept floored at 0 was dropped from the TOML, so the planner fell back on the catalog's value
    (98 launches for host_train_fwd_fixed where this host had measured none). A 0 is written and loaded now."""
    from gpuscope.estimate.engines import engine_for, train_host_for
    from gpuscope.measure.micro.calibrate import calibration_toml
    from gpuscope.specs.hardware import load_hardware

    text = calibration_toml("NVIDIA H200", "cuda", {"memory_bw_gbs": 4100.0, "host_launch_s": 17e-6,
                                                    "host_step_s": 0.0, "host_train_fwd_fixed": 0.0,
                                                    "host_train_fwd": 2.6, "host_probe_s": 1.2e-3},
                            None, "Mode: test.")
    assert "host_train_fwd_fixed = 0" in text and "host_probe_s = 0.0012" in text
    path = tmp_path / "cal.toml"
    path.write_text(text)
    hw = load_hardware(str(path))
    assert train_host_for(hw).fwd_fixed == 0.0 and engine_for("eager", hw).step_s == 0.0
    assert hw.measured["host_probe_s"] == pytest.approx(1.2e-3)


def test_workload_results_record_the_host_probe():
    """bench infer and bench train results carry the probe around their timed phase (CPU, tiny models)."""
    from gpuscope.measure.llm.infer import run_infer
    from gpuscope.measure.llm.train import run_train

    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 256, "num_hidden_layers": 2, "max_position_embeddings": 512}
    inf = run_infer({"kind": "infer", "config": cfg, "batch": 1, "prompt": 8, "gen": 4, "repeats": 1,
                     "device": "cpu", "dtype": "fp32"})
    tr = run_train({"kind": "train", "config": cfg, "micro_batch": 1, "seq": 8, "steps": 2, "warmup": 1,
                    "device": "cpu", "precision": "fp32"})
    assert inf["status"] == "ok" and tr["status"] == "ok"
    assert inf["host_probe_s"] > 0 and inf["host_probe_before_s"] > 0 and inf["host_probe_after_s"] > 0
    assert inf["host_probe_ttft_s"] > 0
    assert tr["host_probe_train_s"] > 0 and tr["host_probe_train_before_s"] > 0 and "host_probe_s" not in tr
    assert json.dumps(tr)  # plain JSON


def test_prefill_row_uses_the_probes_around_the_ttft_repeats(tmp_path):
    """An infer run's TTFT repeats come before its E2E repeats and have their own probes: the prefill row is
    scaled by those, the decode row by the E2E ones."""
    from gpuscope.pipeline.estimate import estimate_beside

    cal = tmp_path / "cal.toml"
    cal.write_text('base = "nvidia_h200_sxm"\nname = "H200 (test)"\n\n[measured]\nmemory_bw_gbs = 4100.0\n'
                   "host_launch_s = 17e-6\nhost_prefill_launch_s = 18e-6\nhost_step_s = 4e-4\nhost_probe_s = 1e-3\n")
    rec = json.loads(json.dumps(_tiny_train_record(0.02, None)))
    rec["case"] = {"kind": "infer", "config": rec["case"]["config"], "model": "tiny-llama", "batch": 1,
                   "prompt": 16, "gen": 8, "dtype": "bf16"}
    rec["result"] = {"status": "ok", "device_name": "NVIDIA H200", "peak_generate_bytes": 4e6, "ttft_s": 3e-3,
                     "tpot_s": 2e-3, "host_probe_s": 2e-3, "host_probe_ttft_s": 1e-3}
    est = estimate_beside(rec, str(cal))
    rows = {r["metric"]: r for r in est["rows"]}
    assert est["host_scale"] == pytest.approx(2.0) and est["host_scale_ttft"] == pytest.approx(1.0)
    assert rows["prefill_s"]["estimated_at_run_host"] == pytest.approx(rows["prefill_s"]["estimated"])
    assert rows["decode_s_per_token"]["estimated_at_run_host"] > 1.8 * rows["decode_s_per_token"]["estimated"]


def test_accuracy_summary_counts_rows_within_the_bars():
    from gpuscope.pipeline.accuracy import bench_summary as accuracy_summary
    from gpuscope.report.bench_view import accuracy_line

    ms = [{"name": "a", "estimate": {"rows": [
        {"metric": "peak_bytes", "error": 0.03, "error_at_run_host": 0.03},
        {"metric": "prefill_s", "error": -0.30, "error_at_run_host": -0.05},
        {"metric": "decode_s_per_token", "error": 0.10, "error_at_run_host": 0.12}]}},
          {"name": "b", "estimate": {"rows": [{"metric": "peak_bytes", "error": -0.08},
                                              {"metric": "step_s", "error": 0.2}, {"metric": "mfu", "error": 0.9}]}},
          {"name": "micro", "result": {}}, {"name": "c", "estimate": {"unavailable": "no"}}]
    a = accuracy_summary(ms)
    assert (a["time_rows"], a["time_within"], a["memory_rows"], a["memory_within"]) == (3, 1, 2, 1)
    assert (a["time_rows_at_run_host"], a["time_within_at_run_host"]) == (2, 2)
    assert a["worst_time"] == ["a prefill_s", -0.30] and a["worst_time_at_run_host"] == ["a decode_s_per_token", 0.12]
    line = accuracy_line(a)
    assert "1 of 3 time rows within 15%" in line and "at the host speed each run met: 2 of 2" in line
    assert accuracy_summary([{"name": "micro", "result": {}}]) is None
    cpu = accuracy_summary([{"name": "c", "estimate": {"rows": [{"metric": "step_s", "error": 0.1}]}}])
    assert accuracy_line(cpu) == "estimates: 1 of 1 time rows within 15%; worst c step_s +10.0%"  # no memory claim


def test_calibration_costs_are_taken_to_the_passes_median_probe(monkeypatch):
    """host_costs divides each pass's costs by the probe that pass met, takes the median, and multiplies by the
    median probe: the costs at the passes' median host speed, written beside that speed. A pass that met a slow
    minute (30 us at a 3.5 ms probe) agrees with a fast one (17 us at 2.0 ms) once each is set against its probe;
    the one that does not (16 us at 3.1 ms) no longer decides the median. A median of the raw costs (17 us)
    beside the median probe (3.1 ms) would pair numbers from different passes."""
    import gpuscope.measure.host.costs as cal

    passes = iter([{"host_launch_s": 30e-6, "host_probe_s": 3.5e-3, "host_detail": {"launch_tiny_s": 27e-6}},
                   {"host_launch_s": 16e-6, "host_probe_s": 3.1e-3, "host_detail": {"launch_tiny_s": 14e-6}},
                   {"host_launch_s": 17e-6, "host_probe_s": 2.0e-3, "host_detail": {"launch_tiny_s": 15e-6}}])
    monkeypatch.setattr(cal, "_host_pass", lambda dev, use_real: next(passes))
    c = cal.host_costs("cpu", passes=3)
    assert c["host_probe_s"] == pytest.approx(3.1e-3)
    assert c["host_launch_s"] == pytest.approx(17e-6 / 2.0e-3 * 3.1e-3)  # 8.5 us per ms of probe, at 3.1 ms
    d = c["host_detail"]
    assert d["launch_tiny_s"] == pytest.approx(15e-6 / 2.0e-3 * 3.1e-3)
    assert d["launch_spread"] == pytest.approx(14 / 17)
    assert d["launch_spread_at_probe"] == pytest.approx((30 / 3.5 - 16 / 3.1) / 8.5)  # 40%: the odd pass


def test_headline_says_when_the_host_moved_during_a_run():
    from gpuscope.workloads import headline

    train = {"status": "ok", "kind": "train", "step_s": 0.035, "tokens_per_s": 7300.0,
             "host_probe_train_before_s": 6e-3, "host_probe_train_after_s": 9e-3}
    assert "the host's speed moved 40% during the run (host probe slower after than before" in headline(train)
    assert "moved" not in headline(dict(train, host_probe_train_after_s=6.6e-3))  # 10%: within the usual
    infer = {"status": "ok", "kind": "infer", "ttft_s": 0.01, "tpot_s": 0.004, "decode_tokens_per_s": 250.0,
             "host_probe_before_s": 3.45e-3, "host_probe_after_s": 2.28e-3}
    assert "moved 41%" in headline(infer) and "faster after" in headline(infer)
    assert "moved" not in headline({k: v for k, v in infer.items() if not k.startswith("host_probe")})


def test_timed_repeats_run_the_count_and_the_time_floor(monkeypatch):
    """measure/device/device.repeats: at least n, and on until min_time_s has passed (at most cap); the smoke suite's
    workloads carry the floor, and a run records how many repeats it took. The clock is the test's own: each repeat
    takes 10 ms of it, so the count is exact however loaded the host (a real sleep lasts as long as the scheduler makes it)."""
    from types import SimpleNamespace

    import gpuscope.measure.device.device as device_mod
    from gpuscope.workloads.sets import SMOKE_MIN_TIME_S, smoke_cases
    from gpuscope.measure.device.device import repeats

    assert list(repeats(3)) == [0, 1, 2]
    clock = [100.0]
    monkeypatch.setattr(device_mod, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    n = 0
    for _ in repeats(2, min_time_s=0.05):
        clock[0] += 0.01
        n += 1
    assert n == 5  # 2 for the count, then on until 50 ms had passed
    n = 0
    for _ in repeats(7, min_time_s=0.05):
        clock[0] += 0.01
        n += 1
    assert n == 7  # the count, when the floor had passed before it
    assert len(list(repeats(1, min_time_s=60, cap=7))) == 7
    assert all(c["min_time_s"] == SMOKE_MIN_TIME_S for c in smoke_cases())


def test_workloads_record_the_repeats_a_time_floor_took(monkeypatch):
    """The workloads pass their time floor to measure/device/device.repeats and record how many repeats it took.
    The floor's own rule is test_timed_repeats_run_the_count_and_the_time_floor; here a floor that always takes 3
    more repeats than the count stands in for the clock (a real 0.3 s floor took only the count when a loaded host
    ran each repeat in over 0.15 s)."""
    import gpuscope.measure.llm.infer as infer_mod
    import gpuscope.measure.llm.train as train_mod
    from gpuscope.workloads.sets import TINY_GPT2, infer_case, train_case

    floors = []

    def floor_of_three_more(n, min_time_s=0.0):
        floors.append(min_time_s)
        return iter(range(n + 3 if min_time_s > 0 else n))

    monkeypatch.setattr(infer_mod, "timed_repeats", floor_of_three_more)
    monkeypatch.setattr(train_mod, "timed_repeats", floor_of_three_more)
    r = infer_mod.run_infer(infer_case("tiny-gpt2", 1, 8, 3, dtype="fp32", repeats=2, config=TINY_GPT2,
                                       decode_iters=2, device="cpu", min_time_s=0.3))
    assert r["status"] == "ok" and r["ttft_repeats"] == 5 and r["e2e_repeats"] == 5
    assert len(r["samples_s"]["ttft"]) == 5 and len(r["samples_s"]["e2e"]) == 5
    assert r["repeats"] == 2 and r["ttft_s_min"] <= r["ttft_s"] <= r["ttft_s_max"]
    t = train_mod.run_train(train_case("tiny-gpt2", 1, 16, precision="fp32", steps=2, warmup=1, config=TINY_GPT2,
                                       device="cpu", min_time_s=0.3))
    assert t["status"] == "ok" and t["timed_steps"] == 5 and len(t["samples_s"]["step"]) == 5
    assert floors and set(floors) == {0.3}  # every timed phase got the case's floor


def test_rounds_are_taken_to_the_probes_reference_speed(monkeypatch):
    """A host that runs 1.5x slower for some rounds (an episode of the lent H200 VM): RoundProbe(to=...) returns
    to / probe after each round, interleaved scales that round's samples (numbers, tuples, dicts) by it, and the
    fit reads the same at every depth as a host that never slowed; host_costs then takes each pass from that unit
    to the passes' median probe."""
    import gpuscope.measure.host.costs as cal
    import gpuscope.measure.host.probe as hp
    from gpuscope.measure.host.overhead import fit_line as _fit, interleaved

    speed = {"x": 1.0}
    rnd = {"n": 0}
    monkeypatch.setitem(hp.PROBES, "infer", (lambda dev: 2e-3 * speed["x"], "host_probe"))
    probe = hp.RoundProbe(None, to=1e-3)

    def job(n):
        def run():
            return [(1e-3 + 0.5e-3 * n) * speed["x"], {"t": 2e-3 * speed["x"]}]
        return run

    def between():
        f = probe()
        rnd["n"] += 1
        speed["x"] = 1.5 if rnd["n"] in (2, 3, 4) else 1.0  # the next rounds run in a slow episode
        return f

    out = interleaved([job(n) for n in (2, 4, 8)], 6, between)
    times = [[x for x in xs if not isinstance(x, dict)] for xs in out]
    assert all(t == pytest.approx(times[0][0]) for t in times[0])  # every round the same, at the unit's speed
    _, slope = _fit([2, 4, 8], [xs[0] for xs in times])
    assert slope == pytest.approx(0.5e-3 / 2)  # the 2 ms probe's host taken to a 1 ms probe's: half the time
    assert all(x["t"] == pytest.approx(1e-3) for xs in out for x in xs if isinstance(x, dict))
    assert sorted(probe.samples) == pytest.approx([2e-3] * 3 + [3e-3] * 3)
    assert hp.RoundProbe(None)() is None  # without `to`, nothing is scaled

    # passes whose rounds were taken to a 1 ms probe: each is taken to the passes' median probe (2.2 ms)
    passes = iter([{"host_launch_s": 8e-6, "host_probe_s": p, "host_detail": {"launch_tiny_s": 7e-6,
                                                                            "probe_unit_s": 1e-3}}
                   for p in (2.0e-3, 2.2e-3, 3.1e-3)])
    monkeypatch.setattr(cal, "_host_pass", lambda dev, use_real: next(passes))
    c = cal.host_costs("cpu", passes=3)
    assert c["host_probe_s"] == pytest.approx(2.2e-3) and c["host_launch_s"] == pytest.approx(8e-6 * 2.2)
    assert c["host_detail"]["launch_spread_at_probe"] == pytest.approx(0.0)
