"""Start tests/serve_server.py as a real local HTTP server (its own process, 127.0.0.1, a free port) and end it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "serve_server.py"


def free_port() -> int:
    from gpuscope.measure.serve.launch import free_port as fp

    return fp()


@contextlib.contextmanager
def running_server(*args: str, ready_s: float = 90.0):
    """Yield the base URL (http://127.0.0.1:PORT/v1) of a running serve_server.py with ``args``."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), "--lifetime", "120", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        line = ""
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        if sel.select(timeout=ready_s):
            line = proc.stdout.readline()
        assert line.startswith("READY"), f"test server did not start: {line!r} {proc.poll()}"
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.kill()
        proc.wait(10)


def server_stats(base: str) -> dict:
    """The server's own timings per request, keyed by the load generator's X-Request-Id."""
    with urllib.request.urlopen(base.rsplit("/v1", 1)[0] + "/stats", timeout=10) as r:
        return {s["id"]: s for s in json.load(r)}
