"""Serving metrics of a set of requests, with vLLM's serving-benchmark definitions (vllm/benchmarks/serve.py and
lib/endpoint_request_func.py), computed from one record per request whatever produced it (the HTTP load generator or
transformers' continuous batching in this process). No torch here.

Per request (all times from the moment the request was sent, or submitted to the engine in-process):
- TTFT: the first chunk that carries a token (an OpenAI stream's first ``choices`` with text: loadgen.py says
  where this differs from vLLM's any-``choices`` rule; in-process: the first generated token's timestamp).
- ITL: the gaps between successive token-carrying chunks (a chunk of several tokens counts once, as vLLM's does).
- E2E: the last token-carrying chunk (a trailing usage-only chunk does not end the request).
- TPOT = (E2E - TTFT) / (output_tokens - 1), for output_tokens > 1.
Over the run (duration: first send to last completion):
- output_tokens_per_s = sum of completed requests' output tokens / duration; request_per_s likewise.
- goodput_requests_per_s: completed requests whose TTFT, TPOT and E2E are all within the SLOs given, / duration
  (vLLM's ``--goodput ttft:MS tpot:MS e2el:MS``).
- percentiles: linear interpolation between closest ranks (numpy's default, which vLLM's benchmark uses).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

PCTS = (50, 90, 99)
FORMULAS = {
    "ttft_s": "time of the first token-carrying chunk - time the request was sent (in-process: submitted)",
    "itl_s": "gaps between successive token-carrying chunks (vLLM's ITL; a chunk of k tokens is one gap)",
    "e2e_s": "time of the last token-carrying chunk - time sent",
    "tpot_s": "(e2e_s - ttft_s) / (output_tokens - 1), output_tokens > 1",
    "throughput.output_tokens_per_s": "sum(output_tokens of completed requests) / duration_s",
    "duration_s": "last completion - first send",
    "goodput_requests_per_s": "completed requests with ttft <= slo_ttft_s, tpot <= slo_tpot_s and e2e <= slo_e2e_s "
                              "(each where given) / duration_s",
    "percentiles": "linear interpolation between closest ranks (numpy.percentile's default)",
}


@dataclass
class RequestRecord:
    """One request: when it was sent, its token times (absolute, on one monotonic clock), and its error if any."""

    index: int
    prompt_tokens: int
    max_tokens: int
    sent_s: float
    token_times_s: list[float] = field(default_factory=list)  # one per token-carrying chunk
    output_tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.token_times_s)

    @property
    def ttft_s(self) -> float | None:
        return self.token_times_s[0] - self.sent_s if self.ok else None

    @property
    def e2e_s(self) -> float | None:
        return self.token_times_s[-1] - self.sent_s if self.ok else None

    @property
    def itl_s(self) -> list[float]:
        t = self.token_times_s
        return [b - a for a, b in zip(t, t[1:])] if self.ok else []

    @property
    def tpot_s(self) -> float | None:
        if not self.ok or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("token_times_s")
        d.update(ttft_s=self.ttft_s, e2e_s=self.e2e_s, tpot_s=self.tpot_s, chunks=len(self.token_times_s),
                 itl_s=[round(g, 6) for g in self.itl_s])  # microseconds: a 1024 x 128 run's list stays ~1 MB
        return d


def percentile(xs: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks: rank (n - 1) q / 100 (numpy's 'linear')."""
    if not xs:
        return None
    s = sorted(xs)
    r = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(r), math.ceil(r)
    return s[lo] + (s[hi] - s[lo]) * (r - lo)


def _dist(name: str, xs: list[float]) -> dict:
    out = {f"{name}_mean_s": sum(xs) / len(xs) if xs else None}
    out.update({f"{name}_p{q}_s": percentile(xs, q) for q in PCTS})
    return out


def _good(r: RequestRecord, slo: dict) -> bool:
    checks = (("ttft", r.ttft_s), ("tpot", r.tpot_s), ("e2e", r.e2e_s))
    return all(slo.get(k) is None or (v is not None and v <= slo[k]) for k, v in checks)


def slo_of(case: dict) -> dict:
    """A serve case's SLOs as summarize takes them (seconds; None where not given)."""
    return {"ttft": case.get("slo_ttft_s"), "tpot": case.get("slo_tpot_s"), "e2e": case.get("slo_e2e_s")}


def summarize(records: list[RequestRecord], slo: dict | None = None) -> dict:
    """The run's figures: ``throughput`` and ``latency`` (the keys `plan serve` writes), the counts, the errors and
    the goodput under ``slo`` ({"ttft": s, "tpot": s, "e2e": s}, each optional)."""
    slo = {k: v for k, v in (slo or {}).items() if v is not None}
    done = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    ends = [r.token_times_s[-1] for r in done]
    start = min((r.sent_s for r in records), default=0.0)
    duration = (max(ends) - start) if ends else None
    out_tokens = sum(r.output_tokens for r in done)
    rate = (lambda x: x / duration if duration else None)
    latency: dict = {}
    latency.update(_dist("ttft", [r.ttft_s for r in done]))
    latency.update(_dist("tpot", [r.tpot_s for r in done if r.tpot_s is not None]))
    latency.update(_dist("itl", [g for r in done for g in r.itl_s]))
    latency.update(_dist("e2e", [r.e2e_s for r in done]))
    errors: dict[str, int] = {}
    for r in failed:
        errors[r.error or "no token came back"] = errors.get(r.error or "no token came back", 0) + 1
    return {
        "requests": len(records), "completed": len(done), "failed": len(failed), "errors": errors,
        "duration_s": duration, "input_tokens": sum(r.prompt_tokens for r in done), "output_tokens": out_tokens,
        "throughput": {"output_tokens_per_s": rate(out_tokens), "requests_per_s": rate(len(done)),
                       "total_tokens_per_s": rate(out_tokens + sum(r.prompt_tokens for r in done))},
        "latency": latency,
        "slo": slo or None,
        "goodput_requests_per_s": rate(sum(_good(r, slo) for r in done)) if slo else None,
        "metric_formulas": FORMULAS,
    }
