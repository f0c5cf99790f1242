"""Profile a user's script (``gpuscope doctor -- python train.py --lr 3e-4``) in a child Python::

    python -m gpuscope.measure.profile_script --out summary.json -- train.py --lr 3e-4

The child runs the script with ``runpy.run_path`` (``-m pkg.mod`` with ``runpy.run_module``) as ``__main__``
with its own ``sys.argv``, inside ``profile.profile_run``. This was chosen over a ``sitecustomize`` hook because it
needs no writable site directory, works the same on CPU and CUDA, and a crash, ``sys.exit`` or out-of-memory in the
script still ends the profile and writes the summary (``script_status``: ok | exit | oom | error). It profiles the
whole run (no schedule): run a short version of the job (a few dozen steps). Scripts that spawn their own
processes (torchrun, DataLoader workers) are profiled in the main process only.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

from gpuscope.measure.device import is_oom
from gpuscope.measure.profile import SCHEMA, _allocator, profile_run
from gpuscope.measure.suite import _child_env


def run_script_profiled(argv: list[str], device: str | None = None) -> dict:
    """In this process: run ``argv`` (``script.py args`` or ``-m module args``) as ``__main__`` under profile_run."""
    import runpy

    if not argv:
        raise ValueError("no script given")
    status, error = "ok", None
    old_argv = list(sys.argv)
    with profile_run(device) as p:
        try:
            if argv[0] == "-m":
                sys.argv = [argv[1]] + argv[2:]
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(argv)
                sys.path.insert(0, str(Path(argv[0]).resolve().parent))
                runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                status, error = "exit", f"SystemExit({e.code})"
        except BaseException as e:  # the script's failure is a result
            status = "oom" if is_oom(e) else "error"
            error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            if status == "oom":
                p.extra["oom_memory"] = _allocator(p.dev, {})
        finally:
            sys.argv = old_argv
            gc.collect()
    s = p.summary
    s.update(script=list(argv), script_status=status, script_error=error)
    return s


def profile_script(command: list[str], device: str | None = None, timeout_s: float | None = None) -> dict:
    """``command`` as a user types it after ``gpuscope doctor --``: ``python train.py ...``, ``python -m pkg ...``
    or ``train.py ...``. Runs it in a child Python (this interpreter) under the profiler; returns the summary."""
    import subprocess
    import tempfile

    cmd = list(command)
    if cmd and (Path(cmd[0]).name.startswith("python") or cmd[0] == sys.executable):
        cmd = cmd[1:]
    if not cmd or not (cmd[0] == "-m" or cmd[0].endswith(".py") or Path(cmd[0]).is_file()):
        raise ValueError("the command must be a Python script: python script.py [args] or python -m module [args]")
    if cmd[0] != "-m" and not Path(cmd[0]).is_file():
        raise FileNotFoundError(cmd[0])
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / "summary.json"
        args = [sys.executable, "-m", "gpuscope.measure.profile_script", "--out", str(out)]
        if device:
            args += ["--device", device]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(args + ["--"] + cmd, env=_child_env(), timeout=timeout_s, capture_output=True,
                               text=True)
        except subprocess.TimeoutExpired:
            return {"schema": SCHEMA, "script": cmd, "script_status": "timeout", "wall_s": time.perf_counter() - t0}
        if not out.exists():
            return {"schema": SCHEMA, "script": cmd, "script_status": "error", "returncode": r.returncode,
                    "script_error": (r.stderr or "")[-500:], "wall_s": time.perf_counter() - t0}
        s = json.loads(out.read_text())
        s["script_stdout_tail"] = (r.stdout or "")[-2000:]
        s["script_stderr_tail"] = (r.stderr or "")[-2000:]
        return s


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out, device = None, None
    while argv and argv[0] != "--":
        flag = argv.pop(0)
        if flag == "--out":
            out = argv.pop(0)
        elif flag == "--device":
            device = argv.pop(0)
        else:
            print(f"unknown option {flag}", file=sys.stderr)
            return 2
    if argv and argv[0] == "--":
        argv.pop(0)
    s = run_script_profiled(argv, device)
    text = json.dumps(s, default=str)
    if out:
        Path(out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
