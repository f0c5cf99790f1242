"""The `gpuscope` command: a thin shell over the library (shared/DESIGN.md)."""

from __future__ import annotations

import sys

import typer

from gpuscope.errors import UserError

app = typer.Typer(
    name="gpuscope",
    help="Does this LLM fit, how fast will it run, and why is my run slower? Estimate, measure, explain.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# Sub-command modules, each exposing `register(app)`; a module not written yet is skipped.
_MODULES = ("plan", "models", "hardware", "compare", "advise", "bench", "results", "tune", "doctor", "slurm")
_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    import importlib

    for name in _MODULES:
        try:
            mod = importlib.import_module(f"gpuscope.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gpuscope.cli.{name}":
                continue
            raise
        mod.register(app)
    _registered = True


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors print one sentence to stderr and exit with code 2."""
    _register()
    try:
        app(args=argv, standalone_mode=False)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(UserError.exit_code)
    except SystemExit:
        raise
    except Exception as exc:  # click usage errors come through here in non-standalone mode
        usage, abort = _click_errors()
        if isinstance(exc, usage):
            exc.show()
            sys.exit(2)
        if isinstance(exc, abort):
            sys.exit(1)
        raise


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
        if hasattr(mod, "Abort"):  # typer's vendored click has none (Ctrl-C stays a KeyboardInterrupt)
            abort.append(mod.Abort)
    return tuple(usage), tuple(abort)
