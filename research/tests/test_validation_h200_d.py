"""The fourth H200 session (research/results/2026-11-29-h200-d, README.md there): bf16 matmul against issue 3's 760 TFLOP/s
(sustained and on mamf-finder's terms), copy and `bench all` time, Mixtral's batched_mm decode at batch 8 and what
its prefill miss is made of, the doctor's slow-loader verdicts after the host_sync fix, and the training host model
against the tiny steps.

Targets (memory 5%, prefill/step 15%, decode 20%) and the known-miss rule: research/tests/validation_rows.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.explain.compare import compare_record, hardware_for, read_records
from validation_rows import check_row

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-11-29-h200-d"
RECORDS = read_records(HERE / "measurements.jsonl")
KNOWN_MISSES = {
    ("infer/mixtral-8x7b/b8-p128-g32-bf16", "prefill_s"):
        (0.50, "the random-weight router is unbalanced (max/mean rows per expert 1.14-1.67): torch._grouped_mm ran "
               "at 465/424 TFLOP/s with those groups against 699/648 with equal ones (moe_routing.json), plus ~16 ms "
               "of elementwise kernels on the routed rows and 20% host idle (doctor_mixtral_prefill.json)"),
    ("infer/tiny-llama/b2-p32-g8-fp32", "prefill_s"):
        (0.35, "a 32-token prefill of a 2-layer model is ~300 kernels of host time: 7.3 ms here, 5.9 ms in the "
               "first session's run of the same case"),
    ("infer/tiny-llama/b2-p32-g8-fp32", "decode_s_per_token"):
        (0.25, "host-bound: 3.18 ms here, 2.76 ms in the first session's run of the same case"),
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-gs-compile-fused", "prefill_s"):
        (0.35, "host-bound eager prefill of 128 tokens: TTFT samples 41.2, 36.8, 28.7 ms (the bare prefill forward "
               "25.9 ms; planned 25.8); the same case read 27-49 ms in session c"),
    ("infer/llama-3.2-1b/b1-p128-g3-bf16-gs-graph", "prefill_s"):
        (0.30, "check of the capture fix at gen 3; a 128-token eager prefill, host-bound (3 samples)"),
    ("infer/llama-3.2-1b/b1-p128-g3-bf16-gs-graph", "decode_s_per_token"):
        (0.40, "TPOT over 2 decode steps is the difference of two ~16 ms medians: noise, not a rate"),
    ("infer/llama-3.2-1b/b1-p128-g2-bf16-gs-compile", "decode_s_per_token"):
        (0.60, "TPOT over 1 decode step is the difference of two ~14 ms medians: noise, not a rate (the run "
               "checks the capture fix: at gen 2 it had crashed with a device-side assert)"),
    ("train/llama-3.2-1b/mb1-s128-amp-bf16-rc_none", "step_s"):
        (0.25, "host-bound (~2,000 kernels a step, ~13 ms of GPU work): 20 steps read 58.7-83.5 ms on this VM host, "
               "median 69.3 against 54.9 planned; the fastest is 6% above the plan"),
    ("train/gpt2/mb2-s128-amp-bf16-rc_full", "step_s"):
        (0.30, "host-bound with full recompute: 54.8-74.2 ms over 20 steps, median 66.2 against 48.2 planned "
               "(the recompute host cost was fitted on Llama layers; the planner had 23.6 ms before the fit)"),
    ("train/tiny_gpt2/mb2-s64-fp32-rc_full", "step_s"):
        (0.45, "the same case over 30 steps read 8.0 ms; over 3 steps 11.0 ms in call 3 (planned 11.2 ms since "
               "session 9, +1%; 9.3 ms before) and 9.5 ms in the first session: the host's spread on this VM"),
}


def _by(pred) -> list[dict]:
    return [r for r in RECORDS if pred(r["case"], r)]


def _matmul(argv_has: str) -> dict:
    (rec,) = _by(lambda c, r: c.get("bench") == "matmul" and c.get("dtype") == "bf16"
                 and argv_has in " ".join(r["provenance"].get("argv", [])) and "burst" in c)
    return rec["result"]


def test_the_set():
    kinds = [r["case"]["kind"] for r in RECORDS]
    assert len(RECORDS) == 47 and kinds.count("infer") == 6 and kinds.count("train") == 8
    assert all(r["result"]["status"] == "ok" for r in RECORDS)
    assert all(r["result"].get("device_name") == "NVIDIA H200" for r in RECORDS)


def test_bf16_matmul_reaches_760_sustained_and_achievable():
    """Issue 3: bf16 >= 760 TFLOP/s at the best shape (public mamf-finder: 794 on H100). Queued iterations at this
    GPU's one-wave shape sustain 807-811; mamf-finder v4's MAMF (bursts after an idle gap, median of the 5 fastest)
    reads 825-827 at the boost clock."""
    for argv in ("--shapes", "--thorough"):
        r = _matmul(argv)
        assert r["timing"] == "queued"
        assert r["tflops"] >= 760, (argv, r["tflops"])
        assert r["tflops_achievable"] >= r["tflops"] >= 760
        assert r["achievable_sm_clock_mhz_min"] == 1980  # every burst ran at boost
        for a in r["achievable"]:
            assert len(a["time_s_fastest"]) == 5 and a["iterations"] == 120
            m, n, k = a["shape"]
            assert a["tflops"] == pytest.approx(2 * m * n * k / a["time_s"] / 1e12)
    thorough = _matmul("--thorough")
    assert tuple(thorough["best_shape"]) in {(2816, 1536, 8192), (1536, 2816, 8192), (1536, 2816, 12288)}
    assert len(thorough["shapes"]) > 100


def test_one_synchronized_iteration_at_a_time_read_ten_percent_low():
    """The same shape, 2048x2048x13312: 720 TFLOP/s timed alone per iteration (call 1), 801 queued (call 2)."""
    (old,) = _by(lambda c, r: c.get("bench") == "matmul" and "burst" not in c)
    new = _matmul("--shapes")
    row = {tuple((x["m"], x["n"], x["k"])): x for x in new["shapes"]}[(2048, 2048, 13312)]
    old_row = {tuple((x["m"], x["n"], x["k"])): x for x in old["result"]["shapes"]}[(2048, 2048, 13312)]
    assert old_row["tflops"] < 760 < row["tflops"]
    assert 1.08 < row["tflops"] / old_row["tflops"] < 1.15


def test_fused_8b_decode_still_above_70_percent_with_ttft_in_the_kept_cache():
    """Issue 3 again after the TTFT fix (TTFT inside the full run's static cache, so TPOT = (E2E - TTFT) / (G - 1)
    no longer subtracts a cache build that E2E did not pay): Llama-3.1-8B fused, p128 g256, at >= 70% of copy."""
    (rec,) = _by(lambda c, r: c.get("model") == "llama-3.1-8b" and c.get("fuse_proj"))
    r = rec["result"]
    copy = max(x["result"]["gbs"] for x in _by(lambda c, _r: c.get("bench") == "memory" and c.get("op") == "copy"))
    assert r["weights_bytes"] / r["tpot_s"] / 1e9 / copy >= 0.70
    assert r["decode_weights_gbs"] == pytest.approx(r["weights_bytes"] / r["tpot_s"] / 1e9)


def test_gs_engines_decode_two_and_three_tokens():
    """The capture's warm-up steps used to run three positions past the current one: at gen 2 the cache overflowed
    (device-side assert, call 7). Fixed: gen 2 (gs-compile) and gen 3 (gs-graph) generate exactly that many."""
    for engine, gen in (("gs-compile", 2), ("gs-graph", 3)):
        (rec,) = _by(lambda c, r: c.get("engine") == engine and c.get("gen") == gen)
        assert rec["result"]["generated_tokens"] == gen


def test_copy_and_bench_all():
    copies = [r["result"]["gbs"] for r in _by(lambda c, r: c.get("bench") == "memory" and c.get("op") == "copy")]
    assert len(copies) == 3 and min(copies) >= 4000
    h2d = [r["result"]["gbs"] for r in _by(lambda c, r: c.get("bench") == "transfer" and c.get("op") == "h2d"
                                           and c.get("pinned"))]
    assert min(h2d) >= 50
    steps = (HERE / "steps.txt").read_text()
    (line,) = [x for x in steps.splitlines() if x.startswith("bench_all_quick")]
    assert float(line.split()[-1].rstrip("s")) < 300  # issue 3: bench all on one H200 under 5 minutes


@pytest.mark.parametrize("row", [pytest.param(row, id=f"{row.case}:{row.metric}") for rec in RECORDS
                                 if rec["case"]["kind"] in ("infer", "train")
                                 for row in compare_record(rec, hardware_for(rec["result"]["device_name"]))])
def test_estimate_vs_h200_fourth_session(row):
    check_row(row, (row.case, row.metric), KNOWN_MISSES)


def test_mixtral_batch8_decode_is_generates_batched_mm():
    """At batch 8 plain generate gathers 16 expert copies per layer and step: planned (from the batch-1 kernel
    table) 136 ms per token, measured 128.5; the bare decode forward (grouped_mm) of the same run is 2.8x faster."""
    (rec,) = _by(lambda c, r: c.get("model") == "mixtral-8x7b")
    r = rec["result"]
    assert r["tpot_s"] / r["decode_forward_s"] > 2.5
    (row,) = [x for x in compare_record(rec, hardware_for("NVIDIA H200")) if x.metric == "decode_s_per_token"]
    assert abs(row.error) < 0.10


def test_mixtral_prefill_miss_is_the_random_router():
    """The grouped expert GEMMs with equal groups run where the planner puts them; with the rows per expert the
    random-weight router produced they are ~1.5x slower, which is what the prefill profile shows."""
    from gpuscope.estimate.infer import estimate_infer
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.models import load_model

    rt = json.loads((HERE / "moe_routing.json").read_text())
    assert rt["layers"] == 32 and all(sum(c) == rt["routed_rows"] == 2048 for c in rt["rows_per_expert"])
    assert 1.1 < min(rt["imbalance_max_over_mean"]) and max(rt["imbalance_max_over_mean"]) < 1.7
    g = {x["name"]: x for x in rt["grouped_mm"]}
    equal_s = 32 * (g["gate_up"]["equal_s"] + g["down"]["equal_s"])
    routed_s = g["gate_up"]["routed_s_sum"] + g["down"]["routed_s_sum"]
    e = estimate_infer(load_model("mixtral-8x7b"), load_hardware("h200"), batch=1, prompt=1024, gen=1,
                       engine="eager", with_ops=True)
    planned = sum(o["gpu_s"] for o in e.ops if o["phase"] == "prefill" and o["name"] == "experts")
    assert planned == pytest.approx(equal_s, rel=0.10)
    assert 1.35 < routed_s / equal_s < 1.7
    prof = json.loads((HERE / "doctor_mixtral_prefill.json").read_text())["profile"]
    grouped = sum(o["self_s"] for o in prof["top_ops"] if "GroupProblemShape" in o["name"])
    assert grouped == pytest.approx(routed_s, rel=0.15)  # the profile's grouped GEMMs are the unbalanced ones
    assert prof["syncs"]["wait_s"] < 0.001  # not host-device syncs


@pytest.mark.parametrize("run", ["c"])
def test_doctor_names_the_loader_alone(run):
    """After the host_sync fix the slow loader's only finding with a speed-up is the data-loader stall, at the
    plain runs' 2.25x within 10%; the fixed loader's stall is low and nothing else fires."""
    slow = json.loads((HERE / f"doctor_loader_slow_{run}.json").read_text())
    fixed = json.loads((HERE / f"doctor_loader_fixed_{run}.json").read_text())
    top = [f for f in slow["findings"] if (f.get("speedup") or 0) > 1.05]
    assert [f["code"] for f in top] == ["dataloader_stall"]
    assert top[0]["speedup"] == pytest.approx(129252 / 57554, rel=0.10)
    codes = {f["code"]: f for f in fixed["findings"]}
    assert "host_sync" not in codes and "launch_bound" not in codes
    assert codes["dataloader_stall"]["severity"] == "low"
    assert slow["profile"]["syncs"]["recoverable_s"] < 0.05 < slow["profile"]["syncs"]["refill_s"]


def test_before_the_fix_host_sync_claimed_the_impossible():
    """Kept as the reason for the fix: the per-sync sum read more idle than the window held."""
    a = json.loads((HERE / "doctor_loader_slow_a.json").read_text())
    (f,) = [x for x in a["findings"] if x["code"] == "host_sync"]
    assert f["evidence"]["gpu_idle_after_syncs_s"] > a["profile"]["active_s"]


def test_training_host_fit_is_the_planners():
    """roofline.TrainHost is this file's fit, in units of the same call's decode launch cost (13.7 us)."""
    from gpuscope.estimate.roofline import TRAIN_HOST

    th = json.loads((HERE / "train_host.json").read_text())
    launch = th["decode_host"]["host_launch_s"]
    assert launch == pytest.approx(13.7e-6, rel=0.01)
    by = {(r["family"], r["precision"], r["recompute"]): r for r in th["train"]}

    def slope(rs, key):
        from statistics import fmean
        xs = [x for r in rs for x in r["layers"]]
        ys = [y for r in rs for y in r[key]]
        mx, my = fmean(xs), fmean(ys)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)

    pooled = [by[("llama", p, "none")] for p in ("amp-bf16", "bf16", "amp-fp16")]
    assert slope(pooled, "forward_s") / 42 / launch == pytest.approx(TRAIN_HOST.fwd, rel=0.02)
    assert slope(pooled, "backward_s") / 42 / launch == pytest.approx(TRAIN_HOST.bwd, rel=0.02)
    full = [by[("llama", "amp-bf16", "full")]]  # its extra per layer over the pooled no-recompute fit
    ckpt = slope(full, "forward_s") - slope(pooled, "forward_s")  # the checkpoint's own, per layer
    refwd = slope(full, "backward_s") - slope(pooled, "backward_s")  # the backward's re-forward, per kernel
    assert ckpt / launch == pytest.approx(TRAIN_HOST.ckpt_layer, rel=0.02)
    assert refwd / 42 / launch == pytest.approx(TRAIN_HOST.recompute, rel=0.02)
    # GPT-2 fp32 with full recompute, forward + backward a layer: 2.85 ms measured; priced as roofline.TrainHost
    # says (21 planner kernels a layer), 2.87 ms; the whole extra per kernel (before session 9), 2.43 ms
    g = by[("gpt2", "fp32", "full")]
    measured = g["forward_layer_s"] + g["backward_layer_s"]
    th = TRAIN_HOST
    now = launch * (21 * (th.fwd + th.bwd + th.recompute) + th.ckpt_layer)
    before = launch * 21 * (th.fwd + th.bwd + th.recompute + th.ckpt_layer / 42)
    assert measured == pytest.approx(2.85e-3, rel=0.01) and now == pytest.approx(measured, rel=0.02)
    assert before < 0.86 * measured


def test_the_h200_mixtral_routing_would_be_flagged():
    """The routing measured on the H200 (moe_routing.json) through the doctor's moe_imbalance rule: the median
    layer's skew (1.25) is above a uniform router's sampling noise for 2,048 rows over 8 experts (1.13)."""
    import statistics

    from gpuscope.explain.findings import moe_imbalance

    rt = json.loads((HERE / "moe_routing.json").read_text())
    imb = rt["imbalance_max_over_mean"]
    f = moe_imbalance({"moe_routing": {"layers": rt["layers"], "experts": rt["experts"], "rows_largest_call": 2048,
                                       "imbalance_median": statistics.median(imb), "imbalance_max": max(imb)}})
    assert f is not None and f.evidence["uniform_routing_noise"] < 1.15 < f.evidence["imbalance_median"]
