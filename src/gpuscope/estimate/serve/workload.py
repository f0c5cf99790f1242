"""The requests of a serving workload: lengths (fixed, uniform or normal, seeded) and arrivals (offline, Poisson,
or a fixed number of clients in a closed loop), as vLLM's benchmark_serving draws them.

- lengths: ``uniform`` draws from [L (1 - spread), L (1 + spread)] (vLLM's random dataset ``--random-range-ratio``);
  ``normal`` from N(L, spread x L) (TensorRT-LLM prepare_dataset ``token-norm-dist``), clipped to at least 1.
- arrivals: offline, all at t = 0; Poisson at ``rate`` requests/s: the first at 0, then exponential gaps of mean
  1/rate (benchmark_serving's request loop with burstiness 1); concurrency C: C requests at 0 and each later one
  when a running one finishes (scheduler.py releases them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gpuscope.errors import UserError

DISTRIBUTIONS = ("fixed", "uniform", "normal")


@dataclass
class Request:
    index: int
    arrival_s: float
    prompt: int
    out: int
    cached: int = 0  # prompt tokens found in the prefix cache (never prefilled)


def lengths(mean: int, n: int, dist: str, spread: float, rng: random.Random, flag: str) -> list[int]:
    if dist not in DISTRIBUTIONS:
        raise UserError(f"--{flag}-dist '{dist}' is not one of {', '.join(DISTRIBUTIONS)}.")
    if not 0 <= spread < 1:
        raise UserError(f"--{flag}-spread must be in [0, 1), got {spread}.")
    if dist == "fixed" or spread == 0:
        return [mean] * n
    if dist == "uniform":
        lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
        return [rng.randint(lo, hi) for _ in range(n)]
    return [max(1, round(rng.gauss(mean, spread * mean))) for _ in range(n)]


def make_requests(n: int, prompt: int, gen: int, *, rate: float | None = None, seed: int = 0,
                  prompt_dist: str = "fixed", prompt_spread: float = 0.0, gen_dist: str = "fixed",
                  gen_spread: float = 0.0, prefix_hit: float = 0.0, block_size: int = 16) -> list[Request]:
    """The workload's requests in arrival order (arrival 0 offline; closed loop: 0 here, the send time set by the
    scheduler as a slot frees)."""
    if not 0 <= prefix_hit < 1:
        raise UserError(f"--prefix-hit must be in [0, 1), got {prefix_hit}.")
    rng = random.Random(seed)
    ps = lengths(prompt, n, prompt_dist, prompt_spread, rng, "prompt")
    gs = lengths(gen, n, gen_dist, gen_spread, rng, "gen")
    t, out = 0.0, []
    for i in range(n):
        if rate is not None and i > 0:
            t += rng.expovariate(rate)
        # a prefix cache hits whole blocks, and the last prompt token is always computed (it samples the first token)
        cached = min(int(prefix_hit * ps[i]) // block_size * block_size, ps[i] - 1)
        out.append(Request(i, t if rate is not None else 0.0, ps[i], gs[i], cached))
    return out
