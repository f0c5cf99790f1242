"""`gpuscope ui [--host 127.0.0.1] [--port N]`: serve the local web page (ui/server.py) until Ctrl-C."""

from __future__ import annotations

import typer

HOST_HELP = "Address to listen on (default the loopback 127.0.0.1: only this machine can reach the page)."
PORT_HELP = "Port (0: any free port; the address is printed)."


def register(app: typer.Typer) -> None:
    app.command("ui")(ui)


def ui(
    host: str = typer.Option("127.0.0.1", "--host", help=HOST_HELP),
    port: int = typer.Option(8765, "--port", help=PORT_HELP),
    verbose: bool = typer.Option(False, "--verbose", help="Log every request on stderr."),
) -> None:
    """Serve a local web page with forms for plan, compare and advise, drawn as the HTML report is. Each form runs
    the gpuscope command it shows (with --json) and draws its result; bad input shows the command's own sentence."""
    from gpuscope.cli import options as o
    from gpuscope.errors import UserError
    from gpuscope.report.html.page import plotly_js
    from gpuscope.ui.server import make_server

    if not 0 <= port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, not {port}.")
    o.non_negative(port=port)
    plotly_js()  # says plotly is missing before listening
    srv = make_server(host, port, verbose)
    h, p = srv.server_address[:2]
    typer.echo(f"gpuscope ui: serving on http://{h}:{p}/ (Ctrl-C stops it)", err=False)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        typer.echo("gpuscope ui: stopped", err=True)
    finally:
        srv.server_close()
