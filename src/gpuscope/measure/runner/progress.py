"""A case's progress inside its own process (phase, and repeat within a timed phase), told to the suite.

A case runs in a subprocess (suite.run_one) whose stdout carries only its JSON line; where the suite asks for
progress (``PROGRESS_ENV`` set in the case's environment), ``say`` writes one marked line on the case's stderr:
``MARK + {"phase": ..., "i": ..., "n": ...}``. The suite reads stderr as it comes, hands each marked line to its
callback (bench's status line on a terminal) and keeps the others as the stderr tail. Nothing is written when no
one asks, so a case run by hand prints only what it did before.
"""

from __future__ import annotations

import json
import os
import sys

PROGRESS_ENV = "GPUSCOPE_PROGRESS"
MARK = "@gpuscope-progress "


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


def repeats(phase: str, it, n: int):
    """``it`` (a repeats generator: measure/device/device.repeats) with ``say(phase, i + 1, n)`` before each."""
    for i in it:
        say(phase, i + 1, n)
        yield i
