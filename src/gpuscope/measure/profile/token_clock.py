"""`doctor infer`'s generate on a CPU: each new token timed, said as progress, and the call ended at a time budget.

A CPU decodes a 1B model at 0.3-3 s a token (fp32, batch 1, a loaded 2-core host), so a generate of 128 tokens
takes minutes, twice (bare, then profiled), and reading the profiler's events afterwards costs about 0.1-0.8 ms
each (53k events of 57 Llama-3.2-1B tokens: 41 s on that host). So where a phase budget is set
(measure/runner/progress.BUDGET_ENV; doctor sets one on a CPU), the bare generate stops once it has run that long
and at least MIN_TOKENS tokens came out, and the profiled one generates as many tokens, ended at
``PROFILE_BUDGET_X`` of the budget counted from its first token (the prefill, which can take seconds, always runs;
the op mix of a decode step is the same every token; the bare time compared is
the bare run's own time at the same token, from its marks). The tokens asked, the tokens each run covered and the
reason are kept in the summary (``tokens``), and the estimate compares the tokens the profile covers.

The clock is an HF stopping criterion: generate calls it after every new token (the first one after the prefill).
"""

from __future__ import annotations

import statistics
import time

import torch

MIN_TOKENS = 2  # a first token (prefill) and one decode step
_now = time.perf_counter  # the clock's (tests replace it)
PROFILE_BUDGET_X = 0.25  # the profiled generate's budget, in phase budgets


class TokenClock:
    """Stopping criterion for ``model.generate``: the time after each token (``marks``, from ``start()``),
    ``on_progress(phase, i, n)`` per token, a stop once ``budget_s`` has passed (since ``start()``, or since the
    first token: ``decode_only``) and ``MIN_TOKENS`` are out."""

    def __init__(self, phase: str, n: int, budget_s: float | None = None, on_progress=None,
                 decode_only: bool = False):
        self.phase, self.n, self.budget_s, self.on_progress = phase, n, budget_s, on_progress
        self.decode_only = decode_only
        self.t0 = _now()
        self.marks: list[float] = []
        self.stopped = False

    def start(self) -> None:
        self.t0, self.marks, self.stopped = _now(), [], False

    def __call__(self, input_ids, scores=None, **kw) -> torch.Tensor:
        now = _now()
        self.marks.append(now)
        i = len(self.marks)
        if self.on_progress:
            self.on_progress(self.phase, i, self.n)
        since = self.marks[0] if self.decode_only else self.t0
        stop = self.budget_s is not None and MIN_TOKENS <= i < self.n and now - since > self.budget_s
        self.stopped = self.stopped or stop
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

    def seconds_at(self, k: int) -> float:
        """Seconds from ``start()`` to the k-th token (1-based)."""
        return self.marks[k - 1] - self.t0

    def token_times(self) -> dict:
        """The first token's seconds (the prefill and one sample) and the median decode step after it."""
        steps = [b - a for a, b in zip(self.marks, self.marks[1:])]
        return {"tokens": len(self.marks), "first_token_s": self.seconds_at(1) if self.marks else None,
                "decode_s_median": statistics.median(steps) if steps else None}


def hf_generate(model, ids, mask, n: int, engine: str, clock: TokenClock):
    """measure/llm/infer.generate's HF engines (plain generate, or a static cache for hf-graph) with ``clock`` as a
    stopping criterion: exactly ``n`` tokens unless the clock stops it."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _Crit(StoppingCriteria):
        def __call__(self, input_ids, scores, **kw):
            return clock(input_ids, scores)

    kw = {"cache_implementation": "static"} if engine == "hf-graph" else {}
    clock.start()
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                          stopping_criteria=StoppingCriteriaList([_Crit()]), **kw)


def tokens_record(asked: int, covered: int, budget_s: float | None, bare: TokenClock) -> dict:
    """The summary's ``tokens``: asked, ``ran`` (the profiled run's tokens: what the profile and the estimate
    cover), the budget, the bare run's tokens and times, and why fewer ran (None where all did)."""
    why, n_bare = None, len(bare.marks)
    if covered < asked:
        why = (f"the bare generate stopped at the phase budget of {budget_s:g} s after {n_bare} of {asked} tokens"
               + (f", the profiled one after {covered}" if covered < n_bare else "")
               + f"; the profile and the estimate cover {covered} tokens (the bare time at the same token)")
    return {"asked": asked, "ran": covered, "budget_s": budget_s, "stopped_why": why, "bare": bare.token_times()}
