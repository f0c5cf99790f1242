"""How `gpuscope bench` speaks: a Session whose reporter prints to the console (progress bars, one line per
measurement, the estimate table beside it), and the end of a run: the JSON document or the summary lines, and the
exit code (1 when some cases failed, the count on the last line; 130 interrupted, saying what was kept).
The run itself is pipeline/."""

from __future__ import annotations

import json
import sys

import typer

from gpuscope.cli import options
from gpuscope.pipeline.session import BENCH_SCHEMA, Progress, Reporter
from gpuscope.pipeline.session import Session as _Session


# --- the options every bench command shares (beside cli/options.py's) ---
def json_out():
    return options.json_out(BENCH_SCHEMA, help=f"Print JSON (schema {BENCH_SCHEMA}) instead of tables.")


def bench_gpu(extra: str = ""):
    return options.gpu(required=False, help=options.BENCH_GPU_HELP + extra)


def timeout(default: float = 600, help: str = "Seconds before the case is stopped."):
    return typer.Option(default, "--timeout", help=help)


def console(stderr: bool = False):
    from rich.console import Console

    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=max(c.width, 140))


class _Bar(Progress):
    def __init__(self, prog, task):
        self.prog, self.task, self.name = prog, task, ""
        self.shows_phases = not prog.disable  # a terminal: the case's phase and repeat on the bar's line

    def item(self, name: str) -> None:
        self.name = name
        self.prog.update(self.task, description=name)

    def phase(self, text: str) -> None:
        self.prog.update(self.task, description=f"{self.name}: {text}")

    def advance(self) -> None:
        self.prog.advance(self.task)


class _BarContext:
    def __init__(self, label: str, total: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        c = console(stderr=True)
        self.prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             console=c, transient=True, disable=not c.is_terminal)
        self.label, self.total = label, total

    def __enter__(self) -> _Bar:
        self.prog.__enter__()
        return _Bar(self.prog, self.prog.add_task(self.label, total=self.total))

    def __exit__(self, *exc) -> None:
        self.prog.__exit__(*exc)


class ConsoleReporter(Reporter):
    """Notes and one line per measurement on stderr (none under --json); warnings always."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.log = console(stderr=True)

    def note(self, text: str) -> None:
        if not self.as_json:
            self.log.print(text, highlight=False)

    def warn(self, text: str) -> None:
        typer.echo(text, err=True)

    def progress(self, label: str, total: int):
        return _BarContext(label, total)

    def measured(self, entry: dict) -> None:
        from gpuscope.report.bench_view import estimate_table
        from gpuscope.workloads import headline

        if entry["skipped"]:
            return self.note(f"{entry['name']}: skipped (measured as id {entry['id']})")
        wall = f" ({entry['wall_s']:.1f}s)" if entry.get("wall_s") is not None else ""
        self.note(f"[{entry['id']}] {entry['name']}: {headline(entry['result'])}{wall}")
        est = entry.get("estimate")
        if self.as_json or est is None:
            return None
        if "rows" in est:
            self.log.print(estimate_table(entry["name"], est))
        else:
            self.log.print(f"  no estimate: {est['unavailable']}", highlight=False)
        return None


class Session(_Session):
    """A pipeline Session that prints as the CLI does."""

    def __init__(self, db: str | None, command: str, resume: bool, as_json: bool):
        super().__init__(db, command, resume, ConsoleReporter(as_json))
        self.as_json = as_json


def finish(s: Session, t0: float | None = None):
    """Print the run (JSON, or the accuracy and where it is stored) and close the store; the BenchRun."""
    from gpuscope.measure.runner.run_case import clean
    from gpuscope.report.bench_view import accuracy_line

    run = s.result()
    if s.as_json:
        typer.echo(json.dumps(clean(run.to_json()), indent=1))
    else:
        if run.accuracy:
            s.note(accuracy_line(run.accuracy))
        s.note(f"{run.measured} measured, {len(run.measurements) - run.measured} skipped, in {run.wall_s:.1f}s; "
               f"stored in {run.db} (run {run.run_id})")
    s.close()
    return run


def exit_on_failures(run) -> None:
    """Exit 1 when some cases failed (an error or a timeout) or the job failed, the count on the last line."""
    failed = run.failed
    if run.error:
        print(f"error: {run.error}", file=sys.stderr)
    if failed or run.error:
        what = f"{len(failed)} of {run.measured} cases failed" if failed else "the job failed"
        print(f"{what} (stored in {run.db}, run {run.run_id})", file=sys.stderr)
        raise typer.Exit(1)


def guarded(s: Session, fn, exit_on_fail: bool = True, html: str | None = None):
    """Run fn(); on Ctrl-C (or SIGTERM) say what was kept and exit 130; then print the run (``html``: also as a
    page: gpuscope report of this run), and (``exit_on_fail``) exit 1 when some cases failed. The BenchRun."""
    try:
        fn()
    except KeyboardInterrupt:
        print(f"interrupted: {s.kept()} finished measurements of this run are kept in {s.store.path}; "
              "run again with --resume to continue.", file=sys.stderr)
        s.close()
        raise typer.Exit(130)
    except BaseException:
        s.close()
        raise
    run = finish(s)
    if html:
        from gpuscope.report.html.store_report import write_store_report

        write_store_report(run.db, html, run=run.run_id, title=f"gpuscope bench: run {run.run_id}")
        typer.echo(f"wrote {html}", err=True)
    if exit_on_fail:
        exit_on_failures(run)
    return run
