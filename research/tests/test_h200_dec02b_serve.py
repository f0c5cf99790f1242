"""`plan serve --engine transformers` against transformers 5.17's continuous batching on one H200, second day of runs
(research/results/2026-12-02-h200-b/serve.md): recomputed from the stored runs.

Targets (issue 21): output tokens/s and TPOT p50 within 15%, TTFT p50 within 25%.
- Llama-3.1-8B 1024 x 128/128 offline (call1/gpu_serve2): within them; its full-batch decode steps too.
- The arrival runs (Poisson 6 and 8 req/s, 200 x 512/128; a closed loop of 64, 192 x 512/128) timed out although the
  plan of the time said they fit. The closed loop's waves (64 requests prefilled together, then 127 decode steps) are
  visible in its NVML power samples: 21 s a wave where that plan had 12.4 s. The same miss showed in the offline
  runs' drains (20-960 requests decoding, some finishing every step): planned steps 13-49% short. Replanned with the
  cuDNN SDPA graph build of every step in series (research/results/2026-12-02-h200-c/serve.md): the arrival runs no
  longer fit their limits, the wave is 16.8 s. The drain steps (5-43% short) set the finishing requests' host work
  (profiles.host_per_finish_s); the 2048/256 run's drain of 2026-12-02-h200 is its check.
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
REPORTED = {("throughput", "output_tokens_per_s"): -0.041, ("latency", "ttft_p50_s"): +0.001,
            ("latency", "tpot_p50_s"): +0.048}  # replanned: research/results/2026-12-02-h200-c/serve.md
# (-3.3% / +4.3% before the finishing requests' host work, 1024 x 0.87 ms: the full-batch steps already read +8%)
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


def _drain(res: dict) -> list[tuple[int, int, float, int]]:
    """(requests, KV tokens read, seconds, requests that finished in the step before) of the decode steps after the
    first finish: the finishing work follows a request's last token stamp, so it lengthens the next step."""
    ev = []
    for r in res["request_records"]:
        t, last = r["sent_s"] + r["ttft_s"], len(r["itl_s"])
        ev.append((t, 0, r["prompt_tokens"], last == 0))
        for k, gap in enumerate(r["itl_s"]):
            t += gap
            ev.append((t, k + 1, r["prompt_tokens"], k + 1 == last))
    ev.sort()
    groups: list[list] = []
    for e in ev:
        if groups and e[0] - groups[-1][-1][0] < 3e-3:
            groups[-1].append(e)
        else:
            groups.append([e])
    return [(len(b), sum(p + k for _, k, p, _ in b), b[0][0] - a[0][0], sum(f for *_, f in a))
            for a, b in zip(groups, groups[1:]) if not any(k == 0 for _, k, _, _ in b) and any(f for *_, f in a)]


def test_drain_of_the_1024_request_run_sets_the_finish_cost(hw):
    """The drain (17 decode steps of 2-960 requests, ~60 finished in the step before each) read 5-43% longer than
    the step model; the excess over the requests that finished before it, median 0.87 ms, is
    profiles.host_per_finish_s (this run set it). With it the steps read -13..+3%, median -0.1%."""
    step = prepare(ServeRequest(LLAMA, 1024, 128, 128), hw)[-1]
    drain = [d for d in _drain(_measurement(N1024)["result"]) if d[0] < 1000]
    assert len(drain) >= 15 and all(50 <= f <= 70 for *_, f in drain)
    per = statistics.median((dt - step.step_s(n, n, kv, kv, n, True)) / f for n, kv, dt, f in drain)
    assert per == pytest.approx(step.engine.host_per_finish_s, rel=0.05)
    errs = [(step.step_s(n, n, kv, kv, n, True) + f * step.engine.host_per_finish_s) / dt - 1 for n, kv, dt, f in drain]
    assert abs(statistics.median(errs)) < 0.02 and all(-0.15 < e < 0.05 for e in errs), errs


def test_check_the_drain_of_the_2048_run(hw):
    """Check (not fitted): the 64 x 2048/256 run of 2026-12-02-h200 drains 4 requests a step. Without the finish cost
    its drain steps read +1.3% median; with it +3.5% (+1.1..+14.9%, the last step of one request the worst): the
    excess there is -0.59 ms a finishing request, so 0.87 ms a request is not confirmed at 4 a step (serve.md)."""
    rel = RES / "2026-12-02-h200" / "call4/gpu_serve/serve_8b_n64_p2048_g256.out"
    text = rel.read_text()
    res = json.loads(text[text.index("{"):])["measurements"][0]["result"]
    step = prepare(ServeRequest(LLAMA, 64, 2048, 256), hw)[-1]
    drain = [d for d in _drain(res) if d[0] < 64]
    assert len(drain) >= 15 and all(f <= 4 for *_, f in drain)
    errs = [(step.step_s(n, n, kv, kv, n, True) + f * step.engine.host_per_finish_s) / dt - 1 for n, kv, dt, f in drain]
    assert 0.0 < statistics.median(errs) < 0.06 and all(-0.02 < e < 0.16 for e in errs), errs


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
