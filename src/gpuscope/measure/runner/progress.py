"""A case's progress inside its own process (phase, and repeat within a timed phase), told to the suite.

A case runs in a subprocess (suite.run_one) whose stdout carries only its JSON line; where the suite asks for
progress (``PROGRESS_ENV`` set in the case's environment), ``say`` writes one marked line on the case's stderr:
``MARK + {"phase": ..., "i": ..., "n": ...}``. The suite reads stderr as it comes, hands each marked line to its
callback (bench's status line on a terminal) and keeps the others as the stderr tail. Nothing is written when no
one asks, so a case run by hand prints only what it did before.

A timed phase's budget: where ``BUDGET_ENV`` is set (seconds; bench asks it for a CPU case's process only:
cli/bench_cpu.phase_budget, suite.child_env), the repeats of a timed phase (``repeats``) stop once the phase has
run that long and at least MIN_REPEATS repeats have run, fewer than asked if need be; the workload records how many
ran (``timed_steps``, ``ttft_repeats``, ``e2e_repeats``). A loaded 2-core host runs a GPT-2 training step 3-8x
slower than an idle one, and a phase that would take minutes then ends at its budget with a median of what ran.
"""

from __future__ import annotations

import json
import os
import sys
import time

PROGRESS_ENV = "GPUSCOPE_PROGRESS"
MARK = "@gpuscope-progress "
BUDGET_ENV = "GPUSCOPE_PHASE_BUDGET_S"
MIN_REPEATS = 2  # a median and a spread


def wanted() -> bool:
    return os.environ.get(PROGRESS_ENV) == "1"


def say(phase: str, i: int | None = None, n: int | None = None) -> None:
    """Tell the suite this case is in ``phase`` (at repeat ``i`` of at least ``n``, 1-based), if it asked."""
    if not wanted():
        return
    event = {"phase": phase, **({"i": i} if i is not None else {}), **({"n": n} if n is not None else {})}
    try:
        sys.__stderr__.write(MARK + json.dumps(event) + "\n")
        sys.__stderr__.flush()
    except (OSError, ValueError, AttributeError):  # a closed or absent stderr: progress is not worth a failure
        pass


def parse(line: str) -> dict | None:
    """The event of a marked line, else None (an ordinary stderr line)."""
    if not line.startswith(MARK):
        return None
    try:
        event = json.loads(line[len(MARK):])
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("phase"), str) else None


def text(event: dict) -> str:
    """'timed generate 2/3' (at least n: a time floor may run more), or the phase alone."""
    i, n = event.get("i"), event.get("n")
    if i is None:
        return event["phase"]
    return f"{event['phase']} {i}/{n}" if n and i <= n else f"{event['phase']} {i}" + (f" (>= {n})" if n else "")


def budget_s() -> float | None:
    """The timed phases' budget in seconds (``BUDGET_ENV``), or None: unset, or not a positive number."""
    try:
        b = float(os.environ.get(BUDGET_ENV, ""))
    except ValueError:
        return None
    return b if b > 0 and b == b and b != float("inf") else None


def repeats(phase: str, it, n: int):
    """``it`` (a repeats generator: measure/device/device.repeats) with ``say(phase, i + 1, n)`` before each; it
    ends early at the phase's budget (module docstring), after at least MIN_REPEATS repeats."""
    budget, t0 = budget_s(), time.perf_counter()
    for i in it:
        if budget is not None and i >= MIN_REPEATS and time.perf_counter() - t0 > budget:
            say(f"{phase}: budget of {budget:g} s reached after {i}")
            return
        say(phase, i + 1, n)
        yield i
