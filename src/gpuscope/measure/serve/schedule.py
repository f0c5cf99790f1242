"""What a serving run sends and when: per-request prompt and output lengths (``fixed``; ``uniform`` integers in
``[L (1 - s), L (1 + s)]`` for spread s, as vLLM's random dataset draws them with its range ratio; ``normal`` with
standard deviation s L, at least 1: the distributions `plan serve` takes, estimate/serve/workload.py), and the
arrival times:

- offline: every request at t = 0 (what a throughput benchmark does; vLLM's ``--request-rate inf``);
- Poisson at ``rate`` requests/s: gaps drawn from a gamma distribution of shape ``burstiness`` and mean 1 / rate
  (burstiness 1 is exponential gaps, a Poisson process; vLLM's ``--burstiness``), seeded;
- fixed concurrency C: the first C at t = 0, then one more each time one finishes (the senders' loop does that; the
  schedule is offline with a cap).

Pure Python (random.Random), no numpy: the same seed gives the same run on any machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """The requests of one run: lengths and arrival offsets (seconds from the start), and the concurrency cap."""

    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    arrivals_s: tuple[float, ...]
    concurrency: int | None = None

    @property
    def mode(self) -> str:
        if self.concurrency:
            return "concurrency"
        return "offline" if not any(self.arrivals_s) else "poisson"


DISTRIBUTIONS = ("fixed", "uniform", "normal")


def lengths(n: int, mean: int, dist: str, spread: float, rng: random.Random) -> tuple[int, ...]:
    """n lengths drawn from ``dist`` around ``mean`` (spread s: uniform in [mean (1 - s), mean (1 + s)]; normal with
    standard deviation s mean), at least 1; all ``mean`` when fixed or s = 0."""
    if dist == "fixed" or spread <= 0:
        return (mean,) * n
    if dist == "uniform":
        lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
        return tuple(rng.randint(lo, hi) for _ in range(n))
    return tuple(max(1, round(rng.gauss(mean, spread * mean))) for _ in range(n))


def arrivals(n: int, rate: float | None, burstiness: float, rng: random.Random) -> tuple[float, ...]:
    """Offsets of n arrivals: all 0 without a rate; else cumulative gamma(shape=burstiness, scale=1/(rate*b)) gaps,
    the first request at t = 0."""
    if not rate:
        return (0.0,) * n
    theta = 1.0 / (rate * burstiness)
    t, out = 0.0, []
    for i in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, theta)
    return tuple(out)


def make_plan(requests: int, prompt: int, gen: int, rate: float | None = None, concurrency: int | None = None,
              burstiness: float = 1.0, seed: int = 0, prompt_dist: str = "fixed", prompt_spread: float = 0.0,
              gen_dist: str = "fixed", gen_spread: float = 0.0) -> Plan:
    rng = random.Random(seed)
    p = lengths(requests, prompt, prompt_dist, prompt_spread, rng)
    g = lengths(requests, gen, gen_dist, gen_spread, rng)
    return Plan(p, g, arrivals(requests, rate, burstiness, rng), concurrency)


def plan_of(case: dict) -> Plan:
    """The requests of a serve case (its lengths and arrivals, schedule.py)."""
    return make_plan(int(case["requests"]), int(case["prompt"]), int(case["gen"]), case.get("rate"),
                     case.get("concurrency"), float(case.get("burstiness", 1.0)), int(case.get("seed", 0)),
                     case.get("prompt_dist", "fixed"), float(case.get("prompt_spread", 0.0)),
                     case.get("gen_dist", "fixed"), float(case.get("gen_spread", 0.0)))


BLOCK_TOKENS = 256  # the default KV block (page) size of transformers' ContinuousBatchingConfig (5.17, 5.24)


def workload_blocks(plan: Plan, block_tokens: int = BLOCK_TOKENS) -> int:
    """KV blocks for the plan's longest request times the requests in flight at most (a CPU engine's cache sized to
    the workload: the engine's own sizing to a fraction of the host's memory takes tens of seconds to allocate)."""
    per_req = -(-(max(plan.prompt_lens) + max(plan.output_lens)) // block_tokens) + 1
    return per_req * min(len(plan.prompt_lens), plan.concurrency or len(plan.prompt_lens))
