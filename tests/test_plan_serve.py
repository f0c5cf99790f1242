"""plan serve: KV capacity by hand, the scheduler's invariants, monotonicity, the offline limit, the CLI contract and
its one-sentence errors (estimate/serve/, cli/plan_serve.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest

from gpuscope.estimate.serve import ServeRequest, plan_serve
from gpuscope.estimate.serve import kv_pages, quant
from gpuscope.estimate.serve.profiles import serve_engine
from gpuscope.estimate.serve.scheduler import Simulator
from gpuscope.estimate.serve.workload import make_requests
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.model import ModelSpec
from gpuscope.specs.models import load_model

TINY = ModelSpec(name="tiny", family="llama", hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
                 head_dim=64, intermediate_size=512, vocab_size=1000)
GIB = 2**30


class FlatStep:
    """A step model of fixed cost plus a cost per token (the scheduler's tests need no roofline)."""

    def __init__(self, fixed=1e-3, per_token=1e-6):
        self.fixed, self.per_token = fixed, per_token

    def step_s(self, tokens, rows, kv_read, pairs, requests, decode_only):
        return self.fixed + self.per_token * tokens


def sim(reqs, **kw):
    args = dict(num_blocks=1000, block_size=16, max_num_seqs=256, max_batched_tokens=512)
    args.update(kw)
    return Simulator(reqs, FlatStep(), **args)


# ---- capacity by hand ------------------------------------------------------------------------------------------

def test_kv_bytes_per_token_by_hand():
    # 2 (K, V) x 2 kv heads x 64 x 2 layers x 2 bytes = 1024 bytes; fp8 half; TP 2 splits the two heads
    assert kv_pages.kv_bytes_per_token(TINY, 2.0) == 1024
    assert kv_pages.kv_bytes_per_token(TINY, 1.0) == 512
    assert kv_pages.kv_bytes_per_token(TINY, 2.0, tp=2) == 512


def test_vllm_blocks_by_hand():
    hw = SimpleNamespace(device_total_bytes=10 * GIB, name="fake", key="fake")
    eng = serve_engine("vllm", hw)  # < 70 GiB: 2048 tokens, 256 sequences
    assert (eng.max_batched_tokens, eng.max_num_seqs, eng.block_size) == (2048, 256, 16)
    plan = kv_pages.plan_kv(TINY, hw, eng, weights=1 * GIB, kv_b=2.0, act_b=2.0, tp=1, seq_tokens=100)
    # activations: the largest prefill peak of 2048 tokens (MLP: T x (2h + 3 I) x 2 bytes) + 256 x V x 4 logits
    acts = 2048 * (2 * 256 + 3 * 512) * 2 + 256 * 1000 * 4
    assert plan.activation_bytes == acts
    budget = 0.9 * 10 * GIB - 1 * GIB - acts - 1.27e9
    assert plan.num_blocks == int(budget // (16 * 1024))
    assert plan.kv_cache_bytes == plan.num_blocks * 16 * 1024
    assert plan.max_sequences(100) == plan.num_blocks // 7  # ceil(100 / 16) = 7 blocks a sequence


def test_transformers_pages_by_hand():
    """transformers 5.17's polynomial, written out for the tiny model under paged|sdpa (one mask, sync IO)."""
    hw = SimpleNamespace(device_total_bytes=4 * GIB, name="fake", key="fake")
    eng = serve_engine("transformers", hw, requests=64)
    assert eng.max_num_seqs == 64 and eng.block_size == 256
    w = 0.5 * GIB
    plan = kv_pages.plan_kv(TINY, hw, eng, weights=w, kv_b=2.0, act_b=2.0, tp=1, seq_tokens=100)
    avail = math.floor((4 * GIB - 1.27e9 - w) * 0.9)
    page = 64 * 2
    io = 7 * 4 + 4 + 0 + 8 + 8
    c_n = 2 * 2 * page * 2 + 8
    peaks = [(256 * 2 + 1000 * 4 + io, c_n), (2 * (256 + 4 * 64 + 2 * page) + io, 2 * page * 2 + c_n)]
    m = 8192  # the memory bound (10% of the cache per batch) is far above the default here
    pages = min(math.floor((avail - cm * m - 2 * m * m) / (cn + 2 * m)) for cm, cn in peaks)
    assert plan.max_batched_tokens == m
    assert plan.num_blocks == pages // 256
    assert plan.bytes_per_token == 1024


def test_quant_bits():
    assert quant.weight_format("int4-awq").bits == pytest.approx(4.15625)
    assert quant.weight_format("nf4").bits == pytest.approx(4.127, abs=1e-3)  # QLoRA: 4 + 0.127 bits
    assert quant.weight_format("q8_0").bits == 8.5 and quant.weight_format("q4_k_m").bits == 4.84
    assert quant.weight_format("int4-gptq").bytes_per_weight(4096, 4096) == pytest.approx(0.5 + 2.5 / 128 + 4 / 4096)
    m = load_model("llama-3.1-8b")
    bf16, fp8, awq = (quant.weight_bytes(m, quant.weight_format(d)) for d in ("bf16", "fp8", "int4-awq"))
    assert bf16 == pytest.approx(2 * 8.03e9, rel=0.01)
    assert awq < fp8 < bf16
    assert quant.weight_bytes(m, quant.weight_format("bf16"), tp=2) < 0.51 * bf16
    # bitsandbytes dequantizes a batch's NF4 weight to bf16 before the GEMM: more bytes moved than bf16's 2
    assert quant.linear_bytes_per_weight(m, quant.weight_format("nf4")) > 4
    assert quant.linear_bytes_per_weight(m, quant.weight_format("int4-awq")) < 0.53


# ---- scheduler invariants ----------------------------------------------------------------------------------

def test_every_request_finishes_and_tokens_are_conserved():
    reqs = make_requests(60, 40, 30, seed=3, prompt_dist="uniform", prompt_spread=0.5, gen_dist="normal",
                         gen_spread=0.3)
    res = sim(reqs).run()
    assert all(s.finish_s is not None and s.generated == s.req.out for s in res.seqs)
    assert res.preemptions == 0
    # each request's first token comes from its prefill step, the rest from decode steps
    assert sum(w for _, w in res.itl) == sum(r.out - 1 for r in reqs)
    assert all(s.first_s <= s.finish_s for s in res.seqs)


def test_blocks_never_exceed_capacity_and_preemption_when_they_would():
    reqs = make_requests(12, 30, 60, seed=1)
    s = sim(reqs, num_blocks=20, block_size=8)  # 90 tokens = 12 blocks a request: about 1.7 fit at the end
    res = s.run()
    assert res.peak_blocks <= 20
    assert s.free == 20  # everything released
    assert res.preemptions > 0
    assert all(x.finish_s is not None and x.generated == x.req.out for x in res.seqs)


def test_reserve_full_never_preempts():
    reqs = make_requests(12, 30, 60, seed=1)
    res = sim(reqs, num_blocks=20, block_size=8, reserve_full=True).run()
    assert res.preemptions == 0 and res.peak_running == 1


def test_chunked_prefill_respects_the_token_budget():
    reqs = make_requests(1, 1000, 2)
    res = sim(reqs, max_batched_tokens=256).run()
    assert res.steps == 4 + 1  # ceil(1000 / 256) prefill steps, then one decode step
    assert res.seqs[0].first_s == pytest.approx(4 * 1e-3 + 1000 * 1e-6)


def test_concurrency_keeps_at_most_c_in_flight():
    res = sim(make_requests(40, 20, 10), concurrency=4).run()
    assert res.peak_running <= 4
    assert all(s.finish_s is not None for s in res.seqs)


def test_closed_loop_ttft_counts_from_each_send():
    """vLLM's --max-concurrency starts a request's clock when its client sends it, on the finish that freed its
    slot, not at t = 0: with 1 client, every TTFT is one request's prefill, and request k is sent at k-1's finish."""
    res = sim(make_requests(6, 20, 10), concurrency=1).run()
    ttft = [s.first_s - s.req.arrival_s for s in res.seqs]
    assert ttft == pytest.approx([ttft[0]] * 6)
    assert [s.req.arrival_s for s in res.seqs[1:]] == pytest.approx([s.finish_s for s in res.seqs[:-1]])


# ---- the estimate ----------------------------------------------------------------------------------------------

H200 = load_hardware("h200")
LLAMA = load_model("llama-3.1-8b")


def test_more_rate_more_ttft():
    ttft = [plan_serve(ServeRequest(LLAMA, 300, 512, 128, rate=r, engine="vllm"), H200).latency["ttft_p50_s"]
            for r in (2.0, 20.0, 80.0)]
    assert ttft[0] < ttft[1] < ttft[2]


def test_offline_reduces_to_batched_decode():
    """N requests that prefill in one step and fit the cache: TTFT is that step, TPOT the decode step at the mean
    context."""
    from gpuscope.estimate.serve.api import prepare

    r = ServeRequest(LLAMA, 16, 256, 64, engine="vllm")
    eng, fmt, kvd, kv, step = prepare(r, H200)
    est = plan_serve(r, H200)
    first = step.step_s(16 * 256, 16, 16 * 256, 16 * 256 * 257 / 2, 16, decode_only=False)
    assert est.latency["ttft_p50_s"] == pytest.approx(first, rel=1e-9)
    mid = 16 * (256 + 1 + 62 / 2)  # KV read at the mean decode step
    assert est.latency["tpot_p50_s"] == pytest.approx(step.step_s(16, 16, mid, mid, 16, True), rel=0.01)
    assert est.throughput["output_tokens_per_s"] == pytest.approx(16 * 64 / est.latency["e2e_p50_s"], rel=1e-6)


def test_goodput_and_cost():
    est = plan_serve(ServeRequest(LLAMA, 200, 256, 64, rate=20.0, engine="vllm", slo_ttft=0.2, slo_tpot=0.05),
                     H200).to_json()
    g = est["goodput"]
    assert 0 <= g["fraction_meeting_slo"] <= 1
    assert g["requests_per_s"] <= est["throughput"]["requests_per_s"] + 1e-12
    c = est["cost"]
    if c["usd_per_gpu_hour"]:
        expect = c["usd_per_gpu_hour"] / (est["throughput"]["output_tokens_per_s"] * 3600) * 1e6
        assert c["usd_per_m_output_tokens"] == pytest.approx(expect)


def test_fp8_kv_doubles_capacity():
    a = plan_serve(ServeRequest(LLAMA, 8, 1024, 32, engine="vllm"), H200).capacity["kv_cache_tokens"]
    b = plan_serve(ServeRequest(LLAMA, 8, 1024, 32, engine="vllm", kv_dtype="fp8"), H200).capacity["kv_cache_tokens"]
    assert b == pytest.approx(2 * a, rel=0.01)


def test_tp_shards_weights_and_kv():
    one = plan_serve(ServeRequest(LLAMA, 8, 512, 32, engine="vllm"), H200).memory
    two = plan_serve(ServeRequest(LLAMA, 8, 512, 32, engine="vllm", tp=2), H200).memory
    assert two["weights_bytes"] < 0.55 * one["weights_bytes"]
    assert two["kv_bytes_per_token"] == one["kv_bytes_per_token"] / 2


def test_a_thousand_requests_simulate_quickly():
    """Decode stretches are skipped: 1024 requests take few simulator iterations (steps counted, not timed)."""
    est = plan_serve(ServeRequest(LLAMA, 1024, 128, 128, engine="transformers"), H200)
    assert est.simulation["steps"] < 1024 * 2


# ---- CLI ----------------------------------------------------------------------------------------------------

def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuscope", "plan", "serve", *args], capture_output=True,
                          text=True, timeout=60)


BASE = ("--model", "llama-3.1-8b", "--gpu", "h200", "--requests", "64", "--prompt", "512", "--gen", "64")


def test_cli_json_contract():
    r = run(*BASE, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuscope.estimate/1" and d["kind"] == "serve"
    for section, key in (("throughput", "output_tokens_per_s"), ("latency", "ttft_p50_s"), ("latency", "ttft_p99_s"),
                         ("latency", "tpot_p50_s"), ("latency", "tpot_p99_s"),
                         ("capacity", "max_concurrent_sequences"), ("memory", "kv_cache_bytes")):
        assert d[section][key] > 0, (section, key)


@pytest.mark.parametrize("extra, word", [
    (("--prompt", "-5"), "--prompt"),
    (("--rate", "2", "--concurrency", "4"), "exclusive"),
    (("--dtype", "int3"), "--dtype"),
    (("--model", "no-such-model"), "no-such-model"),
    (("--gpu", "no-such-gpu"), "no-such-gpu"),
    (("--engine", "tgi"), "--engine"),
    (("--rate", "0"), "--rate"),
])
def test_cli_bad_input_is_one_sentence(extra, word):
    r = run(*BASE, *extra, "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert word in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


class AffineStep(FlatStep):
    """Step time affine in the KV read, like the attention terms of step_time.py."""

    def step_s(self, tokens, rows, kv_read, pairs, requests, decode_only):
        return 1e-3 + 2e-6 * tokens + 3e-8 * kv_read


@pytest.mark.parametrize("kw", [{}, {"rate": 40.0}, {"concurrency": 5}])
def test_skipping_decode_stretches_changes_nothing(kw):
    """A stretch of k decode steps moved at once gives the times of k single steps (the step time is affine in the
    context, so the mean-context step times k is exact)."""
    rate = kw.get("rate")
    reqs = lambda: make_requests(40, 50, 40, seed=5, rate=rate, gen_dist="uniform", gen_spread=0.5)
    args = dict(num_blocks=400, block_size=16, max_num_seqs=64, max_batched_tokens=256,
                concurrency=kw.get("concurrency"))
    fast = Simulator(reqs(), AffineStep(), **args).run()
    slow = Simulator(reqs(), AffineStep(), max_skip=1, **args).run()
    assert fast.steps == slow.steps
    for a, b in zip(fast.seqs, slow.seqs):
        assert a.first_s == pytest.approx(b.first_s, rel=1e-9, abs=1e-12)
        assert a.finish_s == pytest.approx(b.finish_s, rel=1e-9, abs=1e-12)


def test_curve_spans_the_offline_capacity():
    est = plan_serve(ServeRequest(LLAMA, 300, 512, 128, rate=5.0, engine="vllm", curve=True), H200)
    offline = plan_serve(ServeRequest(LLAMA, 300, 512, 128, engine="vllm"), H200).throughput["requests_per_s"]
    rates = [p["rate_requests_per_s"] for p in est.curve]
    assert rates[0] == pytest.approx(0.25 * offline) and rates[-1] == pytest.approx(1.25 * offline)
    ttft = [p["ttft_p50_s"] for p in est.curve]
    assert ttft == sorted(ttft) and ttft[-1] > ttft[0]


def test_sdpa_decode_step_grows_with_kv_layers_not_with_queries():
    """transformers paged|sdpa at decode: the masked SDPA's blocks (ceil(M/64) x heads) are fewer than the SMs, so
    attention lasts ceil(N_k/64) tiles of one block a layer, whatever M; a prefill of 8192 queries is
    throughput-bound instead (step_time.SDPA_TILE_S)."""
    from gpuscope.estimate.serve.api import prepare
    from gpuscope.estimate.serve.step_time import SDPA_KEY_TILE, SDPA_TILE_S

    hw = load_hardware("h200")
    step8 = prepare(ServeRequest(load_model("llama-3.1-8b"), 256, 512, 128), hw)[-1]
    step32 = prepare(ServeRequest(load_model("qwen2.5-32b"), 128, 512, 128), hw)[-1]
    kv = 147_456
    at64, at256 = step8.attention_s(64, kv, kv), step8.attention_s(256, kv, kv)
    assert at256 == pytest.approx(at64, rel=0.05)  # 32 and 128 blocks: one wave of lone blocks either way
    floor = step8.layers * math.ceil(kv / SDPA_KEY_TILE) * SDPA_TILE_S
    assert floor < at256 < 2.5 * floor  # the floor and the KV copies (about as long: step_time.REPEATED_KV_PASSES)
    assert step8.attention_s(256, 2 * kv, 2 * kv) == pytest.approx(2 * at256, rel=0.05)
    # the same KV token-layers (147k x 32 against 74k x 64) take about the same attention time
    assert step32.attention_s(128, kv // 2, kv // 2) == pytest.approx(at256, rel=0.1)
    # a prefill chunk of 8192 queries: far above the floor (the kernel's throughput)
    assert step8.attention_s(8192, 8192 + kv, kv) > 3 * step8.layers * math.ceil((8192 + kv) / 64) * SDPA_TILE_S
