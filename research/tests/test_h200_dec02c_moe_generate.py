"""Issue 26 items 4 and 3 on one H200, third set (research/results/2026-12-02-h200-c, moe_generate.md there): MoE
prefill kernel tables against estimate/moe.py (grouped_mm row units, dispatch kernels) and plain generate's host
per step by batch against the eager engine's host model (estimate/engines.py). Call 1:
``bash research/scripts/gpu_moe_generate.sh moe host``; call 2: ``bash research/scripts/gpu_moe_generate2.sh``."""

from __future__ import annotations

import json
import math
import statistics
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from gpuscope.estimate import moe as moemod
from gpuscope.estimate.infer import _timing, estimate_infer
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.hf_config import spec_from_config

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-12-02-h200-c"
H200 = load_hardware("h200")


def _doc(call: str, part: str) -> dict:
    """``<part>.json`` of one call: a loose file anywhere under the call's gpu_moe_generate* folders, or inside
    their archive."""
    base = HERE / call
    for path in sorted(base.glob(f"gpu_moe_generate*/**/{part}.json")):
        return json.loads(path.read_text())
    for tgz in sorted(base.glob("gpu_moe_generate*/**/gpu_moe_generate*.tgz")):
        with tarfile.open(tgz) as t:
            for name in t.getnames():
                if name.endswith(f"/{part}.json"):
                    return json.load(t.extractfile(name))
    pytest.skip(f"{call}/{part}.json is not in this checkout")


def _spec(cfg: dict, name: str):
    return spec_from_config(cfg, name=name, source="research/results/2026-12-02-h200-c")


# ---- item 3: plain generate's host per step by batch (call 1, Llama-3.1-8B at 16 layers) --------------------------

def _host_cases(call: str = "call1", part: str = "host") -> tuple[dict, list[dict]]:
    d = _doc(call, part)
    return d, [c for c in d["cases"] if "tpot_s" in c]


def test_no_host_op_grows_with_batch():
    """The record_shapes host tables at batch 1 and 16 (prompt 1,024): every op with 16+ calls a step costs the
    host the same self time within 0.8-1.25x (the masks, the DynamicCache's cat, SDPA's path, the GEMMs' dispatch
    alike), the tables' sums within 2%, and the profiled step within 2%."""
    _, cases = _host_cases()
    p1, p16 = cases[0]["profile"], cases[1]["profile"]
    assert (cases[0]["batch"], cases[1]["batch"]) == (1, 16)
    h1 = {r["name"]: r for r in p1["host_top"]}
    h16 = {r["name"]: r for r in p16["host_top"]}
    ratios = {n: h16[n]["per_step_us"] / h1[n]["per_step_us"] for n in h1
              if n in h16 and h1[n]["per_step_count"] >= 16}
    assert len(ratios) >= 25
    assert all(0.8 < r < 1.25 for r in ratios.values()), ratios
    for op in ("aten::cat", "aten::_cudnn_attention_forward", "aten::copy_", "aten::mm"):
        assert 0.85 < ratios[op] < 1.1
    s1, s16 = (sum(r["per_step_us"] for r in p["host_top"]) for p in (p1, p16))
    assert s16 == pytest.approx(s1, rel=0.02)
    assert p16["wall_s_per_step_profiled"] == pytest.approx(p1["wall_s_per_step_profiled"], rel=0.02)


def test_tpot_is_flat_over_batch_and_prompt_and_the_first_case_ran_slower():
    """Batch 1-16 x prompt 128-4,096 after the first case: every TPOT within 12% of their median (15.1-17.7 ms);
    the first case (batch 1, 1,024, the same as the third) at 1.39x the third: the host's level moving within one
    run, with nothing in the workload changing (its steps 16.5-24.5 ms)."""
    _, cases = _host_cases()
    rest = [c["tpot_s"] for c in cases[1:]]
    med = statistics.median(rest)
    assert all(abs(t / med - 1) < 0.12 for t in rest), rest
    first, same = cases[0], cases[2]
    assert (first["batch"], first["prompt"]) == (same["batch"], same["prompt"]) == (1, 1024)
    assert first["tpot_s"] > 1.3 * same["tpot_s"]
    steps = first["host_step_s"][1:]
    assert max(steps) > 1.4 * min(steps)


def _level_hw(m, case: dict):
    """The catalog H200 with its host cost per kernel set so that the plan of ``case`` is its TPOT (the host level
    of that run): host-bound decode = kernels x launch_s + forward_s + step_s (roofline.forward_time,
    engines.EngineModel.decode_step_s)."""
    t = _timing(m, H200, case["batch"], case["prompt"], case["gen"], "bf16", "bf16", "eager", 1, 2.0, False, False,
                True)
    kernels = sum(o.kernels * o.count for o in t.dec_ops)
    launch = (case["tpot_s"] - t.eng.forward_s - t.eng.step_s) / kernels
    return replace(H200, measured={"host_launch_s": launch}), launch


def test_the_plan_with_the_host_level_of_one_case_holds_at_other_batches_and_prompts():
    """The host level set on the third case (batch 1, 1,024: 22.4 us a planner kernel; the catalog's bare-metal
    host: 17.2) plans the seven other cases (batch 1-16, prompts 128-4,096, the issue's batch 8 x 2,048 among them;
    the ballast case too) within the decode target, 20% (as read -10.1% to +5.7%): the plan is flat in batch, as
    the host is; the GPU's 3.1-4.1 ms a step is far below it. The first case is the level moving (-28% against
    it), not a size: left out."""
    d, cases = _host_cases()
    m = _spec(d["config"], "llama-3.1-8b-16-layers")
    hw, launch = _level_hw(m, cases[2])
    assert 20e-6 < launch < 25e-6
    for c in cases[1:]:
        if c is cases[2]:
            continue
        est = estimate_infer(m, hw, batch=c["batch"], prompt=c["prompt"], gen=c["gen"], engine="eager")
        assert est.time["decode_s_per_token"] == pytest.approx(c["tpot_s"], rel=0.20), (c["batch"], c["prompt"])
        assert est.time["decode_gpu_s"] < 0.35 * c["tpot_s"]


def test_decode_gpu_time_grows_with_batch_as_planned():
    """The device side of the same steps (profiled kernels' busy time): 3.45 ms at batch 1 and 4.74 ms at batch 16
    (cache cat 0.27 -> 0.81 ms, SDPA 0.09 -> 0.39) against the plan's 3.12 and 4.09, within 15%."""
    d, cases = _host_cases()
    m = _spec(d["config"], "llama-3.1-8b-16-layers")
    for c in cases[:2]:
        est = estimate_infer(m, H200, batch=c["batch"], prompt=c["prompt"], gen=c["gen"], engine="eager")
        assert est.time["decode_gpu_s"] == pytest.approx(c["profile"]["busy_s_per_step"], rel=0.15)


# ---- item 4: MoE prefill (call 1: Mixtral-8x7B and Qwen1.5-MoE-A2.7B at 4 layers, 10 batch x prompt cases) -------

def _moe_cases(call: str = "call1"):
    """(model name, config, case) for every measured MoE case of a call."""
    d = _doc(call, "moe")
    return [(e["model"], e["config"], c) for e in d["models"] for c in e["cases"] if "forward_s_median" in c]


def _dims(cfg: dict) -> tuple[int, int, int, int]:
    """(hidden, expert width, experts, top-k) of a transformers MoE config."""
    return (cfg["hidden_size"], cfg.get("moe_intermediate_size") or cfg["intermediate_size"],
            cfg.get("num_local_experts") or cfg.get("num_experts") or cfg["n_routed_experts"],
            cfg["num_experts_per_tok"])


def _grouped_model_s(cfg: dict, rows_per_layer: list[list[int]]) -> float:
    """The grouped GEMMs' time from estimate/moe.py's row units over a known assignment: gate_up and down FLOPs on
    each expert's rows rounded up to the kernel's unit, at the catalog's bf16 GEMM rate."""
    h, w, _, _ = _dims(cfg)
    up = sum(moemod.measured_padded_rows(r, 2 * w) for r in rows_per_layer)
    down = sum(moemod.measured_padded_rows(r, h) for r in rows_per_layer)
    return 2.0 * h * w * (2 * up + down) / (H200.achievable_tflops("bf16") * 1e12)


def _balanced_rows(cfg: dict, tokens: int, layers: int) -> list[list[int]]:
    """The balanced router's assignment (research/scripts/gpu_moe_generate.BalancedRouting: token i -> experts
    (i k + j) mod E): T k / E rows an expert, the remainder one more."""
    _, _, e, k = _dims(cfg)
    s = tokens * k
    return [[s // e + (1 if i < s % e else 0) for i in range(e)]] * layers


def test_grouped_gemm_time_is_its_row_units_at_the_large_tile():
    """Every case whose experts average over 128 rows (torch._grouped_mm's 128x256 tiles on 2x1 clusters: 256-row
    units), Mixtral (8 of 14,336) and Qwen1.5-MoE (60 of 1,408) alike, with the random router's measured rows and
    with the balanced router: the profiled grouped-GEMM kernels' time is the row units' FLOPs at the catalog's bf16
    rate within 10% (18 points; as read -8% to +7%). No constant was set here: the unit is the kernel's tile x
    cluster (estimate/moe.py) and the rate the catalog's."""
    n = 0
    for _, cfg, c in _moe_cases():
        h, w, e, k = _dims(cfg)
        tokens = c["batch"] * c["prompt"]
        if moemod.row_unit(tokens * k, e, 2 * w) != moemod.LARGE_UNIT:
            continue
        rows = c["rows_per_expert"]
        measured = c["profile"]["groups_us"]["grouped_gemm"] / 1e6
        assert _grouped_model_s(cfg, rows) == pytest.approx(measured, rel=0.10), (cfg["model_type"], tokens)
        bal = c["balanced"]["profile"]["groups_us"]["grouped_gemm"] / 1e6
        assert _grouped_model_s(cfg, _balanced_rows(cfg, tokens, len(rows))) == pytest.approx(bal, rel=0.10)
        n += 2
    assert n == 18


def test_a_balanced_split_on_whole_units_pays_no_padding():
    """Mixtral at 1,024 tokens (b1 p1024, b4 p256, b8 p128): the balanced router gives each expert 256 rows, one
    unit, and its grouped GEMMs take 0.69x the random router's (whose 1.47-1.50 units an expert the planner's
    Binomial also expects: 1.49); the units' ratio says 0.67-0.68."""
    for name, cfg, c in _moe_cases():
        if name != "mixtral-8x7b" or c["batch"] * c["prompt"] != 1024:
            continue
        rnd = c["profile"]["groups_us"]["grouped_gemm"]
        bal = c["balanced"]["profile"]["groups_us"]["grouped_gemm"]
        units = (_grouped_model_s(cfg, _balanced_rows(cfg, 1024, 4)) / _grouped_model_s(cfg, c["rows_per_expert"]))
        assert bal / rnd == pytest.approx(units, rel=0.05)
        assert moemod.padded_rows(1024, 2, 8, 2 * 14336) / 2048 == pytest.approx(1.49, abs=0.01)


@pytest.mark.parametrize("model", ["mixtral-8x7b", "qwen1.5-moe-a2.7b"])
def test_prefill_gpu_time_within_target_at_the_large_tile(model):
    """The profiled forward's GPU busy time against the planner's prefill GPU time (catalog H200; the planner has no
    router: Binomial rows): within the prefill target, 15%, for every Mixtral case (-3.6% to -9.7%) and
    Qwen1.5-MoE at 4,096+ tokens (-9.8% to -12.0%). The issue's Mixtral b8 p512, 33% low before: -3.6%."""
    for name, cfg, c in _moe_cases():
        h, w, e, k = _dims(cfg)
        if name != model or moemod.row_unit(c["batch"] * c["prompt"] * k, e, 2 * w) != moemod.LARGE_UNIT:
            continue
        est = estimate_infer(_spec(cfg, name), H200, batch=c["batch"], prompt=c["prompt"], gen=2, engine="eager")
        assert est.time["prefill_gpu_s"] == pytest.approx(c["profile"]["busy_us"] / 1e6, rel=0.15), c["batch"]


# ---- call 2: independent checks at other sizes ----------------------------------------------------------------------

def test_full_8b_host_per_op_is_the_same_at_batch_8_and_1():
    """Llama-3.1-8B at its 32 layers, prompt 2,048: the record_shapes host tables of batch 8 and batch 1 hold the
    same per-op self time (29 ops with 16+ calls a step: 0.85-1.03x) and the same sum (30.75 vs 30.74 ms a
    profiled step); 1,542 kernels a step in both."""
    _, cases = _host_cases("call2", "host")
    b8, b1 = [c["profile"] for c in cases if "profile" in c]
    assert (cases[1]["batch"], cases[4]["batch"]) == (8, 1)
    h1 = {r["name"]: r for r in b1["host_top"]}
    h8 = {r["name"]: r for r in b8["host_top"]}
    ratios = [h8[n]["per_step_us"] / h1[n]["per_step_us"] for n in h1 if n in h8 and h1[n]["per_step_count"] >= 16]
    assert len(ratios) >= 25 and all(0.8 < r < 1.15 for r in ratios)
    assert sum(r["per_step_us"] for r in b8["host_top"]) == pytest.approx(
        sum(r["per_step_us"] for r in b1["host_top"]), rel=0.02)
    assert b8["kernels_per_step"] == b1["kernels_per_step"]


@pytest.mark.parametrize("part,name", [("host", "llama-3.1-8b"), ("host7b", "qwen2.5-7b")])
def test_full_depth_plan_with_the_level_of_the_first_case(part, name):
    """The host level set on each run's first case (batch 1, 1,024) plans its other cases' decode steps (median step,
    device events between generate's steps) within the decode target, 20%: Llama-3.1-8B (32 layers) batch 8 x
    2,048 +11.1%, 16 x 1,024 -6.5%, 4 x 2,048 -17.2%, 1 x 2,048 -19.0%, and the first case again -15.0% (the level
    moved 1.18x within the run with nothing changed: what bounds this check); Qwen2.5-7B (28 layers, another
    family) batch 8 x 2,048 -2.3%, the repeat +0.2%. Batch 8 x 2,048 is the issue's check; the faster of the two runs'
    steps came at batch 8."""
    d, cases = _host_cases("call2", part)
    m = _spec(d["config"], name)
    first = dict(cases[0], tpot_s=cases[0]["device_step_median_s"])
    hw, launch = _level_hw(m, first)
    assert 15e-6 < launch < 20e-6
    for c in cases[1:]:
        est = estimate_infer(m, hw, batch=c["batch"], prompt=c["prompt"], gen=c["gen"], engine="eager")
        assert est.time["decode_s_per_token"] == pytest.approx(c["device_step_median_s"], rel=0.20), c["batch"]
    repeat = cases[-1]
    assert (repeat["batch"], repeat["prompt"]) == (cases[0]["batch"], cases[0]["prompt"])


def test_generates_own_host_per_step_is_a_constant_of_the_model_config_not_of_batch():
    """Host time between one decode forward's exit and the next one's entry (generate's logits processors, stopping
    criteria, its ~53 kernels a step and bookkeeping), 15 cases of both calls, batch 1-16, prompts 128-4,096,
    16/28/32 layers: 1.18-1.40 ms (the planner's step_s: 0.4 ms, set on tiny models; not changed: raised to
    1.25 ms it broke 6 of their manifest rows)."""
    outs = []
    for call, part in (("call1", "host"), ("call2", "host"), ("call2", "host7b")):
        outs += [c["outside_forward_host_median_s"] for c in _host_cases(call, part)[1][1:]]
    assert len(outs) >= 13
    assert all(1.1e-3 < x < 1.5e-3 for x in outs), outs


def _case(call: str, model: str, batch: int, prompt: int):
    (hit,) = [(cfg, c) for n, cfg, c in _moe_cases(call) if n == model and (c["batch"], c["prompt"]) == (batch, prompt)]
    return hit


@pytest.mark.parametrize("model,batch,prompt,tol", [
    ("deepseek-v2-lite", 4, 1024, 0.10), ("deepseek-v2-lite", 8, 512, 0.10), ("deepseek-v2-lite", 1, 2048, 0.15),
    ("deepseek-v2-lite", 1, 512, 0.15), ("mixtral-8x7b", 4, 1024, 0.05), ("mixtral-8x7b", 1, 4096, 0.05),
    ("qwen1.5-moe-a2.7b", 2, 4096, 0.10), ("qwen1.5-moe-a2.7b", 1, 512, 0.16)])
def test_call2_prefill_gpu_time(model, batch, prompt, tol):
    """The profiled forward's GPU busy time at sizes the planner was not set on: DeepSeek-V2-Lite (1 dense + 3 MoE
    layers; MLA, 64 experts of 1,408, top-6, 2 shared) -5.9% / -6.0% at 4,096 tokens, -13.9% / -12.1% at 2,048 /
    512; Mixtral -0.7% / +0.2%; Qwen1.5-MoE -7.2% at 8,192 tokens, -15.2% at 512 (small tiles, weight-bound)."""
    cfg, c = _case("call2", model, batch, prompt)
    est = estimate_infer(_spec(cfg, model), H200, batch=batch, prompt=prompt, gen=2, engine="eager")
    assert est.time["prefill_gpu_s"] == pytest.approx(c["profile"]["busy_us"] / 1e6, rel=tol)


@pytest.mark.parametrize("call", ["call1", "call2"])
def test_fp32_routing_weights_as_priced(call):
    """The routed rows' weight multiply in fp32 (Mixtral, DeepSeek-V2: estimate/moe.FP32_ROUTING_FAMILIES), read
    from each profiled forward: its casting elementwise_kernel<128, 4> over (2 + 4) h bytes a routed row at the
    strided 1.45 TB/s within 10% (Mixtral -8% to +3%, DeepSeek -4% to +3%); Qwen1.5-MoE's router hands back bf16
    weights and runs none."""
    from gpuscope.estimate.moe import FP32_ROUTING_FAMILIES

    n = 0
    for name, cfg, c in _moe_cases(call):
        h, _, _, k = _dims(cfg)
        moe_layers = cfg["num_hidden_layers"] - cfg.get("first_k_dense_replace", 0)
        rows = [r for r in c["profile"]["kernels_top"]
                if "BinaryFunctor<float, float, float" in r["name"] and "elementwise_kernel<128, 4" in r["name"]]
        if _spec(cfg, name).family not in FP32_ROUTING_FAMILIES:
            assert not rows
            continue
        priced = 6.0 * h * c["batch"] * c["prompt"] * k * moe_layers / 1.45e12
        assert sum(r["us"] for r in rows) / 1e6 == pytest.approx(priced, rel=0.10)
        n += 1
    assert n >= 6


def test_small_tile_grouped_gemm_streams_each_units_weights():
    """Independent checks of GROUPED_STREAM_EFFICIENCY (set on call 1's Qwen1.5-MoE b1 p1024 balanced forward):
    at b1 p512 (DeepSeek-V2-Lite 48 rows an expert, Qwen1.5-MoE 34), random and balanced routers, the grouped
    GEMMs' time is their 128-row units' weights at 0.72 of the copy rate within 5% (as read -3% to +1%)."""
    bw = H200.achievable_bw_gbs() * 1e9
    for model in ("deepseek-v2-lite", "qwen1.5-moe-a2.7b"):
        cfg, c = _case("call2", model, 1, 512)
        h, w, e, k = _dims(cfg)
        assert moemod.row_unit(512 * k, e, 2 * w) == moemod.SMALL_UNIT == 128
        layers = len(c["rows_per_expert"])
        for rows, t in ((c["rows_per_expert"], c["profile"]["groups_us"]["grouped_gemm"]),
                        (_balanced_rows(cfg, 512, layers), c["balanced"]["profile"]["groups_us"]["grouped_gemm"])):
            units = sum(math.ceil(r / 128) for layer in rows for r in layer)
            model_s = units * 3 * h * w * 2 / (moemod.GROUPED_STREAM_EFFICIENCY * bw)
            assert model_s == pytest.approx(t / 1e6, rel=0.05), model


@pytest.mark.parametrize("model,batch,prompt", [("deepseek-v2-lite", 1, 2048), ("deepseek-v2-lite", 1, 512),
                                                ("qwen1.5-moe-a2.7b", 1, 512)])
def test_small_moe_prefill_is_host_bound_and_planned_short(model, batch, prompt):
    """Known, not modelled: a small MoE prefill is host-bound (forward within 15% of the host time until it returns,
    GPU busy under half of it), and the MoE prefill's host runs 21-36 us a kernel on this VM (the decode path of
    the same calls: 16-22), with the level climbing 1.6-1.9x over one run's cases (DeepSeek's attention blocks
    0.61 -> 1.16 ms a layer, its MoE blocks 0.90 -> 1.49); the plan's forward (max of GPU and host: its host at
    the catalog's 17.2 us a kernel) is 0.47-0.49 of the measured one, its TTFT 0.53-0.63. Bounded here so that it is
    seen if it gets worse or goes."""
    cfg, c = _case("call2", model, batch, prompt)
    fwd, host = c["forward_s_median"], c["host_enqueue_s_median"]
    assert host == pytest.approx(fwd, rel=0.15)
    assert c["profile"]["busy_us"] / 1e6 < 0.55 * fwd
    m = _spec(cfg, model)
    t = _timing(m, H200, batch, prompt, 2, "bf16", "bf16", "eager", 1, 2.0, False, False, True)
    planned = max(sum(o.gpu_s for o in t.pre_times), t.time["prefill_s"] - t.eng.step_s - t.eng.setup_s)
    assert 0.4 * fwd < planned < 0.6 * fwd


def test_the_issues_slow_steps_were_the_kv_lengths_its_warm_up_had_not_run():
    """2026-12-02-h200 call 4 (where item 3's 38-67% was read; gpu_decode_batch.py then warmed up with 4 tokens):
    the timed 32-token generate's steps 2-3 (KV lengths the warm-up had run) took 35.9 / 32.6 / 51.8 ms at batch
    1 / 4 / 16, every later step (a KV length new to the process) 34.5 / 53.3 / 55.7 ms more (medians; 62.9-117 ms).
    This session's runs warmed up at the timed length and read 15-31 ms steps flat in batch. A per-shape host cost
    (cuDNN SDPA building an execution graph for each new KV length: call 3's ``newlen`` part measures it apart) is
    the mechanism; ~21.5 us a kernel beside it (h200-gvisor-host.toml)."""
    path = HERE.parent / "2026-12-02-h200" / "call4" / "decode_batch.json"
    if not path.exists():
        pytest.skip("2026-12-02-h200/call4/decode_batch.json is not in this checkout")
    cases = [c for c in json.loads(path.read_text())["cases"] if c["engine"] == "hf-eager"]
    assert [c["batch"] for c in cases] == [1, 4, 16]
    for c in cases:
        steps = c["host_step_s"]
        seen, new = statistics.mean(steps[1:3]), statistics.median(steps[3:])
        assert new - seen > 0.030 and min(steps[3:]) > 1.2 * max(steps[1:3]), c["batch"]


# ---- call 3: the per-shape cost of new KV lengths, and the prefill's host level beside decode -----------------------

def test_each_new_kv_length_costs_a_cudnn_graph_build_on_the_host():
    """Call 3 ``newlen`` (Llama-3.1-8B at 16 layers, 1,024 tokens, after a 4-token warm-up): decode steps at KV lengths
    new to the process 91.2 / 66.8 / 61.9 ms (median, batch 1 / 4 / 16) against 26.2 / 14.3 / 17.4 ms for the same
    lengths again; the warm-up's own two lengths inside the first run as fast as seen ones; with cuDNN's SDPA backend
    off, new and seen lengths alike (24.2 / 16.9 / 14.8 against 24.2 / 14.8 / 16.7). A cuDNN execution-graph build
    per new shape, 45-65 ms a step on this host and not growing with batch: what made item 3's slow steps."""
    d = _doc("call3", "newlen")
    cases = [c for c in d["cases"] if "new_lengths_s" in c]
    assert [c["batch"] for c in cases] == [1, 4, 16]
    for c in cases:
        new, seen = c["new_lengths_median_from_index2_s"], c["seen_lengths_median_from_index2_s"]
        assert new - seen > 0.040, c["batch"]
        assert max(c["new_lengths_s"][:2]) < seen + 0.010  # the warm-up's lengths: no build
        off_new = c["no_cudnn_new_lengths_median_from_index2_s"]
        off_seen = c["no_cudnn_seen_lengths_median_from_index2_s"]
        assert off_new == pytest.approx(off_seen, rel=0.2) and off_new < 0.4 * new


def test_moe_prefill_host_a_kernel_is_the_dense_prefills_at_the_same_moment():
    """Call 3 ``hostmix`` (one process, 4 rounds, prompt 512, 4 layers): host time until the prefill returns over its
    profiled kernels, per round, for DeepSeek-V2-Lite, Qwen1.5-MoE and Mixtral against Llama-3.1-8B's: 0.99-1.24x
    (DeepSeek's first round 1.7x); Mixtral's decode step costs the same a kernel as its prefill (0.97-1.06). The MoE
    prefill has no host cost of its own: small MoE prefills are host-bound at the VM's level (22-31 us a kernel in
    these rounds, the catalog's 17.2). The other three models' decode steps grew their cache each call (a new KV
    length each: 41-62 ms, the cuDNN build of the test above) and are not a host level."""
    d = _doc("call3", "hostmix")
    by = {m["model"]: m for m in d["models"]}
    dense = by["llama-3.1-8b"]

    def per_kernel(m, r, kind):
        return m["rounds"][r][f"{kind}_host_median_s"] / m["kernels"][kind]

    for r in range(1, len(dense["rounds"])):
        ref = per_kernel(dense, r, "prefill")
        assert 20e-6 < ref < 30e-6
        for name in ("deepseek-v2-lite", "qwen1.5-moe-a2.7b", "mixtral-8x7b"):
            assert 0.85 < per_kernel(by[name], r, "prefill") / ref < 1.3, (name, r)
    mix = by["mixtral-8x7b"]
    for r in range(len(mix["rounds"])):
        assert per_kernel(mix, r, "prefill") == pytest.approx(per_kernel(mix, r, "decode"), rel=0.1)
    for name in ("llama-3.1-8b", "deepseek-v2-lite", "qwen1.5-moe-a2.7b"):
        assert min(r["decode_host_median_s"] for r in by[name]["rounds"]) > 0.035
