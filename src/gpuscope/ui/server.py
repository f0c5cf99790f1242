"""The local web server of `gpuscope ui` (the standard library's ThreadingHTTPServer: a handful of routes on the
loopback interface need no framework, and no dependency is added to the package).

Routes: ``GET /`` the page (ui/page.py), ``GET /plotly.min.js`` the plotly.js bundle, ``GET /api/forms`` the forms,
``POST /api/run`` ``{"form": id, "values": {...}}`` -> ``{"ok": true, "argv", "result", "html"}`` or
``{"ok": false, "error": sentence}``. A run is the gpuscope command of the form with --json, in its own process
(``python -m gpuscope ...``): its JSON is the result, its report/html sections the views; its one-sentence error
(exit 2) the error shown. Only requests whose Host names the address served are answered (a page elsewhere cannot
drive the calculator through DNS rebinding).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gpuscope.errors import UserError
from gpuscope.ui.forms import FORMS, to_argv

RUN_TIMEOUT_S = 300  # one command (a layout search of many GPUs is the slowest)
MAX_BODY = 64 * 1024
SRC = Path(__file__).resolve().parents[2]  # the folder holding the gpuscope package


def run_command(argv: list[str]) -> dict:
    """Run ``gpuscope <argv> --json`` in its own process: {"ok", "argv", "result", "html"} or {"ok": False,
    "error"} with the command's own sentence."""
    from gpuscope.report.html.page import render_sections
    from gpuscope.report.html.views import sections_for

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(x for x in (str(SRC), os.environ.get("PYTHONPATH")) if x))
    try:
        p = subprocess.run([sys.executable, "-m", "gpuscope", *argv, "--json"], capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"ok": False, "argv": argv, "error": f"the command took longer than {RUN_TIMEOUT_S} s and was stopped."}
    if p.returncode != 0:
        lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
        msg = lines[-1] if lines else f"the command exited with code {p.returncode}."
        return {"ok": False, "argv": argv, "error": msg.removeprefix("error: ").strip()}
    doc = json.loads(p.stdout)
    return {"ok": True, "argv": argv, "result": doc, "html": render_sections(sections_for(doc))}


class Handler(BaseHTTPRequestHandler):
    server_version = "gpuscope-ui"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args) -> None:  # quiet: the terminal shows the address, not every request
        if getattr(self.server, "verbose", False):
            super().log_message(fmt, *args)

    def _send(self, status: int, body: bytes, ctype: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, doc: dict) -> None:
        self._send(status, json.dumps(doc, default=float).encode(), "application/json")

    def _host_ok(self) -> bool:
        if self.server.allowed_hosts is None:  # --host other than the loopback: the user opened it on purpose
            return True
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        return host in self.server.allowed_hosts

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        from gpuscope.report.html.page import plotly_js
        from gpuscope.ui.page import page

        if not self._host_ok():
            return self._send(HTTPStatus.MISDIRECTED_REQUEST, b"wrong host", "text/plain")
        path = self.path.split("?", 1)[0]
        if path == "/":
            return self._send(HTTPStatus.OK, page().encode(), "text/html; charset=utf-8")
        if path == "/plotly.min.js":
            return self._send(HTTPStatus.OK, plotly_js().encode(), "text/javascript; charset=utf-8", cache=True)
        if path == "/api/forms":
            return self._json(HTTPStatus.OK, {"forms": [f.id for f in FORMS]})
        return self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        if not self._host_ok():
            return self._send(HTTPStatus.MISDIRECTED_REQUEST, b"wrong host", "text/plain")
        if self.path != "/api/run":
            return self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            return self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"ok": False, "error": "the request is too large."})
        try:
            req = json.loads(self.rfile.read(n) or b"{}")
            argv = to_argv(req.get("form", ""), req.get("values") or {})
        except (ValueError, AttributeError):
            return self._json(HTTPStatus.BAD_REQUEST, {"ok": False, "error": "the request is not a JSON object."})
        except UserError as e:
            return self._json(HTTPStatus.BAD_REQUEST, {"ok": False, "error": str(e)})
        return self._json(HTTPStatus.OK, run_command(argv))


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def make_server(host: str = "127.0.0.1", port: int = 0, verbose: bool = False) -> ThreadingHTTPServer:
    """A server bound to ``host``:``port`` (0: a free port; ``server.server_address`` says which)."""
    try:
        srv = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror}).") from None
    srv.daemon_threads = True
    srv.verbose = verbose
    srv.allowed_hosts = LOOPBACK if host in LOOPBACK else None
    return srv
