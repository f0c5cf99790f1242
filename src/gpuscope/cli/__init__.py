"""The `gpuscope` command: a thin shell over the library (shared/DESIGN.md).

Start-up is kept short by building only what the invocation needs: ``main`` looks at the first argument and
imports and registers that one command's module; ``gpuscope --help`` (or an unknown command) is answered from the
static table ``COMMANDS`` below, without importing any command module. ``_register()`` (no argument) builds the
whole app, as tests and embedders do.

Exit codes (shared/CONTRACT.md): 0 success; 1 some cases failed (a command raises ``typer.Exit(1)``); 2 bad input
(``UserError``, or a usage error); 130 interrupted by SIGINT or SIGTERM (SIGTERM is turned into the same
KeyboardInterrupt, so what a command keeps on Ctrl-C it keeps on SIGTERM, and says so).
"""

from __future__ import annotations

import signal
import sys

import typer

from gpuscope.errors import UserError

HELP = "Does this LLM fit, how fast will it run, and why is my run slower? Estimate, measure, explain."



def _root() -> typer.Typer:
    """The root app. Its (empty) callback keeps it a group when only one command is registered: typer would
    otherwise run that command directly and take its name for an argument."""
    root = typer.Typer(name="gpuscope", help=HELP, no_args_is_help=True, add_completion=False,
                       pretty_exceptions_enable=False)
    root.callback()(_no_root_options)
    return root


def _no_root_options() -> None:
    pass


app = _root()

# name -> (module under gpuscope.cli exposing `register(app)`, the one-line help `gpuscope --help` shows), in the
# order --help lists them. tests/test_cli_exit.py holds each help to the one the command itself declares.
COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("models", "List model presets (or show one: architecture and exact parameter counts)."),
    "doctor": ("doctor", "Profile a run (a gpuscope workload or your script) and diagnose it: findings, "
                         "evidence, fixes."),
    "slurm": ("slurm", "Write an sbatch script for a distributed benchmark over N nodes x G GPUs."),
    "plan": ("plan", "Estimate memory, time and throughput without a GPU."),
    "hardware": ("hardware", "The hardware catalog: peaks (dense), memory, bandwidth, links, with sources."),
    "compare": ("compare", "Hardware side by side: fit, speed, energy, cost per token, TCO, training budget."),
    "advise": ("advise", "Rank hardware for a workload under constraints, with the decision path."),
    "bench": ("bench", "Measure: microbenchmarks and LLM workloads, stored with provenance."),
    "results": ("results", "Stored measurements: list, show one, export CSV or JSON, compare with the planner."),
    "tune": ("tune", "Find the batch size and precision that suit your model on this device."),
    "report": ("report", "Write an HTML report (plots, provenance) of stored measurements."),
    "ui": ("ui", "Serve a local web page with forms for plan, compare and advise, drawn as the HTML report is."),
}
_registered: set[str] = set()


def _register(name: str | None = None) -> None:
    """Register one command's module (``name``), or all of them; each at most once. A module not written yet is
    skipped."""
    import importlib

    for cmd in ([name] if name else list(COMMANDS)):
        module = COMMANDS[cmd][0]
        if module in _registered:
            continue
        try:
            mod = importlib.import_module(f"gpuscope.cli.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gpuscope.cli.{module}":
                continue
            raise
        mod.register(app)
        _registered.add(module)


def _index() -> typer.Typer:
    """An app that only lists the commands (for --help, no arguments, or an unknown command): the static table,
    nothing imported."""
    idx = _root()
    for cmd, (_module, short) in COMMANDS.items():
        idx.command(cmd, help=short, add_help_option=False)(_listed_only)
    return idx


def _listed_only() -> None:  # pragma: no cover - the index is never invoked with a known command's name
    raise UserError("internal: a command of the index was run.")


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the command and exit with its code (user errors: one sentence on stderr, exit 2)."""
    args = sys.argv[1:] if argv is None else list(argv)
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        code = _run(args)
    finally:
        if previous in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if code:
        sys.exit(code)


def _run(args: list[str]) -> int:
    """Build what ``args`` needs and run it; the exit code (typer.Exit's, 2 for bad input, 130 interrupted)."""
    try:
        if args and args[0] in COMMANDS:
            _register(args[0])
            target = app
        else:
            target = _index()
        code = target(args=args, standalone_mode=False)  # typer.Exit(n) comes back as n here
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return UserError.exit_code
    except KeyboardInterrupt:  # before or after the command ran (typer turns one inside it into Exit(130))
        return 130
    except Exception as exc:  # click usage errors come through here in non-standalone mode
        usage, abort = _click_errors()
        if isinstance(exc, usage):
            _same_wording(exc)
            exc.show()
            return 2
        if isinstance(exc, abort):
            return 1
        raise
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def _same_wording(exc) -> None:
    """click >= 8.4 words an unknown option "No such option '--x'."; gpuscope keeps the wording scripts match
    ("No such option: --x") whichever click is installed."""
    name = getattr(exc, "option_name", None)
    if type(exc).__name__ == "NoSuchOption" and name:
        exc.message = f"No such option: {name}"  # click adds the nearest options itself


def _click_errors() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Click's usage-error and abort classes: typer >= 0.2x vendors click as ``typer._click`` (its own classes),
    older typer raises those of the ``click`` package; both are caught."""
    import importlib

    usage, abort = [], []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        usage.append(mod.ClickException)
        if hasattr(mod, "Abort"):
            abort.append(mod.Abort)
    return tuple(usage), tuple(abort)
