"""`gpuscope ARGS` run in the test's own process: the same code as the command line, without an interpreter start
(tests of the HTML report, the local page and the browser compare their output with the CLI's)."""

from __future__ import annotations

import contextlib
import io
import subprocess


def run_cli(*args: str) -> subprocess.CompletedProcess:
    from gpuscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())
