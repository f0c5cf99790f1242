"""The sixth H200 session (research/results/2026-11-30-h200-f, README.md there): HF generate with transformers'
DeferredStopCheck switched on for CUDA (bench --defer-stop, measure/defer_stop.py) and the planner's hf-graph-defer
engine against it; the same session's copy ceiling for issue 3's 70%-of-copy line.

Targets (memory 5%, prefill/step 15%, decode 20%) and the known-miss rule: research/tests/validation_rows.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.explain.compare import read_records
from validation_rows import check_row, row_params

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-11-30-h200-f"
RECORDS = read_records(HERE / "measurements.jsonl")
WORKLOADS = [r for r in RECORDS if r["case"]["kind"] in ("infer", "train")]
DIAG = {v["variant"]: v for v in json.loads((HERE / "defer_diag_1b.json").read_text())["variants"]}

HOST_PREFILL = ("host-bound eager prefill of Llama-3.1-8B p128 on this VM's host: TTFT 32-40 ms against 25.8-27.5 "
                "planned (27-62 ms in earlier sessions; research/tests/test_validation_h200_e.py)")
HFG_TTFT = ("hf-graph's TTFT (generate of one token over a static cache) on Llama-3.2-1B p512: 16.5 ms in call 2, "
            "29.9 ms in call 3, while plain generate's read 15.0 ms in call 3; 22-30 ms in session 5. Not explained")
KNOWN_MISSES = {
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-hf-graph-defer", "prefill_s"): (0.40, HOST_PREFILL),
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-hf-graph-fused-defer", "prefill_s"): (0.30, HOST_PREFILL),
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-hf-graph", "prefill_s"): (0.30, HOST_PREFILL),
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-gs-compile-fused", "prefill_s"): (0.25, HOST_PREFILL),
}
KNOWN_MISSES_CALL3 = {  # the catalog's plan against call 3 (its own calibration: the tests at the end)
    ("infer/llama-3.1-8b/b1-p128-g64-bf16", "prefill_s"): (0.20, HOST_PREFILL + "; -5% with call 3's calibration"),
    ("infer/llama-3.2-1b/b1-p512-g128-bf16-hf-graph-defer", "prefill_s"): (0.50, HFG_TTFT),
    ("train/gpt2/mb2-s128-amp-bf16-rc_full", "step_s"):
        (0.35, "host-bound with full recompute: -27% in sessions d-e too; calibration does not help (-32%)"),
}
CALL3 = [r for r in RECORDS if "2026-11-30T03:16" <= r["provenance"]["timestamp_utc"] < "2026-11-30T03:30"]
CALL5 = [r for r in RECORDS if "2026-11-30T03:34" <= r["provenance"]["timestamp_utc"] < "2026-11-30T03:45"]
CALL6 = [r for r in RECORDS if r["provenance"]["timestamp_utc"] >= "2026-11-30T03:45"]  # bench all, final tree
RUN_CAL = HERE / "nvidia-h200-20261130T034811Z-cc1948.toml"  # the calibration bench all wrote and planned on
HFG_TTFT_5 = ("hf-graph's TTFT moves between processes of the same case, with or without --gc-freeze: 8B p128 "
              "49.5 / 29.2 ms, 1B p512 18.9 / 30.4 ms (call 5); the collector paused < 0.05 ms per TTFT")
EARLY = [r for r in RECORDS if r not in CALL3 and r not in CALL5 and r not in CALL6]  # calls 1-2: deferred stop, 70% of copy
KNOWN_MISSES_CALL5 = {
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-hf-graph", "prefill_s"): (0.50, HFG_TTFT_5),
    ("infer/llama-3.2-1b/b1-p512-g128-bf16-hf-graph-gcfreeze", "prefill_s"): (0.55, HFG_TTFT_5),
    # ("infer/llama-3.2-1b/b1-p512-g128-bf16-hf-graph", "prefill_s"): -17.5% before session 10, -10.2% since the
    # planner prices the StaticCache's creation in an hf-graph TTFT
}


def _by_name(name: str) -> dict:
    """A workload of calls 1-2 by case name."""
    (r,) = [r for r in EARLY if r["case_id"].split("#")[0] == name]
    return r["result"]


def test_the_set():
    assert len(RECORDS) == 56 and len(WORKLOADS) == 19 and len(CALL3) == 21 and len(CALL5) == 4
    assert len(CALL6) == 17
    assert all(r["result"]["status"] == "ok" and r["result"]["device_name"] == "NVIDIA H200" for r in RECORDS)
    deferred = [r for r in WORKLOADS if r["case"].get("defer_stop")]
    assert len(deferred) == 5 and all(r["result"]["stop_check"] == "deferred" for r in deferred)


def test_deferred_stop_removes_the_per_token_sync_and_keeps_the_tokens():
    """research/scripts/gpu_hf_graph.py on Llama-3.2-1B p128 g128 (torch.profiler over generate of 16 tokens less 1): the
    static-cache generate's one cudaStreamSynchronize per token becomes one event wait on the token before; plain
    generate's two syncs a token become one. The greedy tokens equal the reference's; TPOT 2.57 -> 1.64 ms with
    the same GPU work (1.43 / 1.42 ms a token)."""
    d, dd, e, ed = DIAG["default"], DIAG["defer"], DIAG["eager"], DIAG["eager_defer"]
    assert d["decode_launch_per_token"]["cudaStreamSynchronize"] == 1
    assert dd["decode_launch_per_token"]["cudaStreamSynchronize"] == 0
    assert dd["decode_launch_per_token"]["cudaEventSynchronize"] == pytest.approx(1, abs=0.1)
    assert e["decode_launch_per_token"]["cudaStreamSynchronize"] == 2
    assert ed["decode_launch_per_token"]["cudaStreamSynchronize"] == 1
    assert dd["tokens_equal_to_default"] and ed["tokens_equal_to_eager"]
    assert dd["deferred_applied"] == [True] and ed["deferred_applied"] == [True]
    assert dd["generated_tokens"] == ed["generated_tokens"] == 128
    assert dd["tpot_s"] < 0.7 * d["tpot_s"]
    assert dd["decode_gpu_us_per_token"] == pytest.approx(d["decode_gpu_us_per_token"], rel=0.02)
    # what is left above the GPU's time is about the graph loop's 0.4 ms residual, not generate's host work
    assert dd["tpot_s"] - dd["decode_gpu_us_per_token"] * 1e-6 < 0.3e-3


def test_hf_graph_reaches_70_percent_of_copy_with_deferred_stop_and_fused_projections():
    """Issue 3: hf-graph decode of a 7B-class bf16 model at batch 1 >= 70% of the measured copy bandwidth.
    Llama-3.1-8B p128 g256 against this session's copy (4174 GB/s): hf-graph as transformers runs it 2070 GB/s
    (50%); with --defer-stop 2790 (67%); with --defer-stop --fuse-proj 3125 (75%), the same as gpuscope's own
    gs-compile --fuse-proj loop (3124) in the same session."""
    (copy,) = [r["result"]["gbs"] for r in EARLY if r["case_id"].startswith("micro/memory/copy/")]
    rate = {n: _by_name(f"infer/llama-3.1-8b/b1-p128-g256-bf16-{n}")["decode_weights_gbs"] / copy
            for n in ("hf-graph", "hf-graph-defer", "hf-graph-fused-defer", "gs-compile-fused")}
    assert copy > 4000
    assert rate["hf-graph"] < 0.55 and 0.6 < rate["hf-graph-defer"] < 0.7
    assert rate["hf-graph-fused-defer"] >= 0.70
    assert rate["hf-graph-fused-defer"] == pytest.approx(rate["gs-compile-fused"], rel=0.01)


@pytest.mark.parametrize("row", row_params(EARLY))
def test_estimate_vs_h200_sixth_session(row):
    check_row(row, (row.case, row.metric), KNOWN_MISSES)


@pytest.mark.parametrize("row", row_params(CALL3))
def test_estimate_vs_h200_sixth_session_call3(row):
    check_row(row, (row.case, row.metric), KNOWN_MISSES_CALL3)


def test_hf_graph_defer_decode_against_the_planner():
    """The planner's hf-graph-defer (max(GPU + 0.4 ms, host per step)): 8B -4.6%, 8B fused -0.6%, 1B p512 +6.1%;
    the same session's plain hf-graph 8B read -16% against hf-graph's serial model (host in series)."""
    err = {p.values[0].case: p.values[0].error
           for p in row_params(EARLY)
           if p.values[0].metric == "decode_s_per_token"}
    for name in ("llama-3.1-8b/b1-p128-g256-bf16-hf-graph-defer", "llama-3.1-8b/b1-p128-g256-bf16-hf-graph-fused-defer",
                 "llama-3.2-1b/b1-p512-g128-bf16-hf-graph-defer"):
        assert abs(err["infer/" + name]) < 0.08, (name, err["infer/" + name])


def _calibrated_errors(toml: str) -> dict:
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    hw = load_hardware(str(HERE / toml))
    return {(row.case, row.metric): row.error for rec in CALL3 if rec["case"]["kind"] != "micro"
            for row in compare_record(rec, hw)}


def test_calibrated_with_real_width_host_costs_in_the_same_call():
    """Call 3: `hardware calibrate --quick --host` (the real-width fit: 17.5 us per decode kernel and 19.3 per
    prefill kernel at Llama-3.2-1B's widths, tiny models 15.8 us: a real/tiny ratio of 1.11, the catalog's factor
    being 1.10), then the workloads, then calibrate again (cal_real_2.toml). With it the host-bound eager cases
    land within 10%: 1B p512 prefill +9.6% / decode -1.2%, 8B p128 prefill -5.0% (catalog -15.9%) / decode +0.4%;
    hf-graph-defer decode -8.3%; 1B s128 training -11.7%; memory within 1%."""
    err = _calibrated_errors("cal_real_2.toml")
    for key in (("infer/llama-3.2-1b/b1-p512-g128-bf16", "prefill_s"),
                ("infer/llama-3.2-1b/b1-p512-g128-bf16", "decode_s_per_token"),
                ("infer/llama-3.1-8b/b1-p128-g64-bf16", "prefill_s"),
                ("infer/llama-3.1-8b/b1-p128-g64-bf16", "decode_s_per_token"),
                ("infer/llama-3.2-1b/b1-p512-g128-bf16-hf-graph-defer", "decode_s_per_token")):
        assert abs(err[key]) < 0.10, (key, err[key])
    assert abs(err[("train/llama-3.2-1b/mb1-s128-amp-bf16-rc_none", "step_s")]) < 0.15
    assert all(abs(e) < 0.05 for (c, m), e in err.items() if m.endswith("bytes"))
    from gpuscope.specs.hardware import load_hardware

    m = load_hardware(str(HERE / "cal_real_2.toml")).measured
    assert m["host_launch_s"] == pytest.approx(17.5e-6, rel=0.01)
    assert m["host_prefill_launch_s"] == pytest.approx(19.3e-6, rel=0.01)


def test_the_host_itself_moved_between_two_calibrations():
    """The same calibrate four minutes earlier, first thing in the call (cal_real_1.toml), read 22.4 us per decode
    kernel with the tiny models at 22.4 us too: the whole host was ~28% slower then, while the GPU ceilings of the
    two runs agree within 0.3% (bf16 matmul 755 / 754 TFLOP/s, copy 4095 / 4094 GB/s). With that TOML the same
    workloads plan 24-42% long. So a host calibration is one sample of a moving host; calibrate reports it as such."""
    from gpuscope.specs.hardware import load_hardware

    a = load_hardware(str(HERE / "cal_real_1.toml")).measured
    b = load_hardware(str(HERE / "cal_real_2.toml")).measured
    assert a["host_launch_s"] / b["host_launch_s"] == pytest.approx(1.28, abs=0.01)
    assert a["memory_bw_gbs"] == pytest.approx(b["memory_bw_gbs"], rel=0.003)
    err = _calibrated_errors("cal_real_1.toml")
    assert err[("infer/llama-3.2-1b/b1-p512-g128-bf16", "prefill_s")] > 0.35
    assert err[("infer/llama-3.1-8b/b1-p128-g64-bf16", "decode_s_per_token")] > 0.2


@pytest.mark.parametrize("row", row_params(CALL5))
def test_estimate_vs_h200_sixth_session_call5(row):
    check_row(row, (row.case, row.metric), KNOWN_MISSES_CALL5)


def test_the_collector_is_not_what_slows_hf_graph():
    """Call 5 (bench infer reports gc.callbacks pauses): in hf-graph runs of 1B and 8B with ~0.57-0.94 M tracked
    objects the collector paused ~1 us per token and < 0.05 ms per TTFT, generation-0 collections only, and
    --gc-freeze (0.61-0.78 M objects frozen) left TPOT within 3% (8B 7.73 / 7.94 ms, 1B 2.60 / 2.59 ms)."""
    by = {r["case_id"].split("#")[0].split("/")[-1]: r["result"] for r in CALL5}
    assert len(by) == 4
    for res in by.values():
        assert res["gc_pause_s_per_token"] < 5e-6 and res["gc_pause_s_per_ttft"] < 0.1e-3
        assert res["gc_collections_generate"][1:] == [0, 0]
    for model in ("b1-p128-g256-bf16-hf-graph", "b1-p512-g128-bf16-hf-graph"):
        plain, frozen = by[model], by[model + "-gcfreeze"]
        assert frozen["gc_frozen_objects"] > 500_000 and plain["gc_tracked_objects"] > 500_000
        assert frozen["tpot_s"] == pytest.approx(plain["tpot_s"], rel=0.03)


def test_a_slow_eager_forward_after_compile_is_a_first_visit_per_kv_length():
    """probes_1b.json (call 4): in the process that had run hf-graph, the first eager decode forwards over a
    DynamicCache took ~54 ms a step at every new KV length, 12.4 ms when the same lengths came again (the stage
    labelled gc_freeze, which came second: the freeze itself is not what changed it, call 5 shows the collector
    idle), and the next model in the same process read 11.8 ms from its first pass. bench's decode_forward_s is
    now timed in a second pass over the same lengths."""
    d = {v["variant"]: v["probes"] for v in json.loads((HERE / "probes_1b.json").read_text())["variants"]}
    first, again = d["default"][0]["decode_samples"], d["default"][1]["decode_samples"]
    assert min(first[1:]) > 50e-3 and max(again) < 15e-3
    assert max(d["defer"][0]["decode_samples"]) < 15e-3


def test_bench_all_plans_on_its_own_calibration():
    """Issue 3, on the final tree: `gpuscope bench all --json` (quick; now calibrating by default on a GPU) ran in
    111 s on one H200, 17 of 17 ok, and planned its four workloads on the TOML it wrote from its own micro ceilings
    and host passes (12.9 us per decode kernel, spread 8%): memory within 3.3%, prefill/step within 14%, decode
    -9.8% and -19.7% (tiny GPT-2: inside the validation's 20% for decode, outside the issue's 15%). The catalog on
    the same records: within 18.7%."""
    steps = (HERE / "steps.txt").read_text().splitlines()
    (line,) = [x for x in steps if x.startswith("bench_all_cal")]
    assert " rc=0 " in f" {line} " and float(line.split()[-1].rstrip("s")) < 300
    assert all(r["result"]["status"] == "ok" for r in CALL6)
    assert {r["case"]["kind"] for r in CALL6} == {"micro", "infer", "train"}
    assert "spread 8%" in (HERE / "bench_all_cal.stderr.txt").read_text()
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    hw = load_hardware(str(RUN_CAL))
    assert hw.is_calibrated and hw.measured["host_launch_s"] == pytest.approx(12.9e-6, rel=0.01)
    rows = [row for rec in CALL6 if rec["case"]["kind"] != "micro" for row in compare_record(rec, hw)]
    assert len(rows) == 16
    for row in rows:
        check_row(row, (row.case, row.metric), {})
    times = [r for r in rows if not r.metric.endswith("bytes")]
    assert sum(abs(r.error) <= 0.15 for r in times) == len(times) - 1


def test_gpt2_training_with_recompute_is_planned_within_15_percent_without_it_short():
    """Call 7 (doctor train, GPT-2 mb2 s128 amp-bf16, 5 steps, the bare run timed first): 58.7 ms a step with full
    recompute, 31.7 ms without; 1421 and 1049 kernels a step. Planned on the catalog H200 48.2 and 22.6 ms until
    session 9 (-18%, -29%); since the checkpoint is priced per layer and the per-call costs whole
    (roofline.TrainHost), 54.3 and 23.4 ms (-7%, -26%). Without recompute GPT-2 stays a known miss."""
    from gpuscope.estimate.train import estimate_train
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.models import load_model

    for name, rc, kernels, lo, hi in (("doctor_gpt2_full.json", "full", 1421, -0.15, 0.0),
                                      ("doctor_gpt2_none.json", "none", 1049, -0.30, -0.20)):
        p = json.loads((HERE / name).read_text())["profile"]
        bare = p["bare_s"] / p["steps"]
        est = estimate_train(load_model("gpt2"), load_hardware("h200"), micro_batch=2, seq=128, precision="amp-bf16",
                             optimizer="adamw", recompute=rc, fused=True).time["step_s"]
        assert p["kernels_per_step"] == kernels and p["case"]["recompute"] == rc
        assert lo < (est - bare) / bare < hi, (name, est, bare)
