"""doctor's progress line on a terminal (stderr, transient: never on stdout or in --json), as bench shows a case's
phase and repeat: the workload's phase, and the token or step within a timed one ("bare generate, token 5/128").
Nothing where stderr is not a terminal."""

from __future__ import annotations

import contextlib
import time


class _Line:
    def __init__(self, status, t0: float):
        self.status, self.t0 = status, t0

    def __call__(self, phase: str, i: int | None = None, n: int | None = None) -> None:
        where = f"{phase} {i}/{n}" if i is not None and n else phase
        self.status.update(f"doctor: {where} ({time.perf_counter() - self.t0:.0f} s)")


@contextlib.contextmanager
def progress_line():
    """Yields ``on_progress(phase, i, n)`` for measure/profile/workload.profile_workload, or None (no terminal)."""
    from rich.console import Console

    c = Console(stderr=True)
    if not c.is_terminal:
        yield None
        return
    with c.status("doctor: starting", spinner="dots") as status:
        yield _Line(status, time.perf_counter())
