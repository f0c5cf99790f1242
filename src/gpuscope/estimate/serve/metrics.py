"""Serving metrics with vLLM's benchmark definitions (benchmarks/benchmark_serving.py, ``calculate_metrics``):

- TTFT = first token time - request send time; E2E = last token time - send time;
- TPOT = (E2E - TTFT) / (output tokens - 1), per request with more than one output token;
- ITL = the gaps between consecutive tokens of a request, pooled over all requests (here each step's length,
  weighted by the tokens it emitted);
- output throughput = all output tokens / benchmark duration (first send to last token); request throughput alike;
- goodput = requests that meet every SLO given (TTFT <= slo_ttft, TPOT <= slo_tpot) per second of the duration;
- percentiles interpolate linearly between order statistics (numpy.percentile's default).
Cost (the prices `gpuscope compare` uses, specs/prices.toml): rented, the cloud GPU-hour price x GPUs / output tokens
per hour; owned, estimate/cost.py's amortised purchase + energy at the busy power (TDP; PUE and $/kWh defaults) over
the tokens of a year at that throughput.
"""

from __future__ import annotations

import math

PCTS = (50, 90, 99)


def percentile(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    v = sorted(xs)
    k = (len(v) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def weighted_percentile(pairs: list[tuple[float, float]], p: float) -> float | None:
    """Percentile of values each repeated ``weight`` times (ITL from per-step gaps)."""
    pairs = sorted((v, w) for v, w in pairs if w > 0)
    total = sum(w for _, w in pairs)
    if not total:
        return None
    goal, acc = p / 100.0 * total, 0.0
    for v, w in pairs:
        acc += w
        if acc >= goal:
            return v
    return pairs[-1][0]


def _stats(name: str, xs: list[float]) -> dict:
    out = {f"{name}_mean_s": (sum(xs) / len(xs)) if xs else None}
    out |= {f"{name}_p{p}_s": percentile(xs, p) for p in PCTS}
    return out


def summarize(seqs, duration_s: float, itl: list, slo_ttft: float | None = None,
              slo_tpot: float | None = None) -> dict:
    ttft = [s.first_s - s.req.arrival_s for s in seqs]
    e2e = [s.finish_s - s.req.arrival_s for s in seqs]
    tpot = [(e - t) / (s.req.out - 1) for s, t, e in zip(seqs, ttft, e2e) if s.req.out > 1]
    start = min(s.req.arrival_s for s in seqs)
    dur = max(s.finish_s for s in seqs) - start if seqs else 0.0
    out_tokens = sum(s.req.out for s in seqs)
    lat = _stats("ttft", ttft) | _stats("tpot", tpot) | _stats("e2e", e2e)
    lat |= {f"itl_p{p}_s": weighted_percentile(itl, p) for p in PCTS}
    good = [s for s, t, e in zip(seqs, ttft, e2e)
            if (slo_ttft is None or t <= slo_ttft)
            and (slo_tpot is None or s.req.out <= 1 or (e - t) / (s.req.out - 1) <= slo_tpot)]
    thr = {
        "output_tokens_per_s": out_tokens / dur if dur > 0 else None,
        "total_tokens_per_s": (out_tokens + sum(s.req.prompt for s in seqs)) / dur if dur > 0 else None,
        "requests_per_s": len(seqs) / dur if dur > 0 else None,
    }
    goodput = None
    if slo_ttft is not None or slo_tpot is not None:
        goodput = {"requests_per_s": len(good) / dur if dur > 0 else None,
                   "output_tokens_per_s": sum(s.req.out for s in good) / dur if dur > 0 else None,
                   "fraction_meeting_slo": len(good) / len(seqs), "slo_ttft_s": slo_ttft, "slo_tpot_s": slo_tpot}
    return {"latency": lat, "throughput": thr, "goodput": goodput, "duration_s": dur}


def cost(price_per_gpu_hour: float | None, gpus: int, tokens_per_s: float | None) -> float | None:
    """USD per 1M output tokens on rented GPUs (estimate/cost.py's cloud formula)."""
    if not price_per_gpu_hour or not tokens_per_s:
        return None
    from gpuscope.estimate.cost import cost_per_million_tokens_cloud

    return cost_per_million_tokens_cloud(price_per_gpu_hour, gpus, tokens_per_s)


def cost_owned(purchase_usd: float | None, tdp_w: float | None, gpus: int, tokens_per_s: float | None) -> float | None:
    """USD per 1M output tokens on owned GPUs, busy at their TDP (estimate/cost.py's owned formula, default
    Economics: 3 years, PUE 1.3, 0.12 USD/kWh)."""
    if not purchase_usd or not tdp_w or not tokens_per_s:
        return None
    from gpuscope.estimate.cost import cost_per_million_tokens_owned

    return cost_per_million_tokens_owned(purchase_usd, gpus, tdp_w, tokens_per_s)
