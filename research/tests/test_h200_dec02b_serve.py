"""`plan serve --engine transformers` against transformers 5.17's continuous batching on one H200, second day of runs
(research/results/2026-12-02-h200-b/serve.md): recomputed from the stored runs.

Targets (issue 21): output tokens/s and TPOT p50 within 15%, TTFT p50 within 25%.
- Llama-3.1-8B 1024 x 128/128 offline (call1/gpu_serve2): within them; its full-batch decode steps too.
- The arrival runs (Poisson 6 and 8 req/s, 200 x 512/128; a closed loop of 64, 192 x 512/128) timed out although the
  plan of the time said they fit. The closed loop's waves (64 requests prefilled together, then 127 decode steps) are
  visible in its NVML power samples: 21 s a wave where that plan had 12.4 s. The same miss showed in the offline
  runs' drains (20-960 requests decoding, some finishing every step): planned steps 13-49% short. Replanned with the
  cuDNN SDPA graph build of every step in series (research/results/2026-12-02-h200-c/serve.md): the arrival runs no
  longer fit their limits, the wave is 16.7 s, the drain steps 9-43% short (finishing requests' host work).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpuscope.estimate.serve import ServeRequest, plan_serve
from gpuscope.estimate.serve.api import prepare
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

RES = Path(__file__).resolve().parents[1] / "results"
B = RES / "2026-12-02-h200-b"
HW_FILE = RES / "2026-12-02-h200-c" / "h200-gvisor-host.toml"  # launches apart from cuDNN graph builds
N1024 = "call1/gpu_serve2/serve_8b_n1024_p128_g128.out"
TARGETS = {("throughput", "output_tokens_per_s"): 0.15, ("latency", "ttft_p50_s"): 0.25,
           ("latency", "tpot_p50_s"): 0.15}
REPORTED = {("throughput", "output_tokens_per_s"): -0.033, ("latency", "ttft_p50_s"): +0.001,
            ("latency", "tpot_p50_s"): +0.043}  # replanned: research/results/2026-12-02-h200-c/serve.md
TIMED_OUT = {  # run -> its arrivals, as bench serve ran them (seed 0)
    "call1/gpu_serve2/serve_8b_n200_p512_g128_rate6.out": dict(requests=200, prompt=512, gen=128, rate=6.0),
    "call2/gpu_serve3/serve_8b_n200_p512_g128_rate8.out": dict(requests=200, prompt=512, gen=128, rate=8.0),
    "call2/gpu_serve3/serve_8b_n192_p512_g128_c64.out": dict(requests=192, prompt=512, gen=128, concurrency=64),
}
LLAMA = load_model("llama-3.1-8b")


def _measurement(rel: str) -> dict:
    text = (B / rel).read_text()
    return json.loads(text[text.index("{"):])["measurements"][0]


@pytest.fixture(scope="module")
def hw():
    return load_hardware(HW_FILE)


def test_1024_requests_within_the_targets(hw):
    res = _measurement(N1024)["result"]
    assert res["status"] == "ok" and res["completed"] == 1024 and res["output_tokens"] == 1024 * 128
    assert res["attn_impl_cb"] == "paged|sdpa" and res["use_cuda_graph"] == "(False, False)"
    est = plan_serve(ServeRequest(LLAMA, 1024, 128, 128), hw).to_json()
    for (a, b), target in TARGETS.items():
        err = est[a][b] / res[a][b] - 1
        assert abs(err) < target, f"{b}: {err:+.1%}"
        assert err == pytest.approx(REPORTED[(a, b)], abs=0.005), f"{b}: {err:+.1%} (2026-12-02-h200-c/serve.md)"
    assert est["simulation"]["steps"] == res["steps"] == 145
    assert est["capacity"]["max_batched_tokens"] == res["max_batch_tokens"]


def _steps(res: dict) -> list[tuple[int, int, float, int]]:
    """(tokens, KV tokens read, seconds since the previous step, first tokens) of every engine step, from the
    requests' token times: the engine stamps each step's tokens together, once per step."""
    ev = []
    for r in res["request_records"]:
        t = r["sent_s"] + r["ttft_s"]
        ev.append((t, 0, r["prompt_tokens"]))
        for k, gap in enumerate(r["itl_s"]):
            t += gap
            ev.append((t, k + 1, r["prompt_tokens"]))
    ev.sort()
    groups: list[list] = []
    for e in ev:
        if groups and e[0] - groups[-1][-1][0] < 3e-3:
            groups[-1].append(e)
        else:
            groups.append([e])
    return [(len(b), sum(p + k for _, k, p in b), b[0][0] - a[0][0], sum(k == 0 for _, k, _ in b))
            for a, b in zip(groups, groups[1:])]


def test_1024_requests_full_batch_decode_steps(hw):
    """The 110 steps with all 1024 requests decoding (142k-253k KV tokens read): max(GPU, launches) had a median
    error of -0.7% (serve.md); with the cuDNN graph build in series and launches apart (2026-12-02-h200-c/serve.md)
    +8.0%, 74 of them within 10%, none beyond 13% (its two copy passes over the repeated K/V, measured at 16-64
    requests, may be lighter at 1024)."""
    step = prepare(ServeRequest(LLAMA, 1024, 128, 128), hw)[-1]
    full = [(kv, dt) for n, kv, dt, first in _steps(_measurement(N1024)["result"]) if n == 1024 and not first]
    assert len(full) >= 100
    errs = [step.step_s(1024, 1024, kv, kv, 1024, True) / dt - 1 for kv, dt in full]
    assert 0.05 < statistics.median(errs) < 0.11
    assert sum(abs(e) < 0.10 for e in errs) >= 0.6 * len(errs) and max(abs(e) for e in errs) < 0.15


def test_known_miss_the_drain_of_the_1024_request_run(hw):
    """Known miss: as the run drains (~60 requests finish every step), the steps of 58-834 requests take 18-49%
    longer than max(GPU, launches) planned (serve.md); 9-43% (2026-12-02-h200-c/serve.md: the finishing requests'
    host work is not modelled)."""
    step = prepare(ServeRequest(LLAMA, 1024, 128, 128), hw)[-1]
    drain = [(n, kv, dt) for n, kv, dt, first in _steps(_measurement(N1024)["result"]) if n < 1000 and not first]
    drain = [(n, kv, dt) for n, kv, dt in drain if 50 <= n <= 840]
    assert len(drain) >= 5
    errs = {n: step.step_s(n, n, kv, kv, n, True) / dt - 1 for n, kv, dt in drain}
    assert all(-0.50 < e < -0.05 for e in errs.values()), errs


@pytest.mark.parametrize("rel", list(TIMED_OUT))
def test_known_miss_arrival_runs_planned_to_fit_but_timed_out(rel, hw):
    """Each was stopped at its limit (the case's process, set-up included). This machine's set-up before the timed
    serving (imports, the 8B build, the engine's cache, 8 untimed requests) is the 1024-request run's wall less its
    serving: with max(GPU, launches) the plan's duration plus it fitted the limit (a miss); with the cuDNN graph
    build in series (2026-12-02-h200-c/serve.md) it no longer does, as the runs did not."""
    m = _measurement(rel)
    assert m["result"]["status"] == "timeout"
    ref = _measurement(N1024)
    setup = ref["wall_s"] - ref["result"]["duration_s"]
    assert 15 < setup < 25
    planned = plan_serve(ServeRequest(LLAMA, **TIMED_OUT[rel]), hw).to_json()["simulation"]["duration_s"]
    assert planned + setup > m["result"]["timeout_s"], f"{rel}: the plan says it fits"


def _bursts(samples: list[dict], watts: float = 500.0) -> list[float]:
    """Start times of the stretches above ``watts`` (the prefill of a wave: 64 x 512 tokens at full power)."""
    out, last = [], None
    for s in samples:
        if s["power_w"] > watts:
            if last is None or s["t_s"] - last > 1.0:
                out.append(s["t_s"])
            last = s["t_s"]
    return out


def test_known_miss_closed_loop_waves(hw):
    """The closed loop of 64 runs in waves (all 64 finish on one step and are replaced together): their prefill
    bursts in the NVML power samples are 21 s apart; the plan's wave (64 x 512/128 offline) was 12.4 s with
    max(GPU, launches), 16.7 s with the cuDNN graph build in series (2026-12-02-h200-c/serve.md)."""
    res = _measurement("call2/gpu_serve3/serve_8b_n192_p512_g128_c64.out")["result"]
    starts = _bursts(res["nvml_samples"])
    assert len(starts) == 3
    periods = [b - a for a, b in zip(starts, starts[1:])]
    assert all(20.0 < p < 22.0 for p in periods), periods
    wave = plan_serve(ServeRequest(LLAMA, 64, 512, 128), hw).to_json()["simulation"]["duration_s"]
    err = wave / (sum(periods) / len(periods)) - 1
    assert -0.27 < err < -0.17, f"{err:+.1%}"
