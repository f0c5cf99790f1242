"""Profile a user's script (``gpuscope doctor -- python train.py --lr 3e-4``) in a child Python::

    python -m gpuscope.measure.profile.script --out summary.json -- train.py --lr 3e-4

The child runs the script with ``runpy.run_path`` (``-m pkg.mod`` with ``runpy.run_module``) as ``__main__``
with its own ``sys.argv``, inside ``profile.profile_run``. This was chosen over a ``sitecustomize`` hook because it
needs no writable site directory, works the same on CPU and CUDA, and a crash, ``sys.exit`` or out-of-memory in the
script still ends the profile and writes the summary (``script_status``: ok | exit | oom | error). It profiles the
whole run (no schedule): run a short version of the job (a few dozen steps). Scripts that spawn their own
processes (torchrun, DataLoader workers) are profiled in the main process only.

Steps: every ``torch.optim`` optimizer step marks a step (a global post-step hook, synchronised), so a training
script gets step times with no change to its code. ``--bare`` runs the script once without the profiler and writes
only those marks: ``doctor --bare-run`` does that first, so the profiler's own host cost (which varied 5.6-15.5 us
per CPU event between two H200 runs of the same script, research/results/2026-11-29-h200-c) is measured per step
instead of estimated per event.
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import sys
import time
from pathlib import Path

from gpuscope.measure.device.device import Device, is_oom, pick_device
from gpuscope.measure.profile.profiler import profile_run
from gpuscope.measure.profile.summary import SCHEMA, allocator
from gpuscope.measure.runner.suite import child_env


@contextlib.contextmanager
def optimizer_steps(mark):
    """Call ``mark()`` after every optimizer step of any ``torch.optim`` optimizer while inside."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: mark())
    try:
        yield
    finally:
        handle.remove()


def _run(argv: list[str]) -> tuple[str, str | None, BaseException | None]:
    """Run ``argv`` (``script.py args`` or ``-m module args``) as ``__main__``; (status, error, exception)."""
    import runpy

    status, error, exc = "ok", None, None
    old_argv = list(sys.argv)
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
        status, exc = ("oom" if is_oom(e) else "error"), e
        error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    finally:
        sys.argv = old_argv
        gc.collect()
    return status, error, exc


def run_script_bare(argv: list[str], device: str | None = None) -> dict:
    """In this process: run the script without the profiler, marking each optimizer step (synchronised)."""
    if not argv:
        raise ValueError("no script given")
    dev = Device(pick_device(device))
    marks: list[float] = []

    def mark():
        dev.synchronize()
        marks.append(time.perf_counter())

    with optimizer_steps(mark):
        status, error, _ = _run(argv)
    steps = [b - a for a, b in zip(marks, marks[1:])]
    return {"script": list(argv), "script_status": status, "script_error": error, "steps": len(steps),
            "step_s_median": statistics.median(steps) if steps else None}


def run_script_profiled(argv: list[str], device: str | None = None, bare_step_s: float | None = None) -> dict:
    """In this process: run ``argv`` as ``__main__`` under profile_run, a step marked at each optimizer step."""
    if not argv:
        raise ValueError("no script given")
    with profile_run(device, bare_step_s=bare_step_s) as p:
        p.step_marks.clear()  # a script's steps start at its first optimizer step (before it: set-up), as bare
        with optimizer_steps(p.step):
            status, error, exc = _run(argv)
        if status == "oom":
            p.extra["oom_memory"] = allocator(p.dev, {})
    s = p.summary
    s.update(script=list(argv), script_status=status, script_error=error)
    return s


def profile_script(command: list[str], device: str | None = None, timeout_s: float | None = None,
                   bare_run: bool = False) -> dict:
    """``command`` as a user types it after ``gpuscope doctor --``: ``python train.py ...``, ``python -m pkg ...``
    or ``train.py ...``. Runs it in a child Python (this interpreter) under the profiler; returns the summary.
    ``bare_run``: run it once without the profiler first (its own child) and measure the profiler's cost per
    optimizer step against that run (``bare_step_s``; ``bare_run`` in the summary holds what it saw)."""
    import tempfile

    cmd = list(command)
    if cmd and (Path(cmd[0]).name.startswith("python") or cmd[0] == sys.executable):
        cmd = cmd[1:]
    if not cmd or not (cmd[0] == "-m" or cmd[0].endswith(".py") or Path(cmd[0]).is_file()):
        raise ValueError("the command must be a Python script: python script.py [args] or python -m module [args]")
    if cmd[0] != "-m" and not Path(cmd[0]).is_file():
        raise FileNotFoundError(cmd[0])
    with tempfile.TemporaryDirectory() as td:
        bare, extra = None, []
        if bare_run:
            bare = _child(td, "bare.json", ["--bare"], cmd, device, timeout_s)
            if bare.get("step_s_median"):
                extra = ["--bare-step-s", repr(bare["step_s_median"])]
            if bare.get("script_status") not in ("ok", None):
                return dict(bare, schema=SCHEMA, bare_run=bare)
        s = _child(td, "summary.json", extra, cmd, device, timeout_s)
        if bare is not None:
            s["bare_run"] = {k: bare.get(k) for k in ("script_status", "steps", "step_s_median")}
        return s


def _child(td: str, name: str, flags: list[str], cmd: list[str], device: str | None, timeout_s: float | None) -> dict:
    """One child Python running the script (profiled, or bare with ``--bare``); what it wrote, or why it did not."""
    import subprocess

    out = Path(td) / name
    args = [sys.executable, "-m", "gpuscope.measure.profile.script", "--out", str(out)] + flags
    if device:
        args += ["--device", device]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(args + ["--"] + cmd, env=child_env(), timeout=timeout_s, capture_output=True, text=True)
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
    out, device, bare, bare_step_s = None, None, False, None
    while argv and argv[0] != "--":
        flag = argv.pop(0)
        if flag == "--out":
            out = argv.pop(0)
        elif flag == "--device":
            device = argv.pop(0)
        elif flag == "--bare":
            bare = True
        elif flag == "--bare-step-s":
            bare_step_s = float(argv.pop(0))
        else:
            print(f"unknown option {flag}", file=sys.stderr)
            return 2
    if argv and argv[0] == "--":
        argv.pop(0)
    s = run_script_bare(argv, device) if bare else run_script_profiled(argv, device, bare_step_s)
    text = json.dumps(s, default=str)
    if out:
        Path(out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
