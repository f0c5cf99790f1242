"""The fifth H200 session (research/results/2026-11-30-h200, README.md there): why HF's static-cache compiled generate
(bench's hf-graph) decodes slower than one CUDA graph, the planner's hf-graph engine fitted from it, the doctor's
generate_waits finding on the GPU's own profile, and a calibrated TOML against workloads of the same session.

Targets (memory 5%, prefill/step 15%, decode 20%) and the known-miss rule: research/tests/validation_rows.py.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpuscope.estimate.roofline import ENGINES
from gpuscope.explain.compare import compare_record, hardware_for, read_records
from gpuscope.specs.hardware import load_hardware
from validation_rows import check_row

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-11-30-h200"
RECORDS = read_records(HERE / "measurements.jsonl")
WORKLOADS = [r for r in RECORDS if r["case"]["kind"] in ("infer", "train")]
CALL4 = [r for r in WORKLOADS  # after its calibrate, before call 5
         if "2026-11-30T01:30" <= r["provenance"]["timestamp_utc"] < "2026-11-30T01:40"]

HOST_PREFILL = ("host-bound eager prefill on this VM's host: TTFT samples 22-30 ms (1B p512, planned 14.5-15.6) and "
                "52-62 ms (8B p128, planned 27.5); earlier sessions read 15-26 and 27-49 ms for the same cases")
KNOWN_MISSES = {
    ("infer/llama-3.2-1b/b1-p512-g128-bf16-hf-graph", "prefill_s"): (0.45, HOST_PREFILL),
    # call 3's run only (54.0 ms); call 5's run of the same case read 32.5 ms, -8.8% since the planner prices the
    # StaticCache's creation in the TTFT (session 10; it was -15.4%)
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-hf-graph", "prefill_s", "2026-11-30T01:26"): (0.52, HOST_PREFILL),
    ("infer/llama-3.2-1b/b1-p512-g64-bf16", "prefill_s"): (0.40, HOST_PREFILL),
    ("infer/llama-3.1-8b/b1-p2048-g64-bf16", "decode_s_per_token"):
        (0.40, "E2E repeats 1.58 / 2.32 / 2.78 s (spread 52%, the headline now says noisy): the fastest gives "
               "24.1 ms/token against 23.7 planned; the bare decode forward of the same run read 23.7 ms"),
    ("train/llama-3.2-1b/mb1-s128-amp-bf16-rc_none", "step_s"):
        (0.30, "host-bound (~2,400 kernels a step, 24 ms of GPU work): -21% in session d, -25% here with the "
               "catalog's host costs; -6.6% with this call's calibrated TOML (test below)"),
    ("train/gpt2/mb2-s128-amp-bf16-rc_full", "step_s"):
        (0.40, "host-bound with full recompute: -27% in session d, -36% here; -18% calibrated"),
}
TINY = ("bench all's tiny cases (call 6) are all host: this VM's host ran slower than in session d, where the same "
        "cases read -16% to +16% (research/tests/test_validation_h200_d.py)")
KNOWN_MISSES |= {
    ("infer/tiny-llama/b2-p32-g8-fp32", "prefill_s"): (0.25, TINY),
    ("infer/tiny-gpt2/b2-p32-g8-bf16", "prefill_s"): (0.50, TINY),
    ("infer/tiny-gpt2/b2-p32-g8-bf16", "decode_s_per_token"): (0.50, TINY),
    ("train/tiny-llama/mb2-s64-amp-bf16-rc_none", "step_s"): (0.30, TINY),
    ("train/tiny-gpt2/mb2-s64-fp32-rc_full", "step_s"): (0.50, TINY),
}


def _json(name: str) -> dict:
    return json.loads((HERE / name).read_text())


def test_the_set():
    kinds = [r["case"]["kind"] for r in RECORDS]
    assert len(RECORDS) == 45 and kinds.count("infer") == 11 and kinds.count("train") == 5
    assert all(r["result"]["status"] == "ok" and r["result"]["device_name"] == "NVIDIA H200" for r in RECORDS)
    assert len(CALL4) == 6


def test_hf_graph_replays_one_cuda_graph_and_waits_every_token():
    """Per decode token (torch.profiler over generate of 16 tokens less generate of 1): one cudaGraphLaunch (the
    compiled step, one Dynamo graph, no breaks) and one cudaStreamSynchronize (generate's stopping check), with
    ~30 small kernels of generate's own around it; without compile the same step launches ~850 kernels."""
    for name in ("diag_logs_1b.json", "diag_logs_8b.json", "hf_trend_1b.json", "hf_layers.json", "hf_trend_8b.json"):
        for v in _json(name)["variants"]:
            per = v["decode_launch_per_token"]
            if v["variant"] == "no_compile":
                assert per.get("cudaGraphLaunch", 0) == 0 and per["cudaLaunchKernel"] > 600
                continue
            assert per["cudaGraphLaunch"] == 1 and per["cudaStreamSynchronize"] == 1, (name, v["variant"])
            assert per["cudaLaunchKernel"] <= 32
            assert v["counters"]["stats"]["unique_graphs"] == 1 and "graph_break" not in v["counters"]


def _host_points(variant: str = "default") -> list[tuple[int, float]]:
    """(layers, TPOT - profiled GPU kernel time per token) per model: the host time the GPU waits for."""
    pts = []
    for name in ("hf_layers.json", "hf_trend_1b.json", "hf_trend_8b.json"):
        for v in _json(name)["variants"]:
            if v["variant"] == variant:
                tpot = statistics.median([v["tpot_s"], *v["tpot_trend_s"]])
                pts.append((v["layers"], tpot - v["decode_gpu_us_per_token"] * 1e-6))
    return pts


def test_the_hf_graph_engine_is_the_least_squares_fit_of_its_host_time():
    """roofline.ENGINES["hf-graph"]: generate's step (0.4 ms) + 0.72 ms + 8.6 us per layer in series with the GPU
    is the fit of (TPOT - GPU time) over Llama models of 2, 8, 16 and 32 layers (1.12 ms + 8.6 us per layer);
    every point lies within 0.35 ms of it."""
    pts = _host_points()
    assert sorted(n for n, _ in pts) == [2, 8, 16, 32, 32]
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    icpt = my - slope * mx
    assert icpt == pytest.approx(1.12e-3, abs=0.01e-3) and slope == pytest.approx(8.6e-6, abs=0.1e-6)
    eng = ENGINES["hf-graph"]
    for layers, host in pts:
        assert eng.serial_host_s(layers) == pytest.approx(icpt + slope * layers, abs=0.01e-3)
        assert abs(host - eng.serial_host_s(layers)) < 0.35e-3, (layers, host)


def test_a_kept_static_cache_does_not_make_hf_graph_faster():
    """Passing one StaticCache (reset per call) instead of cache_implementation='static' keeps the cache's tensors
    at one address, so the CUDA-graph tree stops re-recording per call; it did not lower TPOT (1B 2.64 vs 2.62 ms,
    8B 8.40 vs 7.26 ms, medians of 13-15 and 7-9 calls): the per-call re-record is not what costs per token."""
    by = {(v["layers"], v["variant"]): v for name in ("hf_trend_1b.json", "hf_trend_8b.json")
          for v in _json(name)["variants"]}
    for layers in (16, 32):
        d, u = by[(layers, "default")], by[(layers, "user_cache")]
        med = {k: statistics.median([x["tpot_s"], *x["tpot_trend_s"]]) for k, x in (("d", d), ("u", u))}
        assert med["u"] >= 0.99 * med["d"], (layers, med)


ROWS = [pytest.param(row, rec["provenance"]["timestamp_utc"], id=f"{row.case}:{row.metric}") for rec in WORKLOADS
        for row in compare_record(rec, hardware_for(rec["result"]["device_name"]))]


@pytest.mark.parametrize("row,timestamp", ROWS)
def test_estimate_vs_h200_fifth_session(row, timestamp):
    """A known miss is keyed by case and metric, or (one run of a case measured twice) also by its time."""
    one_run = (row.case, row.metric, timestamp[:16])
    if one_run in KNOWN_MISSES:
        check_row(row, one_run, KNOWN_MISSES)
    else:
        check_row(row, (row.case, row.metric), KNOWN_MISSES)


def test_hf_graph_decode_against_the_planner():
    """The six hf-graph bench runs (1B p512 in calls 3, 4, 6; 8B p2048; 8B p128 in calls 3 and 5): -1.2% to -19.4%
    against the catalog planner, five of them within 15% (the previous engine model, host never in series, planned
    1.72 / 6.06 / 5.49 ms). The host time in series varies between calls: 8B p128 read 7.24 ms in call 3, 8.05 in
    call 5; 1B p512 2.88, 2.95 and 2.61 ms."""
    rows = [row for rec in WORKLOADS if rec["case"].get("engine") == "hf-graph"
            for row in compare_record(rec, hardware_for(rec["result"]["device_name"]))
            if row.metric == "decode_s_per_token"]
    errs = sorted(r.error for r in rows)
    assert len(rows) == 6 and all(-0.20 < e < 0 for e in errs), errs
    assert sum(abs(e) <= 0.15 for e in errs) == 5


def test_the_same_step_without_generates_wait():
    """Call 5, one after the other on Llama-3.1-8B p128 g256: gs-compile (the same kind of compiled step, replayed
    by a loop that never waits) 5.69 ms/token, within 4% of its plan; hf-graph 8.05 ms. gs-compile reads its
    weights at >= 1.4x hf-graph's rate."""
    by = {r["case"]["engine"]: r["result"] for r in WORKLOADS
          if "2026-11-30T01:40" <= r["provenance"]["timestamp_utc"] < "2026-11-30T01:50"
          and r["case"]["kind"] == "infer"}
    gs, hf = by["gs-compile"], by["hf-graph"]
    assert gs["decode_weights_gbs"] / hf["decode_weights_gbs"] > 1.4
    assert gs["e2e_spread"] < 0.05 and hf["e2e_spread"] < 0.05  # each run steady: the gap is not noise


def test_calibrated_in_the_same_session():
    """`hardware calibrate --quick --host` ran first in call 4, then the workloads: with that TOML the host-bound
    training steps come within 15% and 20% (catalog: -25% / -36%), the GPU-bound step and the hf-graph decode stay
    within 5%. Eager decode does not improve: the calibrated launch cost comes from tiny models (14.1 us a kernel)."""
    hw = load_hardware(str(HERE / "h200_calibrated_call4.toml"))
    assert hw.measured["host_launch_s"] == pytest.approx(14.06e-6, rel=0.01)
    err = {(row.case, row.metric): row.error for rec in CALL4 for row in compare_record(rec, hw)}
    assert abs(err[("train/llama-3.2-1b/mb1-s128-amp-bf16-rc_none", "step_s")]) < 0.15
    assert abs(err[("train/gpt2/mb2-s128-amp-bf16-rc_full", "step_s")]) < 0.20
    assert abs(err[("train/llama-3.2-1b/mb4-s2048-amp-bf16-rc_none", "step_s")]) < 0.05
    assert abs(err[("infer/llama-3.2-1b/b1-p512-g128-bf16-hf-graph", "decode_s_per_token")]) < 0.05
    assert all(abs(e) < 0.05 for (c, m), e in err.items() if m.endswith("bytes"))
    assert err[("infer/llama-3.2-1b/b1-p512-g64-bf16", "decode_s_per_token")] < -0.20


def test_generate_waits_fires_on_the_h200_profile():
    """doctor infer --engine hf-graph, Llama-3.1-8B p128 g64 (call 3): 109 syncs for 64 tokens; the planner puts
    1.40 ms of a 6.5 ms step on the host in series: generate_waits, with the planner's speed-up of a loop that
    never waits. Re-diagnosed here with the current planner from the recorded profile."""
    from gpuscope.cli.doctor import build_report

    rec = _json("doctor_hfg_8b.json")
    summary = dict(rec["profile"])
    rep = build_report(rec["target"], summary, summary["case"], "h200", False)
    (f,) = [x for x in rep["findings"] if x.code == "generate_waits"]
    assert f.evidence["syncs_per_token"] == pytest.approx(109 / 64)
    assert f.evidence["planner_host_in_series_ms"] == pytest.approx(
        ENGINES["hf-graph"].serial_host_s(32) * 1e3)
    est = rep["estimate"]["estimated_s"]
    saved = 63 * (ENGINES["hf-graph"].serial_host_s(32) - ENGINES["graph"].step_s)
    assert f.speedup == pytest.approx(est / (est - saved)) and 1.1 < f.speedup < 1.3
    assert "gs-compile" in f.fix


def test_script_and_bench_agree_back_to_back():
    """Call 6 ran research/scripts/gpu_hf_graph.py (default variant) and bench infer --engine hf-graph on Llama-3.2-1B p512
    one after the other: the bench's 2.61 ms lies within the script's 7 TPOTs (2.49-3.00 ms), so the bench's higher
    readings in calls 3-4 (2.88, 2.95) were the host's variation between calls, not the bench."""
    (v,) = _json("hf_script_1b_call6.json")["variants"]
    script = [v["tpot_s"], *v["tpot_trend_s"]]
    (bench,) = [r["result"] for r in WORKLOADS if r["case"].get("engine") == "hf-graph"
                and r["provenance"]["timestamp_utc"] >= "2026-11-30T01:50"]
    assert min(script) <= bench["tpot_s"] <= max(script)


def test_bench_all_on_the_final_tree():
    """Issue 3: `gpuscope bench all` (quick) on one H200 in under 5 minutes: 123 s, all 17 measurements ok."""
    steps = (HERE / "steps.txt").read_text().splitlines()
    (line,) = [x for x in steps if x.startswith("bench_all_final")]
    assert " rc=0 " in f" {line} " and float(line.split()[-1].rstrip("s")) < 300
    def from_bench_all(r):
        argv = r["provenance"].get("parent_argv") or r["provenance"].get("argv") or []
        return argv[-3:] == ["bench", "all", "--json"]

    call6 = [r for r in RECORDS if from_bench_all(r)]
    assert len(call6) == 17 and all(r["result"]["status"] == "ok" for r in call6)
    assert {r["case"]["kind"] for r in call6} == {"micro", "infer", "train"}


def test_calibrated_with_the_real_size_factor():
    """`hardware calibrate --host` now writes the tiny models' launch cost x REAL_SIZE_LAUNCH_FACTOR (17.2 / 15.7,
    the first session's real/tiny ratio the catalog already used; not fitted to these runs). Call 4's TOML as it
    would now be written: host-bound training 1B s128 +0.9% and GPT-2 full recompute -10% (were -6.6% / -18%),
    eager 1B decode -19% (was -25%); the GPU-bound step and hf-graph decode unchanged."""
    from dataclasses import replace

    from gpuscope.estimate.roofline import REAL_SIZE_LAUNCH_FACTOR

    hw = load_hardware(str(HERE / "h200_calibrated_call4.toml"))
    hw = replace(hw, measured={**hw.measured, "host_launch_s": hw.measured["host_launch_s"] * REAL_SIZE_LAUNCH_FACTOR})
    err = {(row.case, row.metric): row.error for rec in CALL4 for row in compare_record(rec, hw)}
    assert abs(err[("train/llama-3.2-1b/mb1-s128-amp-bf16-rc_none", "step_s")]) < 0.05
    assert abs(err[("train/gpt2/mb2-s128-amp-bf16-rc_full", "step_s")]) < 0.15
    assert abs(err[("train/llama-3.2-1b/mb4-s2048-amp-bf16-rc_none", "step_s")]) < 0.05
    assert abs(err[("infer/llama-3.2-1b/b1-p512-g128-bf16-hf-graph", "decode_s_per_token")]) < 0.05
    assert abs(err[("infer/llama-3.2-1b/b1-p512-g64-bf16", "decode_s_per_token")]) < 0.20
