"""One bench run: the results store, its run id, the keys a resumed run skips, the measurements of this call, and
the BenchRun value it ends as. What happens is told to a Reporter (the library's says nothing)."""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field

BENCH_SCHEMA = "gpuscope.bench/1"
FAILED = ("error", "timeout")


class Progress:
    """A loop's progress: the item being measured, its phase inside (``phase``, where ``shows_phases``: a case's
    own process tells them, measure/runner/progress.py), then one step done."""

    shows_phases = False

    def item(self, name: str) -> None:
        pass

    def phase(self, text: str) -> None:
        pass

    def advance(self) -> None:
        pass


class Reporter:
    """What a session says while it runs. ``note``: progress sentences; ``warn``: what the user should know even
    when the output is JSON; ``measured``: one finished (or skipped) measurement; ``progress``: a loop's bar."""

    def note(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        print(text, file=sys.stderr)

    def measured(self, entry: dict) -> None:
        pass

    def progress(self, label: str, total: int):
        return contextlib.nullcontext(Progress())


@dataclass
class BenchRun:
    """What a bench call measured (``measurements``: one entry per case, skipped ones included), where it is
    stored, and how close the planner came (``accuracy``: pipeline/accuracy.bench_summary)."""

    db: str
    run_id: int
    wall_s: float
    measurements: list[dict]
    calibration: str | None = None
    host_history: dict | None = None
    accuracy: dict | None = None
    error: str | None = None
    interrupted: bool = False

    @property
    def measured(self) -> int:
        return sum(1 for m in self.measurements if not m["skipped"])

    @property
    def failed(self) -> list[dict]:
        """Entries of this call whose case failed (an error or a timeout), or whose job failed."""
        return [m for m in self.measurements if not m["skipped"] and m.get("status") in FAILED]

    def to_json(self) -> dict:
        """The JSON document of schema gpuscope.bench/1."""
        out = {"schema": BENCH_SCHEMA, "db": self.db, "run_id": self.run_id, "wall_s": self.wall_s,
               "measurements": self.measurements}
        if self.calibration:
            out["calibration"] = self.calibration
        if self.host_history:
            out["calibration_host_history"] = self.host_history
        if self.accuracy:
            out["estimate_accuracy"] = self.accuracy
        if self.error:
            out["error"] = self.error
        return out


class Session:
    """One command's run: the store, its run id, resume set and the entries of this call."""

    def __init__(self, db: str | None, command: str, resume: bool = False, reporter: Reporter | None = None,
                 argv: list[str] | None = None):
        from gpuscope.store.db import Store

        self.store = Store.open(db)
        self.command = command
        self.host_ceilings: str | None = None  # a CPU run's: the ceilings it is planned on (pipeline/host_ceilings)
        self.run_id = self.store.new_run(command, list(sys.argv if argv is None else argv))
        self.done = self.store.done_keys() if resume else set()
        self.out: list[dict] = []
        self.reporter = reporter or Reporter()
        self.calibration: str | None = None  # bench all: the hardware TOML its workloads were planned on
        self.host_history: dict | None = None  # its host probe beside the machine's earlier calibrations
        self.error: str | None = None  # a job that failed as a whole (a torchrun job's wall timeout, a dead rank)
        self.t0 = time.perf_counter()

    def note(self, text: str) -> None:
        self.reporter.note(text)

    def warn(self, text: str) -> None:
        self.reporter.warn(text)

    def add(self, entry: dict) -> dict:
        self.out.append(entry)
        self.reporter.measured(entry)
        return entry

    def skipped(self, key: str, name: str, estimate=None) -> dict:
        """The entry of a key already measured (resume): the stored result, not measured again; ``estimate``
        (a function of the stored row) puts the planner beside it."""
        old = self.store.latest(key)
        entry = {"id": old["id"], "key": key, "name": name, "skipped": True, "status": old["status"],
                 "result": old["result"]}
        if estimate is not None:
            entry["estimate"] = estimate(old)
        return self.add(entry)

    def kept(self) -> int:
        return sum(1 for m in self.out if not m["skipped"])

    def result(self, interrupted: bool = False) -> BenchRun:
        from gpuscope.pipeline.accuracy import bench_summary

        return BenchRun(db=str(self.store.path), run_id=self.run_id, wall_s=time.perf_counter() - self.t0,
                        measurements=self.out, calibration=self.calibration, host_history=self.host_history,
                        accuracy=bench_summary(self.out), error=self.error, interrupted=interrupted)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
