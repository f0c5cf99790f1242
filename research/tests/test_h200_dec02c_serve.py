"""`plan serve --engine transformers` against transformers 5.17's continuous batching on one H200, third set
(research/results/2026-12-02-h200-c/serve.md): the constants read back from the measurements that set them, and the
stored runs replanned.

Set by (each recomputed here from its source):
- profiles.TRANSFORMERS_HOST host_graph_build_s (42.6 ms) and the host's launch cost (21.5 us,
  2026-12-02-h200-c/h200-gvisor-host.toml): call2's trace of three CB decode steps (gpu_serve5 probe);
- step_time.SDPA_TILE_S (1.45 us) and REPEATED_KV_PASSES (2): call1's kernel profile of two decode workloads
  (gpu_serve4 prof);
- step_time.CUDNN_MASKED_SDPA_SPEEDUP (1 / 0.825): the prefill steps of the 1024-request run (2026-12-02-h200-b).
Independent checks: the Poisson runs (call1: 10 req/s, 128 x 512/128; call2: 4 req/s, 96 x 1024/128), the profiled
workloads' step walls, and the offline runs of the earlier sets (test_h200_dec02_serve.py, test_h200_dec02b_serve.py).
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
from pathlib import Path

import pytest

from gpuscope.estimate.serve import ServeRequest, plan_serve
from gpuscope.estimate.serve.api import prepare
from gpuscope.estimate.serve.profiles import TRANSFORMERS_HOST
from gpuscope.estimate.serve.step_time import (CUDNN_MASKED_SDPA_SPEEDUP, REPEATED_KV_PASSES, SDPA_KEY_TILE,
                                                SDPA_TILE_S, _interp)
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

RES = Path(__file__).resolve().parents[1] / "results"
C = RES / "2026-12-02-h200-c"
PROF = C / "call1/gpu_serve4/gpu_serve4/prof/prof.json"
PROBE = C / "call2/gpu_serve5/gpu_serve5/probe"
CUDNN = C / "call3/gpu_serve5/gpu_serve5_cudnn/cudnn/cudnn.json"
RATE10 = C / "call1/gpu_serve4/gpu_serve4/serve2/serve_8b_n128_p512_g128_rate10.out"
RATE4 = C / "call2/gpu_serve5/gpu_serve5/serve_8b_n96_p1024_g128_rate4.out"
N1024 = RES / "2026-12-02-h200-b/call1/gpu_serve2/serve_8b_n1024_p128_g128.out"
LLAMA = load_model("llama-3.1-8b")
KEYS = (("throughput", "output_tokens_per_s"), ("latency", "ttft_p50_s"), ("latency", "ttft_p99_s"),
        ("latency", "tpot_p50_s"))
# planned / measured - 1 (serve.md's tables), and the targets they are held to (issue 21: tok/s and TPOT 15%, TTFT
# p50 25% under arrivals as the -b set held them; TTFT p99 not a target)
REPORTED = {
    "rate10": (+0.068, -0.091, +0.010, -0.094),
    "rate4": (-0.025, -0.028, +0.164, +0.026),
}  # replanned with the masked SDPA's waves (step_time.sdpa_waves; research/results/2026-12-02-h200-d/serve.md):
# were +8.3/-18.5/-2.8/-12.2% and -1.3/-7.3/+2.6/-0.4%; rate4 before that with the finishing requests' host work


@pytest.fixture(scope="module")
def hw():
    return load_hardware(C / "h200-gvisor-host.toml")


def _result(path: Path) -> dict:
    text = path.read_text()
    return json.loads(text[text.index("{"):])["measurements"][0]["result"]


def _trace_steps() -> list[dict]:
    """Per traced step (split at the compute stream's long synchronisations): the longest stretch with no CUDA call,
    what follows it, the launches after the step's first cuDNN SDPA and the wait at the step's end."""
    ev = json.load(gzip.open(PROBE / "trace.json.gz"))["traceEvents"]
    kern = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    rt = sorted((e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")), key=lambda e: e["ts"])
    syncs = [e for e in rt if e["name"] == "cudaStreamSynchronize" and e["dur"] > 5000]
    bounds = [rt[0]["ts"]] + [s["ts"] + s["dur"] for s in syncs]
    out = []
    for a, b, sync in zip(bounds, bounds[1:], syncs):
        calls = [e for e in rt if a <= e["ts"] < b]
        gap, after = max(((c2["ts"] - c1["ts"] - c1["dur"], c2) for c1, c2 in zip(calls, calls[1:])),
                         key=lambda g: g[0])
        first = next(e for e in calls if kern.get(e["args"].get("correlation"), {}).get("name", "").startswith("cudnn"))
        launches = [e for e in calls if first["ts"] <= e["ts"] < sync["ts"] and e["args"].get("correlation") in kern]
        out.append({"gap_s": gap * 1e-6, "after": after["name"], "gap_end_to_sdpa_s": (first["ts"] - after["ts"]) * 1e-6,
                    "launch_s": (launches[-1]["ts"] - launches[0]["ts"]) / len(launches) * 1e-6,
                    "end_wait_s": sync["dur"] * 1e-6})
    return out


def test_graph_build_and_launch_cost_from_the_trace(hw):
    """Each traced step spends 37-49 ms with no CUDA call just before its first layer's cuDNN SDPA (the graph build
    for the step's new shape), then launches the forward's other kernels at 21.5-27.5 us each while the GPU runs
    behind: the step waits 15-24 ms for it at the end, so the host is not held back by the GPU."""
    steps = _trace_steps()
    assert len(steps) == 3
    for s in steps:
        assert s["after"] == "cudaMemsetAsync" and s["gap_end_to_sdpa_s"] < 2e-3  # the SDPA's memset, then the SDPA
        assert 0.035 < s["gap_s"] < 0.050
        assert s["end_wait_s"] > 0.010
    assert statistics.mean(s["gap_s"] for s in steps) == pytest.approx(TRANSFORMERS_HOST["host_graph_build_s"],
                                                                       rel=0.01)
    assert min(s["launch_s"] for s in steps) == pytest.approx(hw.measured["host_launch_s"], rel=0.01)
    # the older host file's 45 us a kernel (HF eager decode, batch 1, 1542 kernels, 69.46 ms a step) is one build
    # and 1542 launches at this cost, within 10%
    old = load_hardware(RES / "2026-12-02-h200/h200-gvisor-host.toml").measured["host_launch_s"]
    assert TRANSFORMERS_HOST["host_graph_build_s"] + 1542 * hw.measured["host_launch_s"] == pytest.approx(
        1542 * old, rel=0.10)


def _kernels_s(w: dict, pick) -> float:
    """Device seconds a step of the profiled kernels whose (name, count) ``pick`` accepts."""
    return sum(k["device_s"] for k in w["top"] if pick(k["name"], k["count"])) / w["profiled_steps"]


def test_sdpa_tile_and_copies_from_the_kernel_profile(hw):
    """The cuDNN SDPA kernel's device time per layer and 64-key tile is SDPA_TILE_S; the four elementwise kernels a
    layer as long as the repeated K or V (counted 4 x layers x steps) with the KV gathers and cache writes are the
    copies as modelled, index_select + repeat_kv + REPEATED_KV_PASSES - 1 more passes, within 10%."""
    d = json.loads(PROF.read_text())
    layers = d["layers"]
    tiles = []
    for w in d["workloads"]:
        step = prepare(ServeRequest(LLAMA, w["requests"], w["prompt"], w["gen"]), hw)[-1]
        kv, m = w["kv_median"] + w["requests"], w["requests"]
        sdpa = _kernels_s(w, lambda name, count: "sdpa" in name) / layers
        tiles.append(sdpa / math.ceil(kv / SDPA_KEY_TILE))
        copies = _kernels_s(w, lambda name, count: "vectorized_gather_kernel" in name or "index_copy_kernel" in name
                            or ("gpu_kernel_impl_nocast" in name and count == 4 * layers * w["profiled_steps"]))
        assert step.layers * step.attention_parts(m, kv, kv)[1] == pytest.approx(copies, rel=0.10)
    assert tiles[0] == pytest.approx(1.49e-6, rel=0.01) and tiles[1] == pytest.approx(1.40e-6, rel=0.01)
    assert statistics.mean(tiles) == pytest.approx(SDPA_TILE_S, rel=0.01)
    assert REPEATED_KV_PASSES == 2


def test_prefill_speedup_from_the_1024_runs_prefill_steps(hw):
    """Each prefill step of the 1024-request run (8128-8297 tokens): the attention time it leaves after the token-linear
    ops, the copies, the host loop and the graph build, over the planned attention kernel time."""
    from test_h200_dec02b_serve import _steps

    res = _result(N1024)
    step = prepare(ServeRequest(LLAMA, 1024, 128, 128), hw)[-1]
    e = step.engine
    ratios = []
    for n, kv, dt, first in _steps(res):
        tokens = (n - first) + 128 * first
        if first == 0 or tokens < 8000:
            continue
        main, copies = step.attention_parts(tokens, kv, kv)
        lin = _interp(step.xs, step.linear_s, tokens) + _interp(step.xs, step.head_s, n)
        loop = e.host_step_s + e.host_per_request_s * n + e.host_per_kv_token_s * (kv + tokens)
        # main holds the speedup already: undo it to read the factor
        ratios.append((dt - lin - step.layers * copies - loop - e.host_graph_build_s)
                      / (step.layers * main * CUDNN_MASKED_SDPA_SPEEDUP))
    assert len(ratios) == 16
    assert statistics.median(ratios) == pytest.approx(1 / CUDNN_MASKED_SDPA_SPEEDUP, abs=0.005)
    assert 0.75 < min(ratios) and max(ratios) < 0.92


@pytest.mark.parametrize("name,path,kw", [("rate10", RATE10, dict(requests=128, prompt=512, gen=128, rate=10.0)),
                                          ("rate4", RATE4, dict(requests=96, prompt=1024, gen=128, rate=4.0))])
def test_poisson_runs(name, path, kw, hw):
    res = _result(path)
    assert res["status"] == "ok" and res["completed"] == kw["requests"] and res["mode"] == "poisson"
    assert res["attn_impl_cb"] == "paged|sdpa" and res["use_cuda_graph"] == "(False, False)"
    est = plan_serve(ServeRequest(LLAMA, seed=0, **kw), hw).to_json()
    errs = [est[a][b] / res[a][b] - 1 for a, b in KEYS]
    for (a, b), err, rep in zip(KEYS, errs, REPORTED[name]):
        assert err == pytest.approx(rep, abs=0.005), f"{name} {b}: {err:+.1%}, serve.md says {rep:+.1%}"
    tok, ttft50, _, tpot = errs
    assert abs(tok) < 0.15 and abs(tpot) < 0.15 and abs(ttft50) < 0.25


def test_poisson_10_decode_steps(hw):
    """The 10 req/s run's decode-only steps, from the requests' token times: small batches (< 32 requests: launches
    and the graph build) within 10%, larger ones ~10% longer than planned (call2's machine: 4-6% shorter)."""
    from test_h200_dec02b_serve import _steps

    step = prepare(ServeRequest(LLAMA, 128, 512, 128), hw)[-1]
    small, large = [], []
    for n, kv, dt, first in _steps(_result(RATE10)):
        if first:
            continue
        (small if n < 32 else large).append(step.step_s(n, n, kv, kv, n, True) / dt - 1)
    assert len(small) > 20 and len(large) > 100
    assert abs(statistics.median(small)) < 0.10
    assert -0.15 < statistics.median(large) < -0.05


def test_profiled_workloads_step_walls(hw):
    """Known miss: the decode steps of the profile runs (64 requests at 33.5k KV tokens: 136 ms in call1, 129 ms in
    call2's probe; 16 at 33.0k: 111 ms) are planned at 108 / 104 / 108 ms: the graph builds of those runs grew from 37
    to ~70 ms over their decode steps (the probe's unprofiled steps after the traced ones are ~20 ms longer)."""
    d = json.loads(PROF.read_text())
    probe = json.loads((PROBE / "probe.json").read_text())
    runs = [(w["requests"], w["step_records"]) for w in d["workloads"]] + [(probe["requests"], probe["step_records"])]
    errs = []
    for n, recs in runs:
        dec = [r for r in recs if r.get("fwd_s") and r["q"] == r["requests"] == n]
        wall = statistics.median(r["prep_s"] + r["fwd_s"] + r["upd_s"] for r in dec)
        kv = statistics.median(r["kv"] + r["q"] for r in dec)
        step = prepare(ServeRequest(LLAMA, n, 512, 24), hw)[-1]
        errs.append(step.step_s(n, n, kv, kv, n, True) / wall - 1)
    assert errs[0] == pytest.approx(-0.205, abs=0.01) and errs[1] == pytest.approx(-0.062, abs=0.01)
    assert errs[2] == pytest.approx(-0.164, abs=0.01)


def test_call3_cudnn_off_has_no_graph_build(hw):
    """The same workload with torch's cuDNN SDPA on / off / on (call 3): on, each traced step has a host gap of
    44-68 ms (the build); off (the memory-efficient kernel) the longest is ~3 ms and the step shorter although its
    GPU time is longer; the first run's decode step is planned within 6%."""
    d = json.loads(CUDNN.read_text())
    on1, off, on2 = d["runs"]
    assert on1["cudnn_sdp"] and not off["cudnn_sdp"] and on2["cudnn_sdp"]
    assert all(r["finished"] == d["requests"] and r["decode_steps"] >= 10 for r in d["runs"])
    assert any("cudnn" in k for k in on1["attention_kernels"]) and any("fmha" in k for k in off["attention_kernels"])
    for r in (on1, on2):
        assert all(0.040 < g < 0.070 for g in r["longest_host_gaps_s"][:2])
    assert max(off["longest_host_gaps_s"]) < 0.005
    assert off["gpu_busy_s_per_step"] > on1["gpu_busy_s_per_step"] + 0.02
    assert off["wall_s_median"] < on1["wall_s_median"] - 0.01
    step = prepare(ServeRequest(LLAMA, d["requests"], d["prompt"], d["gen"]), hw)[-1]
    kv = on1["kv_median"] + d["requests"]
    n = d["requests"]
    assert step.step_s(n, n, kv, kv, n, True) / on1["wall_s_median"] - 1 == pytest.approx(-0.053, abs=0.01)


def test_known_miss_mixed_steps_of_the_4_per_s_run(hw):
    """Bound (serve.md): the 4 req/s run's mixed steps (1-4 prompts of 1024 tokens + 1-80 decodes) against the plan,
    each over this machine's offset on decode steps of about the same batch (their median measured / planned within
    8 requests). Before the masked SDPA's waves were planned (step_time.sdpa_waves, set by the 2026-12-02 d kernel
    profile of such steps) one prompt ran +5..+33% longer (median +13%); now one prompt median +5% (-1..+26%), two
    +8% (+3..+13%), four -3%: the wave count was the mechanism; the spread left is the host's."""
    from test_h200_dec02b_serve import _steps

    step = prepare(ServeRequest(LLAMA, 96, 1024, 128, rate=4.0, seed=0), hw)[-1]
    rows = _steps(_result(RATE4))
    dec = [(n, step.step_s(n, n, kv, kv, n, True) / dt) for n, kv, dt, first in rows if not first and dt < 2]
    by_prompts: dict[int, list[float]] = {}
    for n, kv, dt, first in rows:
        near = [r for m, r in dec if abs(m - (n - first)) <= 8]
        if not first or dt > 2 or len(near) < 3:
            continue
        d, p = n - first, 1024 * first
        plan = step.step_s(d + p, n, kv, kv - p + first * 1024 * 1025 / 2, n, False)
        by_prompts.setdefault(first, []).append(dt * statistics.median(near) / plan - 1)
    one, two, four = by_prompts[1], by_prompts[2], by_prompts[4]
    assert len(one) >= 50 and len(two) >= 8 and len(four) == 2
    assert 0.02 < statistics.median(one) < 0.08 and min(one) > -0.03 and max(one) < 0.30
    assert 0.05 < statistics.median(two) < 0.11
    assert all(abs(e) < 0.05 for e in four)
