"""tune and doctor on CPU: each finding's rule on synthetic summaries, a slow data loader diagnosed by really
profiling a script, the batch search with a fake OOM guard, the precision sweep, and the OOM tiers."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import textwrap

import pytest

from gpuscope.explain import findings as F

GIB = 2**30

# A healthy GPU training profile: busy device, no stalls, aligned shapes, overlapped comm, tidy allocator.
HEALTHY = {
    "schema": "gpuscope.profile/1", "device": "cuda", "device_type": "cuda", "device_name": "NVIDIA H200",
    "wall_s": 1.0, "steps": 10, "step_s_median": 0.1, "timeline": "device_kernels", "busy_s": 0.95,
    "idle_fraction": 0.05, "kernel_count": 5000, "kernel_mean_s": 190e-6, "gap_mean_s": 10e-6, "gap_median_s": 5e-6,
    "matmuls": [{"op": "aten::mm", "m": 4096, "n": 4096, "k": 4096, "dtype": "c10::BFloat16", "count": 100,
                 "self_s": 0.5}],
    "matmul_s": 0.5, "dataloader_s": 0.01, "dataloader_calls": 10, "dataloader_fraction": 0.01,
    "h2d": {"count": 10, "s": 0.001, "pageable_count": 0},
    "syncs": {"calls": 10, "wait_s": 0.02, "refill_s": 0.005, "callers": [{"op": "aten::_local_scalar_dense",
                                                                           "count": 10}]},
    "comm": {"kernels": 20, "s": 0.1, "overlap_fraction": 0.9},
    "memory": {"device_total_bytes": 140 * GIB, "allocated_start_bytes": 20 * GIB, "peak_allocated_bytes": 120 * GIB,
               "peak_reserved_bytes": 124 * GIB, "num_alloc_retries": 0, "expandable_segments": False},
    "nvml": {"throttled_fraction": 0.0, "sm_clock_mhz_max": 1980, "sm_clock_mhz_min": 1980,
             "sm_clock_mhz_median": 1980, "throttle_reasons_seen": []},
}


def _with(**changes):
    s = copy.deepcopy(HEALTHY)
    for key, val in changes.items():
        if isinstance(val, dict) and isinstance(s.get(key), dict):
            s[key].update(val)
        else:
            s[key] = val
    return s


SICK = {
    "launch_bound": _with(busy_s=0.2, idle_fraction=0.8, kernel_mean_s=4e-6, gap_mean_s=17e-6),
    "dataloader_stall": _with(dataloader_s=0.4, dataloader_fraction=0.4, h2d={"pageable_count": 10}),
    "host_sync": _with(syncs={"calls": 320, "refill_s": 0.2}, busy_s=0.7, idle_fraction=0.3),  # idle >= refill
    "matmul_shapes": _with(matmuls=[{"op": "aten::mm", "m": 8192, "n": 50257, "k": 768, "dtype": "c10::BFloat16",
                                     "count": 10, "self_s": 0.3},
                                    {"op": "aten::mm", "m": 8192, "n": 768, "k": 768, "dtype": "c10::BFloat16",
                                     "count": 10, "self_s": 0.2}]),
    "comm_not_overlapped": _with(comm={"kernels": 20, "s": 0.3, "overlap_fraction": 0.1}),
    "fragmentation": _with(memory={"peak_allocated_bytes": 60 * GIB, "peak_reserved_bytes": 100 * GIB}),
    "throttling": _with(nvml={"throttled_fraction": 0.6, "sm_clock_mhz_median": 1400, "sm_clock_mhz_min": 1200,
                              "throttle_reasons_seen": ["sw_thermal_slowdown"]}),
    "memory_headroom": _with(memory={"peak_allocated_bytes": 30 * GIB, "peak_reserved_bytes": 32 * GIB}),
    "slower_than_planned": _with(estimate={"metric": "step_s", "estimated_s": 0.05, "measured_s": 0.1}),
}


def test_healthy_profile_has_no_findings():
    assert F.diagnose(HEALTHY) == []


@pytest.mark.parametrize("code", sorted(SICK))
def test_each_rule_fires_with_evidence_and_fix(code):
    found = {f.code: f for f in F.diagnose(SICK[code])}
    assert code in found, found.keys()
    f = found[code]
    assert f.evidence and f.fix and f.estimated_effect and f.severity in F.SEVERITY_ORDER
    assert set(found) == {code}  # each synthetic summary is sick in one way only
    json.dumps(f.to_json())


def test_rule_details():
    lb = F.launch_bound(SICK["launch_bound"])
    assert lb.speedup == pytest.approx((1.0 - 0.01) / 0.2) and lb.severity == "high"  # data wait taken out
    # a GPU idle only while the loop waits for data is a data-loader stall, not launch-bound (H200 run of
    # examples/train_slow_loader.py: 25% of the profile in DataLoader.__next__, GPU busy 11%)
    stalled = _with(active_s=1.0, busy_s=0.45, kernel_mean_s=20e-6, gap_mean_s=30e-6, dataloader_s=0.5,
                    dataloader_fraction=0.5)
    assert F.launch_bound(stalled) is None
    assert F.dataloader_stall(stalled).speedup == pytest.approx(2.0)
    assert [f.code for f in F.diagnose(stalled)][0] == "dataloader_stall"
    # host time the profiler itself added is not launch-bound time: H200, examples/train_slow_loader.py fixed,
    # 82 ms steps profiled against 41 ms bare
    inflated = _with(active_s=1.0, busy_s=0.45, kernel_mean_s=20e-6, gap_mean_s=30e-6, dataloader_s=0.0)
    assert F.launch_bound(inflated) is not None
    assert F.launch_bound(dict(inflated, profiler_overhead_s=0.5)) is None
    # set-up before the first kernel (active_s < wall_s) is not idle time
    assert F.launch_bound(_with(wall_s=10.0, active_s=1.0, busy_s=0.9, kernel_mean_s=4e-6, gap_mean_s=17e-6)) is None
    assert F.launch_bound(dict(SICK["launch_bound"], timeline="cpu_ops")) is None  # no device timeline, no verdict
    assert F.fragmentation(_with(memory={"num_alloc_retries": 3})).severity == "high"
    assert F.matmul_shapes(SICK["matmul_shapes"]).evidence["shapes"][0]["pad_to"] == [50304, 768]
    assert F.dataloader_stall(SICK["dataloader_stall"]).evidence["h2d_pageable_copies"] == 10
    assert F.memory_headroom(SICK["memory_headroom"]).evidence["batch_memory_growth_possible"] > 5
    assert F.throttling(_with(nvml={"unavailable": "no NVML"})) is None


SLOW_LOADER = textwrap.dedent("""
    import sys, time, torch
    class D(torch.utils.data.Dataset):
        def __len__(self): return 12
        def __getitem__(self, i):
            time.sleep(0.02)  # a deliberately slow loader
            return torch.randn(32)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.utils.data.DataLoader(D(), batch_size=4):
        model(x).pow(2).mean().backward(); opt.step(); opt.zero_grad()
    print("args", sys.argv[1:])
""")


@pytest.mark.slow
def test_doctor_script_diagnoses_slow_dataloader(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SLOW_LOADER)
    r = subprocess.run([sys.executable, "-m", "gpuscope", "doctor", "--device", "cpu", "--json", "--", "python",
                        str(script), "--lr", "3"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuscope.doctor/1" and d["status"] == "ok"
    p = d["profile"]
    assert p["script_status"] == "ok" and "args ['--lr', '3']" in p["script_stdout_tail"]
    assert p["dataloader_s"] >= 0.2 and p["dataloader_calls"] == 4  # 12 x 20 ms; 3 batches + the final StopIteration
    assert p["cpu_events"] > 0 and p["profiler_s_per_event"] >= 0
    assert p["profiler_overhead_source"] == "per_event"
    assert p["profiler_overhead_s"] == pytest.approx(min(p["cpu_events"] * p["profiler_s_per_event"],
                                                         max(0.0, p["active_s"] - p["dataloader_s"] - p["busy_s"])))
    assert p["steps"] == 2  # each optimizer step marks a step (3 batches: 3 marks, 2 steps between them), with no
    #                         change to the script
    assert 0 < p["active_s"] <= p["wall_s"]
    codes = [f["code"] for f in d["findings"]]
    assert codes[0] == "dataloader_stall", codes
    assert d["findings"][0]["evidence"]["dataloader_fraction"] >= 0.1


@pytest.mark.slow
def test_doctor_bare_run_measures_the_profiler_per_step(tmp_path):
    """--bare-run: the script runs once without the profiler (optimizer steps timed), then profiled; the profiler's
    cost is (profiled - bare median step) x steps, and the data-loader stall still leads."""
    script = tmp_path / "train.py"
    script.write_text(SLOW_LOADER)
    r = subprocess.run([sys.executable, "-m", "gpuscope", "doctor", "--bare-run", "--device", "cpu", "--json", "--",
                        "python", str(script)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    p = d["profile"]
    assert p["bare_run"]["script_status"] == "ok" and p["bare_run"]["steps"] == 2
    assert p["bare_step_s"] == pytest.approx(p["bare_run"]["step_s_median"]) and p["bare_step_s"] >= 0.08  # 4 x 20 ms
    assert p["profiler_overhead_source"] == "bare_steps"
    want = max(0.0, p["step_s_median"] - p["bare_step_s"]) * p["steps"]
    assert p["profiler_overhead_s"] == pytest.approx(min(want, max(0.0, p["active_s"] - p["dataloader_s"]
                                                                   - p["busy_s"])))
    assert d["findings"][0]["code"] == "dataloader_stall"
    r = subprocess.run([sys.executable, "-m", "gpuscope", "doctor", "infer", "--model", "llama-3.2-1b",
                        "--bare-run"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--bare-run is for a script" in r.stderr


def test_doctor_errors_are_one_sentence(tmp_path):
    r = subprocess.run([sys.executable, "-m", "gpuscope", "doctor", "--", "python", str(tmp_path / "missing.py")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_host_syncs_gpu_idle_after_each_sync():
    """Pure: after a sync returns the GPU waits for the next kernel; the rule needs >= 2 syncs and >= 5% idle."""
    from gpuscope.measure.profile.summary import host_syncs

    kernels = [0.0, 0.010, 0.020, 0.0305, 0.050]
    syncs = [(0.001, 0.008, "aten::_local_scalar_dense"), (0.021, 0.030, "aten::_local_scalar_dense"),
             (0.040, 0.045, "aten::nonzero"), (0.055, 0.060, "aten::nonzero")]  # the last: no kernel after it
    h = host_syncs(syncs, kernels)
    assert h["calls"] == 4 and h["wait_s"] == pytest.approx(0.007 + 0.009 + 0.005 + 0.005)
    assert h["refill_s"] == pytest.approx(0.002 + 0.0005 + 0.005)
    assert h["callers"][0] == {"op": "aten::_local_scalar_dense", "count": 2}
    f = F.host_sync(_with(syncs=dict(h), active_s=0.1, busy_s=0.05))  # busy_s within the window
    assert f is not None and f.evidence["fraction_of_window"] == pytest.approx(0.075)
    assert f.speedup == pytest.approx(1 / (1 - 0.075)) and "item()" in f.fix
    assert F.host_sync(_with(syncs=dict(h), active_s=1.0, busy_s=0.05)) is None  # 0.75%: below 5%
    assert F.host_sync(_with(syncs=dict(h, calls=1), active_s=0.1, busy_s=0.05)) is None  # one sync is not a habit
    assert F.host_sync(_with(syncs=dict(h), active_s=0.1, busy_s=0.05, timeline="cpu_ops")) is None


def test_host_syncs_in_a_row_share_one_gap():
    """Five blocking syncs (pageable copies, then .item()) before the same kernel: one idle gap, counted once."""
    from gpuscope.measure.profile.summary import host_syncs

    kernels = [0.0, 0.100]
    syncs = [(0.010 + 0.01 * i, 0.015 + 0.01 * i, "aten::copy_") for i in range(4)]
    syncs.append((0.050, 0.055, "aten::_local_scalar_dense"))
    h = host_syncs(syncs, kernels)
    assert h["calls"] == 5 and h["refill_s"] == pytest.approx(0.100 - 0.015)  # per sync it summed to 0.325 s
    assert h["refill_excluded_s"] == 0.0
    assert h["callers"][0] == {"op": "aten::copy_", "count": 4}


def test_host_syncs_on_a_drained_gpu_cost_nothing():
    """A slow host (launch-bound, or in Python between steps) leaves the GPU idle with or without syncs: a sync that
    returns at once (the queue was already empty) gives nothing back, however long the idle after it. The H200
    slow-loader run: 4.9 s of idle after 171 syncs, 19 ms of waits inside them; the finding read 5.25x."""
    from gpuscope.measure.profile.summary import host_syncs

    kernels = [0.0, 0.050, 0.100, 0.150]
    syncs = [(0.040 + 0.05 * i, 0.04001 + 0.05 * i, "aten::copy_") for i in range(3)]  # 10 us waits, 10 ms gaps
    h = host_syncs(syncs, kernels)
    assert h["refill_s"] == pytest.approx(3 * 0.00999)
    assert h["recoverable_s"] == pytest.approx(3 * 0.00001)
    assert F.host_sync(_with(syncs=h, active_s=0.16, busy_s=0.01)) is None  # 30 ms idle after syncs, 30 us to gain
    # a sync that waited 4 ms on queued work, then 10 ms of host time before the next kernel: 4 ms to gain
    h = host_syncs([(0.036, 0.040, "aten::_local_scalar_dense")], kernels)
    assert h["recoverable_s"] == pytest.approx(0.004) and h["refill_s"] == pytest.approx(0.010)


def test_host_syncs_leave_out_data_loader_waits():
    """The host's wait in DataLoader.__next__ inside a sync's gap is the data loader's cost, not the sync's."""
    from gpuscope.measure.profile.summary import host_syncs

    kernels = [0.0, 0.100, 0.300]
    syncs = [(0.005, 0.010, "aten::_local_scalar_dense"), (0.200, 0.250, "aten::_local_scalar_dense")]
    # gaps [0.010, 0.100] and [0.250, 0.300]; loader waits [0.020, 0.070] and [0.060, 0.080] (overlapping: 60 ms)
    # and one outside every gap [0.120, 0.180]
    dl = [(0.020, 0.070), (0.060, 0.080), (0.120, 0.180)]
    h = host_syncs(syncs, kernels, dl)
    assert h["refill_excluded_s"] == pytest.approx(0.060)
    assert h["refill_s"] == pytest.approx(0.090 + 0.050 - 0.060)
    assert host_syncs(syncs, kernels)["refill_s"] == pytest.approx(0.140)  # nothing excluded without intervals
    # a loader wait covering the whole gap leaves nothing
    assert host_syncs(syncs[:1], kernels, [(0.0, 0.2)])["refill_s"] == 0.0


def test_host_sync_finding_fraction_capped_by_the_window():
    """refill_s larger than the window (the H200 report: 23.8 s in 3.9 s, "612% ... 1000000000x faster") gives
    at most the window's idle part and a finite speedup."""
    s = _with(syncs={"calls": 132, "refill_s": 23.8, "wait_s": 0.5}, active_s=3.9, busy_s=1.0)
    f = F.host_sync(s)
    cap = 1 - 1.0 / 3.9
    assert f is not None and f.evidence["fraction_of_window"] == pytest.approx(cap)
    assert f.evidence["fraction_of_window"] <= 1.0
    assert f.speedup == pytest.approx(1 / (1 - cap)) and f.speedup <= 1 / (1 - cap) + 1e-9
    assert "612%" not in f.estimated_effect and "74%" in f.estimated_effect
    # no busy_s (or none busy): at most 95% of the window, 20x
    no_busy = _with(syncs={"calls": 132, "refill_s": 23.8}, active_s=3.9)
    del no_busy["busy_s"]
    for summ in (no_busy, _with(syncs={"calls": 132, "refill_s": 23.8}, active_s=3.9, busy_s=0.0)):
        g = F.host_sync(summ)
        assert g.evidence["fraction_of_window"] == pytest.approx(0.95) and g.speedup == pytest.approx(20.0)
    # a busy GPU leaves no idle time for syncs to cost
    assert F.host_sync(_with(syncs={"calls": 132, "refill_s": 23.8}, active_s=3.9, busy_s=3.9)) is None


def test_summarize_profile_passes_data_loader_waits_to_host_syncs():
    """The call site: sync and DataLoader events from the profiler (microseconds) reach host_syncs in seconds, and
    only the outermost __next__ is excluded."""
    from types import SimpleNamespace as NS

    from torch.autograd import DeviceType

    from gpuscope.measure.device.device import Device
    from gpuscope.measure.profile.summary import summarize_profile

    def ev(name, a, b, dev=DeviceType.CPU, parent=None):
        return NS(name=name, device_type=dev, time_range=NS(start=a, end=b), cpu_parent=parent,
                  cpu_time_total=b - a, self_cpu_time_total=b - a, self_device_time_total=b - a, input_shapes=[])

    item = ev("aten::_local_scalar_dense", 900, 2100)
    outer = ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 3000, 8000)
    events = [ev("k1", 0, 1000, DeviceType.CUDA), item, ev("cudaStreamSynchronize", 1000, 2000, parent=item),
              outer, ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 3500, 7000, parent=outer),
              ev("k2", 10000, 11000, DeviceType.CUDA)]
    summ = summarize_profile(NS(events=lambda: events), Device("cpu"), 0.011, [0.0], {})
    sy = summ["syncs"]
    assert summ["timeline"] == "device_kernels" and sy["calls"] == 1
    assert sy["callers"] == [{"op": "aten::_local_scalar_dense", "count": 1}]
    assert sy["refill_excluded_s"] == pytest.approx(0.005) and sy["refill_s"] == pytest.approx(0.003)


def test_profile_run_in_code_counts_steps_and_matmuls():
    import torch

    from gpuscope.measure.profile.profiler import profile_run

    lin = torch.nn.Linear(64, 48)
    x = torch.randn(16, 64)
    with profile_run("cpu", nvml=False) as p:
        for _ in range(3):
            lin(x).sum()
            p.step()
    s = p.summary
    assert s["steps"] == 3 and s["timeline"] == "cpu_ops" and s["kernel_count"] > 0
    assert {(m["m"], m["n"], m["k"]) for m in s["matmuls"]} == {(16, 48, 64)}
    assert 0 <= s["idle_fraction"] <= 1 and F.diagnose(s) == []
    assert s["profiler_overhead_source"] == "per_event" and s["bare_s"] is None


def test_profiler_overhead_measured_from_a_bare_run_and_bounded():
    """Given the block's bare time the overhead is active - bare (measured); it never exceeds the window less the
    data-loader wait and the busy time (an over-estimate made the H200 slow-loader run read as 100% data wait),
    and the calibration works under no_grad (inference workloads enter the profiler there)."""
    import torch

    from gpuscope.measure.profile.profiler import profile_run

    lin = torch.nn.Linear(256, 256)
    x = torch.randn(64, 256)
    with torch.no_grad():
        with profile_run("cpu", nvml=False, bare_s=0.0) as p:  # a bare time of 0: all of the window "overhead"
            for _ in range(20):
                lin(x).relu().sum()
    s = p.summary
    assert s["profiler_overhead_source"] == "bare_run" and s["bare_s"] == 0.0
    assert s["profiler_overhead_s"] == pytest.approx(max(0.0, s["active_s"] - s["dataloader_s"] - s["busy_s"]))
    assert s["profiler_overhead_s"] < s["active_s"]
    with profile_run("cpu", nvml=False, bare_s=1e9) as p:  # slower bare than profiled: no overhead at all
        lin(x).sum()
    assert p.summary["profiler_overhead_s"] == 0.0


# --- tune -----------------------------------------------------------------------------------------------------------
def _fake_oom_above(n):
    import torch

    def guard(batch, tokens):
        if batch > n:
            raise torch.OutOfMemoryError(f"CUDA out of memory (fake, batch {batch} > {n})")
    return guard


def test_search_batch_max_and_knee_pure():
    from gpuscope.measure.tune import batch as tune

    guard = _fake_oom_above(40)

    def trial(b):
        guard(b, b)
        return {"tokens_per_s": 100.0 * min(b, 16) * (1 + b / 1000), "peak_bytes": b * 1e9}

    r = tune.search_batch(trial, max_batch=1024)
    assert r["max_batch"] == 40 and r["first_oom"] == 41
    assert {1, 2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41} == {x["batch"] for x in r["rows"]}  # doubling, bisection
    assert r["knee_batch"] == 16  # tokens/s stops rising there
    dyn = tune.dynamic_policy(r["rows"], util_threshold=0.9, total_bytes=100e9, mem_fraction=0.9, upper=512)
    assert dyn["batch"] == 16 and "utilisation" in dyn["stop_reason"]
    dyn = tune.dynamic_policy(r["rows"], util_threshold=0.9, upper=4)
    assert dyn["batch"] == 4 and "upper bound" in dyn["stop_reason"]
    dyn = tune.dynamic_policy(r["rows"], util_threshold=0.9, total_bytes=10e9, mem_fraction=0.9)
    assert dyn["batch"] == 8 and "memory" in dyn["stop_reason"]
    r2 = tune.search_batch(lambda b: {"tokens_per_s": float(b)}, max_batch=24)
    assert r2["max_batch"] == 24 and r2["limit_reached"]


def test_tune_batch_on_tiny_model_with_fake_oom(monkeypatch):
    from gpuscope.measure.tune import batch as tune
    from gpuscope.workloads.sets import TINY_LLAMA
    from gpuscope.measure.device.device import Device

    monkeypatch.setattr(tune, "_guard", _fake_oom_above(5))
    r = tune.tune_batch("train", TINY_LLAMA, Device("cpu"), max_batch=64, seq=16, precision="fp32", steps=1)
    assert r["max_batch"] == 5
    assert [(x["batch"], x["status"]) for x in r["rows"]] == [(1, "ok"), (2, "ok"), (4, "ok"), (5, "ok"),
                                                               (6, "oom"), (8, "oom")]
    assert r["knee_batch"] in (1, 2, 4, 5) and r["dynamic"]["batch"] in (1, 2, 4)
    assert {c["policy"] for c in r["comparison"]} >= {"fixed", "optimal (knee)", "largest that fits"}
    from gpuscope.report.doctor_view import batch_markdown

    assert "| 6 | oom |" in batch_markdown(r)


def test_precision_sweep_bf16_deviation_on_cpu():
    from gpuscope.workloads.sets import TINY_LLAMA
    from gpuscope.measure.device.device import Device
    from gpuscope.measure.tune.precision import precision_sweep
    from gpuscope.report.doctor_view import precision_markdown

    r = precision_sweep("infer", TINY_LLAMA, Device("cpu"), batch=2, seq=16, modes=("fp32", "bf16", "fp8"))
    rows = {x["mode"]: x for x in r["rows"]}
    assert rows["fp32"]["deviation"]["max_rel"] == 0.0
    d = rows["bf16"]["deviation"]
    assert 0 < d["mean_rel"] < 0.05 and 0 < d["max_rel"] < 0.1 and d["top1_agreement"] > 0.8
    assert rows["bf16"]["weights_bytes"] * 2 == rows["fp32"]["weights_bytes"]
    assert rows["fp8"]["status"] == "unsupported" and "8.9" in rows["fp8"]["reason"]
    assert r["recommendation"]["mode"] in ("fp32", "bf16") and r["recommendation"]["text"]
    assert "| bf16 | ok |" in precision_markdown(r)
    t = precision_sweep("train", TINY_LLAMA, Device("cpu"), batch=2, seq=16, modes=("fp32", "fp16"), steps=2)
    fp16 = {x["mode"]: x for x in t["rows"]}["fp16"]
    assert fp16["loss_scaling"] and 0 < fp16["deviation"]["loss_rel_max"] < 0.02


# --- OOM tiers -----------------------------------------------------------------------------------------------------
def test_oom_tiers_ranked_and_each_lever_saves_memory():
    from gpuscope.explain.oom_tiers import oom_tiers
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.models import load_model

    r = oom_tiers(load_model("llama-3.1-8b"), load_hardware("h100"), micro_batch=4, seq=4096)
    assert not r["base"]["fits"]
    tiers = r["tiers"]
    assert {t.tier for t in tiers} == {1, 2, 3, 4}
    for t in tiers:
        assert t.peak_bytes < r["base"]["peak_bytes"] and t.saved_bytes > 0, t.lever
        assert t.slowdown > 0
    assert [t.rank for t in tiers] == list(range(1, len(tiers) + 1))
    fits = [t for t in tiers if t.fits]
    assert fits and tiers[: len(fits)] == fits  # levers that fit come first ...
    assert [t.slowdown for t in fits] == sorted(t.slowdown for t in fits)  # ... least slowdown first
    rest = tiers[len(fits):]
    assert [t.saved_bytes for t in rest] == sorted((t.saved_bytes for t in rest), reverse=True)
    assert r["best"] is fits[0]
    recompute = next(t for t in tiers if t.lever.startswith("activation recompute"))
    assert recompute.slowdown > 1.2  # one extra forward


def test_doctor_plan_only_oom_markdown():
    from gpuscope.cli.doctor import build_report
    from gpuscope.workloads.sets import train_case
    from gpuscope.report.doctor_view import doctor_markdown

    case = train_case("llama-3.1-8b", 4, 4096)
    rep = build_report({"kind": "train", "name": "train llama-3.1-8b"}, None, case, "h100", True)
    assert rep["status"] == "planned" and rep["oom"]["tiers"]
    md = doctor_markdown(rep)
    assert "## Out of memory: levers ranked" in md and "ZeRO-3" in md and "tensor parallel" in md


def test_doctor_callback_profiles_a_window_of_steps(tmp_path):
    """The Trainer callback profiles steps [start, start + steps) of any loop and runs the doctor's rules."""
    import json as _json

    import torch

    from gpuscope.explain.trainer_callback import DoctorCallback

    cb = DoctorCallback(start_step=2, steps=3, device="cpu", report=str(tmp_path / "doctor.json"))
    w = torch.randn(256, 256, requires_grad=True)
    for _ in range(8):
        cb.on_step_begin()
        (torch.randn(64, 256) @ w).square().mean().backward()
        cb.on_step_end()
    cb.on_train_end()
    assert cb.summary is not None and cb.summary["wall_s"] > 0
    assert isinstance(cb.findings, list)
    doc = _json.loads((tmp_path / "doctor.json").read_text())
    assert doc["schema"] == "gpuscope.doctor/1" and doc["status"] == "ok"
    from gpuscope.report.doctor_view import doctor_markdown

    md = doctor_markdown(cb.report_dict())
    assert md.startswith("# gpuscope doctor: trainer-callback - status ok") and "| steps | 3 " in md


TINY_MIXTRAL = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "num_local_experts": 4,
                "num_experts_per_tok": 2, "max_position_embeddings": 256}


def test_routing_counter_counts_each_layers_rows_per_expert():
    """Every routed row counted once per selected expert, per layer, per call, without a host sync in the hook."""
    import torch

    from gpuscope.measure.device.device import Device
    from gpuscope.measure.models.hf_model import build_model
    from gpuscope.measure.llm.moe_routing import RoutingCounter, experts_modules

    model, cfg = build_model(dict(TINY_MIXTRAL), Device("cpu"), torch.float32)
    assert len(experts_modules(model)) == 2
    with RoutingCounter(model) as rc, torch.no_grad():
        model(input_ids=torch.randint(0, 128, (2, 24)))
        model(input_ids=torch.randint(0, 128, (1, 5)))
    assert [len(calls) for calls in rc.counts] == [2, 2]
    assert all(sum(calls[0]) == 2 * 24 * 2 and sum(calls[1]) == 5 * 2 for calls in rc.counts)
    s = rc.summary()
    assert s["layers"] == 2 and s["experts"] == 4 and s["rows_largest_call"] == 96
    for c, imb in zip(s["rows_per_expert"], s["imbalance"]):
        assert imb == pytest.approx(max(c) / 24) and imb >= 1.0
    assert not any(h for h in (m._forward_pre_hooks for _, m in experts_modules(model)))  # hooks removed
    dense, _ = build_model({"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128},
                           Device("cpu"), torch.float32)
    with RoutingCounter(dense) as rc, torch.no_grad():
        dense(input_ids=torch.randint(0, 128, (1, 4)))
    assert rc.summary() is None


def test_moe_imbalance_finding():
    s = _with(moe_routing={"layers": 32, "experts": 8, "imbalance_median": 1.25, "imbalance_max": 1.67,
                           "rows_largest_call": 2048})
    (f,) = [x for x in F.diagnose(s) if x.code == "moe_imbalance"]
    assert f.severity == "medium" and f.speedup is None and "--weights" in f.fix
    assert f.evidence["uniform_routing_noise"] == pytest.approx(1 + (2 * math.log(8) * 8 / 2048) ** 0.5)
    assert not [x for x in F.diagnose(_with(moe_routing={"imbalance_median": 1.1})) if x.code == "moe_imbalance"]
    # 64 rows over 4 experts: 1.31 is within a uniform router's sampling noise (~1.42)
    small = _with(moe_routing={"layers": 2, "experts": 4, "imbalance_median": 1.31, "rows_largest_call": 64})
    assert not [x for x in F.diagnose(small) if x.code == "moe_imbalance"]
    assert not [x for x in F.diagnose(HEALTHY) if x.code == "moe_imbalance"]


def test_doctor_infer_on_a_tiny_moe_records_its_routing(tmp_path):
    """doctor infer counts the routing in its untimed warm-up (the profiled run sees the same inputs and weights)."""
    from gpuscope.measure.profile.workload import profile_workload

    s = profile_workload({"kind": "infer", "model": "tiny-mixtral", "config": dict(TINY_MIXTRAL), "batch": 1,
                          "prompt": 16, "gen": 3, "dtype": "fp32", "device": "cpu"})
    mr = s["moe_routing"]
    assert s["status"] == "ok" and mr["layers"] == 2 and mr["rows_largest_call"] == 16 * 2


def test_bench_infer_records_an_moe_models_routing():
    """bench infer counts an MoE model's rows per expert in its untimed warm-up and keeps the summary (not the
    per-layer lists) beside the timings; a dense model has none."""
    from gpuscope.workloads import headline
    from gpuscope.measure.llm.infer import run_infer

    r = run_infer({"kind": "infer", "model": "tiny-mixtral", "config": dict(TINY_MIXTRAL), "batch": 1, "prompt": 16,
                   "gen": 12, "dtype": "fp32", "repeats": 2, "decode_iters": 2, "device": "cpu"})
    assert r["status"] == "ok", r
    mr = r["moe_routing"]
    assert mr["layers"] == 2 and mr["experts"] == 4 and mr["rows_largest_call"] == 32
    assert "rows_per_expert" not in mr and len(mr["imbalance"]) == 2
    shown = dict(r, tpot_s=0.01, decode_tokens_per_s=100.0, decode_weights_gbs=1.0)  # the headline's decode form
    assert f"busiest expert {mr['imbalance_median']:.2f}x" in headline(shown)


def test_generate_waits_finding():
    """hf-graph: generate reads its stop condition on the host every token, so the compiled call's host time runs
    in series with the GPU. Fires with >= 1 sync per generated token and a planned host share >= 10%; quiet for the
    graph loop that never waits (gs-compile), with fewer syncs than tokens, or a small host share."""
    from gpuscope.estimate.engines import ENGINES

    est = {"estimated_s": 0.44, "planner_decode_serial_host_s": 1.4e-3, "planner_decode_gpu_s": 5.0e-3}
    s = _with(case={"kind": "infer", "engine": "hf-graph", "gen": 64}, syncs={"calls": 109}, estimate=est)
    (f,) = [x for x in F.diagnose(s) if x.code == "generate_waits"]
    saved = 63 * (1.4e-3 - ENGINES["graph"].step_s)
    assert f.speedup == pytest.approx(0.44 / (0.44 - saved)) and f.severity == "medium"
    assert f.evidence["host_share_of_step"] == pytest.approx(1.4 / 6.4) and "gs-compile" in f.fix
    assert "--defer-stop" in f.fix and "deferred_stop()" in f.fix
    # a host-bound step: running ahead saves only down to the host's own time (max(GPU + 0.4 ms, host))
    slow_host = dict(est, planner_decode_serial_host_s=1.4e-3, planner_decode_gpu_s=0.5e-3)
    (f,) = [x for x in F.diagnose(_with(case={"kind": "infer", "engine": "hf-graph", "gen": 64},
                                        syncs={"calls": 109}, estimate=slow_host)) if x.code == "generate_waits"]
    assert f.speedup == pytest.approx(0.44 / (0.44 - 63 * 0.5e-3))
    for quiet in (_with(case={"kind": "infer", "engine": "gs-compile", "gen": 64}, syncs={"calls": 109}, estimate=est),
                  _with(case={"kind": "infer", "engine": "hf-graph", "gen": 64, "defer_stop": True},
                        syncs={"calls": 109}, estimate=est),
                  _with(case={"kind": "infer", "engine": "hf-graph", "gen": 64}, syncs={"calls": 10}, estimate=est),
                  _with(case={"kind": "infer", "engine": "hf-graph", "gen": 64}, syncs={"calls": 109},
                        estimate=dict(est, planner_decode_serial_host_s=0.4e-3, planner_decode_gpu_s=20e-3)),
                  HEALTHY):
        assert not [x for x in F.diagnose(quiet) if x.code == "generate_waits"]


def test_estimate_compared_with_the_bare_run_not_the_profiled_one():
    """The doctor set the planner's step beside the profiled median, which carried the profiler's cost (GPT-2
    training on the lent H200, research/results/2026-11-30-h200-f/doctor_gpt2_none.json: 52.0 ms profiled, 31.7 ms bare:
    "2.3x slower than planned" where the bare run was 1.4x). The bare time is the one compared now."""
    from types import SimpleNamespace

    doc = json.load(open("research/results/2026-11-30-h200-f/doctor_gpt2_none.json"))
    prof = doc["profile"]
    est = SimpleNamespace(kind="train", time={"step_s": 0.0226}, hardware="h200", calibrated=False,
                          peak_bytes_per_gpu=2e9, fits=True)
    cmp_ = F.compare_estimate(est, prof)
    assert cmp_["measured_timing"] == "bare"
    assert cmp_["measured_s"] == pytest.approx(prof["bare_s"] / prof["steps"]) == pytest.approx(0.03168, rel=1e-3)
    assert F.slower_than_planned({"estimate": cmp_}).evidence["ratio"] == pytest.approx(1.40, abs=0.01)
    # a script profiled without --bare-run has only the profiled median; with it, its bare median step
    assert F.bare_time({"step_s_median": 0.05, "steps": 5}) == (0.05, "profiled")
    assert F.bare_time({"step_s_median": 0.05, "bare_step_s": 0.03, "steps": 5}) == (0.03, "bare")
    assert F.bare_time({"wall_s": 2.0}) == (2.0, "profiled")
