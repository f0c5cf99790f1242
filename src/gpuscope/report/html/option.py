"""The --html option of `plan`, `compare` and `bench` (the same views as `gpuscope report`, for one command's
result). Here, not in cli/, so that a command that has it imports no other command's module (tests/test_cli_exit.py);
typer is imported by every command already."""

from __future__ import annotations

import typer


HTML_HELP = "Also write this command's result as a self-contained HTML page with plots (needs plotly)."


def _html_ready(path: str | None) -> str | None:
    """--html checked before the command works: plotly installed, the folder there."""
    if path:
        from pathlib import Path

        from gpuscope.errors import UserError
        from gpuscope.report.html.page import plotly_js

        plotly_js()
        if not Path(path).expanduser().parent.is_dir():
            raise UserError(f"--html '{path}': its folder does not exist.")
    return path


def html_option():
    """--html PATH of plan, compare and bench: the same views as `gpuscope report`, for one command's result."""
    return typer.Option(None, "--html", help=HTML_HELP, callback=_html_ready)


def write_html(doc: dict, path: str | None) -> None:
    """Write ``doc`` (a command's JSON document) as a page at ``path``, when one is given; says where on stderr."""
    if not path:
        return
    from gpuscope.report.html.views import write_result

    write_result(doc, path)
    typer.echo(f"wrote {path}", err=True)
