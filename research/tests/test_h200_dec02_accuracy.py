"""Issue 26 on one H200 (research/results/2026-12-02-h200, lowp_master_decode.md there): the 8-bit matmul bench
against a shape sweep (call3/micro_lowp.json), fp32 master weights at bf16 speed (call3/gpu_train_master/), and
decode at batch 1-16 with its kernel tables (call4/decode_batch.json), each held to the planner as it is now."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuscope.estimate import infer as infer_mod
from gpuscope.estimate.infer import estimate_infer
from gpuscope.estimate.roofline import ELEMENTWISE_BW_FRACTION
from gpuscope.estimate.train import estimate_train
from gpuscope.explain.recommend import recommend_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-12-02-h200"
H200 = load_hardware("h200")


def _json(rel: str):
    path = HERE / rel
    if not path.exists():
        pytest.skip(f"{rel} is not in this checkout")
    return json.loads(path.read_text())


# ---- item 5: bench micro's 8-bit figures against the sweep --------------------------------------------------------

def test_int8_bench_is_within_20_percent_of_the_best_swept_int8_gemm():
    d = _json("call3/micro_lowp.json")
    assert d["comparison"]["int8"]["ratio"] >= 0.8 and d["comparison"]["int8"]["ratio_achievable"] >= 0.8
    # the 128 TOPS of the issue was the row-major B: cuBLASLt's "NN" int8 problem, not the IMMA kernels
    assert d["sweep"]["int8-rowB"]["tflops"] < 0.2 * d["sweep"]["int8-colB"]["tflops"]


def _rates(sweep_entry: dict) -> dict:
    return {(r["m"], r["n"], r["k"]): r["tflops"] for r in sweep_entry["shapes"]}


def test_fp8_quick_shapes_now_hold_the_sweeps_best_with_either_accumulation():
    """The run's bench (fast accumulation off, no 2048x2048x13312) read 87% of the sweep's best; the quick set now
    has the sweep's best shape and reports fast accumulation, so on the sweep's own rates it reads the best with
    either accumulation. Unverified by a new bench run on the GPU; the bench and the sweep read the shapes they
    shared within 3%, which is what makes the sweep's rate at a shape the bench's."""
    torch = pytest.importorskip("torch")  # noqa: F841 (the bench modules import it)
    from gpuscope.measure.device.device import Device
    from gpuscope.measure.micro import matmul as mm
    from gpuscope.measure.micro.bench import micro_configs

    d = _json("call3/micro_lowp.json")
    assert d["comparison"]["fp8"]["ratio"] < 0.9  # what the run read (the failure this fixes)
    fast, slow = _rates(d["sweep"]["fp8-fast-accum"]), _rates(d["sweep"]["fp8"])
    quick = mm.matmul_shapes("quick", SimpleNamespace(type="cuda"), dtype="fp8")
    assert set(quick) <= set(fast)  # every quick shape was swept: a measured rate, not a guess
    assert max(fast[s] for s in quick) / max(fast.values()) >= 0.95
    assert max(slow[s] for s in quick) / max(slow.values()) >= 0.95
    # neither change alone clears the 5% by a margin: fast accumulation at the old shapes, the shape without it
    old = [s for s in quick if s != (2048, 2048, 13312)]
    assert max(fast[s] for s in old) / max(fast.values()) < 0.96
    assert slow[(2048, 2048, 13312)] / max(fast.values()) < 0.95
    bench = {m["result"]["dtype"]: m["result"] for m in d["bench_micro_quick"]["json"]["measurements"]
             if m["result"].get("bench") == "matmul"}["fp8"]
    assert bench["use_fast_accum"] is False
    for r in bench["shapes"]:
        assert r["tflops"] == pytest.approx(slow[(r["m"], r["n"], r["k"])], rel=0.03)
    (cfg,) = micro_configs(Device("cpu"), "quick", dtypes=["fp8"], benches=("matmul",))
    assert cfg["fast_accum"] is True and cfg["accum_check"] is True


# ---- item 6: fp32 master weights at bf16 speed --------------------------------------------------------------------

RUNS = {"train_master_mb2_ga8": (2, 2048, 8), "train_master_mb1_s4096_ga8": (1, 4096, 8),
        "train_master_mb2": (2, 2048, 1)}


def _train_run(name: str) -> tuple[dict, dict]:
    m = _json(f"call3/gpu_train_master/{name}.out")["measurements"][0]
    return m["result"], {r["metric"]: r for r in m["estimate"]["rows"]}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_master_weight_runs_against_the_plan(name):
    """bf16-master (bf16 compute weights, fp32 masters and fused AdamW on them): the plan now within 15% of the
    step and 5% of the peak, and the accumulating runs at >= 45% MFU (plain HF AMP read 32-33%)."""
    r, rows = _train_run(name)
    mb, seq, ga = RUNS[name]
    assert r["status"] == "ok" and r["precision"] == "bf16-master" and (r["micro_batch"], r["seq"]) == (mb, seq)
    est = estimate_train(load_model("llama-2-7b"), H200, micro_batch=mb, seq=seq, precision="bf16-master",
                         grad_accum=ga)
    assert est.time["step_s"] == pytest.approx(r["step_s"], rel=0.15)
    assert est.peak_bytes_per_gpu == pytest.approx(r["peak_bytes"], rel=0.05)
    if ga > 1:
        assert rows["mfu"]["measured"] >= 0.45


def test_tune_plan_ranks_the_measured_master_weight_configuration_first():
    stored = _json("call3/gpu_train_master/tune_plan.out")
    first = stored["ranked"][0]
    assert (first["precision"], first["micro_batch"], first["grad_accum"]) == ("bf16-master", 2, 8)
    assert "fp32 master" in first["numerics"] and all(c["precision"] != "bf16" for c in stored["ranked"])
    now = recommend_train(load_model("llama-2-7b"), H200, seq=2048, tokens_per_step=32768)
    assert (now[0].precision, now[0].micro_batch, now[0].grad_accum) == ("bf16-master", 2, 8)
    _, rows = _train_run("train_master_mb2_ga8")
    assert rows["mfu"]["measured"] >= 0.45


# ---- items 2-3: decode at batch 1-16 ------------------------------------------------------------------------------

def _cases() -> dict:
    return {(c["engine"], c["batch"]): c for c in _json("call4/decode_batch.json")["cases"]}


def _replay_passes(case: dict, layers: int = 32) -> tuple[int, int]:
    """(decode steps, forward passes) in a gs-graph profile: the graph is captured inside the profiled run, so its
    3 eager warm-up passes run the same kernels as the replays; the attention kernel runs once a layer a pass."""
    count = next(k["per_step_count"] for k in case["profile"]["kernels_top"] if "sdpa" in k["name"])
    steps = round(3 * layers / (count - layers))
    assert count * steps == pytest.approx(layers * (steps + 3), rel=1e-3)
    return steps, steps + 3


def _repeat_kv_copy_rate(case: dict, cache_len: int, m) -> float:
    """Bytes a second of the strided direct copy (repeat_kv: read K or V, write it for every query head)."""
    steps, passes = _replay_passes(case)
    k = next(k for k in case["profile"]["kernels_top"] if "elementwise_kernel<128, 4" in k["name"]
             and "direct_copy" in k["name"])
    per_copy = k["per_step_us"] * 1e-6 * steps / (passes * 2 * m.num_layers)
    kv = case["batch"] * m.num_kv_heads * cache_len * m.head_dim * 2
    return kv * (1 + m.num_heads // m.num_kv_heads) / per_copy


def test_graph_unfused_decode_is_the_repeat_kv_copy_at_its_measured_rate(monkeypatch):
    """gs-graph over a StaticCache: with a mask, transformers' SDPA path copies K and V out to every query head
    over the whole cache each layer and step, at 1.1 TB/s (batch 16 set infer.REPEAT_KV_BW_FRACTION; batch 1 is
    the check). The device time per replayed step against the plan's decode step (the profile's cache: prompt +
    its 8 tokens)."""
    m, cases = load_model("llama-3.1-8b"), _cases()
    rates = [_repeat_kv_copy_rate(cases[("gs-graph", b)], 2048 + 8, m) for b in (1, 16)]
    assert rates[1] == pytest.approx(infer_mod.REPEAT_KV_BW_FRACTION * H200.achievable_bw_gbs() * 1e9, rel=0.02)
    assert rates[0] == pytest.approx(rates[1], rel=0.1)
    for b in (1, 16):
        c = cases[("gs-graph", b)]
        steps, passes = _replay_passes(c)
        device = c["profile"]["busy_s_per_step"] * steps / passes
        est = estimate_infer(m, H200, batch=b, prompt=2048, gen=8, engine="graph-unfused")
        assert est.time["decode_s_per_token"] == pytest.approx(device, rel=0.15)
    monkeypatch.setattr(infer_mod, "REPEAT_KV_BW_FRACTION", ELEMENTWISE_BW_FRACTION)  # the copy at 63%
    c = cases[("gs-graph", 16)]
    steps, passes = _replay_passes(c)
    before = estimate_infer(m, H200, batch=16, prompt=2048, gen=8, engine="graph-unfused")
    assert before.time["decode_s_per_token"] < 0.7 * c["profile"]["busy_s_per_step"] * steps / passes


def test_eager_generate_at_batch_4_16_is_host_bound_and_its_device_time_is_planned():
    """Plain generate (DynamicCache): the GPU is busy 7-10 ms of a 68-101 ms step at every batch, with the same
    ~1,500 kernels a step; the plan's GPU time per step is within 20% of the busy time (the issue's decode bound:
    -10%, -16%, -2% at batch 1, 4, 16). The step is the host's:
    on this VM ~44 us a kernel at batch 1 (the planner's default host: 17.2 us), growing with the batch although
    the kernel count does not (lowp_master_decode.md says what that leaves open)."""
    m, cases = load_model("llama-3.1-8b"), _cases()
    for b in (1, 4, 16):
        c = cases[("hf-eager", b)]
        p = c["profile"]
        assert p["busy_s_per_step"] < 0.15 * c["tpot_s"]
        assert p["kernels_per_step"] == pytest.approx(1530, rel=0.02)
        est = estimate_infer(m, H200, batch=b, prompt=2048, gen=8, engine="eager")
        assert est.time["decode_gpu_s"] == pytest.approx(p["busy_s_per_step"], rel=0.2)
    per_kernel = [cases[("hf-eager", b)]["tpot_s"] / cases[("hf-eager", b)]["profile"]["kernels_per_step"]
                  for b in (1, 16)]
    assert 40e-6 < per_kernel[0] < 48e-6 and per_kernel[1] > 1.4 * per_kernel[0]


def test_the_repeat_kv_rate_holds_in_an_earlier_independent_profile():
    """research/results/2026-11-29-h200-c/doctor_gsgraph_8b.json: gs-graph Llama-3.1-8B, batch 1, a 2,112-slot cache
    (prompt 2048 + 64), 63 replays profiled (64 copies each): the same strided copy at the constant's rate within
    10%, on another day and cache length."""
    path = HERE.parent / "2026-11-29-h200-c" / "doctor_gsgraph_8b.json"
    prof = json.loads(path.read_text())["profile"]
    m = load_model("llama-3.1-8b")
    k = next(o for o in prof["top_ops"] if "elementwise_kernel<128, 4" in o["name"] and "direct_copy" in o["name"])
    assert k["count"] == 63 * 2 * m.num_layers
    kv = 1 * m.num_kv_heads * (2048 + 64) * m.head_dim * 2
    rate = kv * (1 + m.num_heads // m.num_kv_heads) / (k["self_s"] / k["count"])
    assert rate == pytest.approx(infer_mod.REPEAT_KV_BW_FRACTION * H200.achievable_bw_gbs() * 1e9, rel=0.1)
