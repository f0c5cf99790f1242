"""Profile a user's script (``gpuscope doctor -- python train.py --lr 3e-4``) in a child Python::

    python -m gpuscope.measure.profile.script --out summary.json -- train.py --lr 3e-4

The child runs the script with ``runpy.run_path`` (``-m pkg.mod`` with ``runpy.run_module``) as ``__main__``
with its own ``sys.argv``, inside ``profile.profile_run``. This was chosen over a ``sitecustomize`` hook because it
needs no writable site directory, works the same on CPU and CUDA, and a crash, ``sys.exit`` or out-of-memory in the
script still ends the profile and writes the summary (``script_status``: ok | exit | oom | error | interrupted,
with ``script_exit_code`` and ``script_traceback``). It records the script from its start to its first
``MAX_STEPS`` optimizer steps, then stops the profiler and lets the script run on (the profiler holds every event
until it stops; a script without optimizer steps is recorded whole: run a short version of it). Scripts that spawn their own
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
import re
import signal
import statistics
import sys
import time
from pathlib import Path

from gpuscope.measure.device.device import Device, is_oom, pick_device
from gpuscope.measure.profile.profiler import profile_run
from gpuscope.measure.profile.summary import SCHEMA, allocator
from gpuscope.measure.runner.suite import child_env

# The profiler keeps every event it records until it stops, so a long loop grows without bound: it records the
# first MAX_STEPS optimizer steps (the window the doctor's rules read) and stops; the script runs on without it.
MAX_STEPS = 30
_SHIELD = False  # set in the child process (main): SIGINT ignored once the script has ended
_PROFILER_LOG = re.compile(r"^(STAGE:|\[[WIE][ 0-9]|.*(ActivityProfiler|kineto|CUPTI|libkineto))")


@contextlib.contextmanager
def optimizer_steps(mark):
    """Call ``mark()`` after every optimizer step of any ``torch.optim`` optimizer while inside."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: mark())
    try:
        yield
    finally:
        handle.remove()


def _traceback_tail(exc: BaseException, n: int = 12) -> list[str]:
    """The last ``n`` lines of the traceback Python would have printed for ``exc`` (the script's own frames: this
    module's and runpy's are left out)."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename != __file__ and not f.filename.startswith("<frozen runpy")]
    lines = ["Traceback (most recent call last):"] + "".join(traceback.format_list(frames)).splitlines() if frames \
        else []
    return (lines + "".join(traceback.format_exception_only(type(exc), exc)).rstrip().splitlines())[-n:]


def _run(argv: list[str]) -> tuple[dict, BaseException | None]:
    """Run ``argv`` (``script.py args`` or ``-m module args``) as ``__main__``. Returns the outcome (script_status
    ok | exit | oom | error | interrupted, script_error, script_exit_code: what ``python script.py`` would have
    exited with, script_traceback: its last lines) and the exception."""
    import runpy

    out, exc = {"script_status": "ok", "script_error": None, "script_exit_code": 0, "script_traceback": None}, None
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
            code = e.code if isinstance(e.code, int) else 1
            out.update(script_status="exit", script_error=f"SystemExit({e.code})", script_exit_code=code)
    except KeyboardInterrupt as e:  # Ctrl-C, doctor's --timeout or a SIGTERM to doctor: the profile so far is kept
        out.update(script_status="interrupted", script_error="KeyboardInterrupt", script_exit_code=130,
                   script_traceback=_traceback_tail(e))
    except BaseException as e:  # the script's failure is a result
        exc = e
        out.update(script_status="oom" if is_oom(e) else "error", script_exit_code=1,
                   script_error=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}",
                   script_traceback=_traceback_tail(e))
    finally:
        sys.argv = old_argv
        if _SHIELD:  # the child: a second Ctrl-C must not cut the summary being written
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        gc.collect()
    return out, exc


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
        outcome, _ = _run(argv)
    steps = [b - a for a, b in zip(marks, marks[1:])]
    return {"script": list(argv), **outcome, "steps": len(steps),
            "step_s_median": statistics.median(steps) if steps else None}


def run_script_profiled(argv: list[str], device: str | None = None, bare_step_s: float | None = None,
                        max_steps: int | None = MAX_STEPS) -> dict:
    """In this process: run ``argv`` as ``__main__`` under profile_run, a step marked at each optimizer step; the
    profiler stops recording after ``max_steps`` steps (the script runs on, unprofiled)."""
    if not argv:
        raise ValueError("no script given")
    with profile_run(device, bare_step_s=bare_step_s, max_steps=max_steps) as p:
        p.step_marks.clear()  # a script's steps start at its first optimizer step (before it: set-up), as bare
        with optimizer_steps(p.step):
            outcome, exc = _run(argv)
        if outcome["script_status"] == "oom":
            p.extra["oom_memory"] = allocator(p.dev, {})
    s = p.summary
    s.update(script=list(argv), **outcome)
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


def error_lines(stderr: str, n: int = 12) -> list[str]:
    """The last ``n`` lines of a child's stderr, the profiler's own log lines (kineto's STAGE/[W] lines) left out:
    what the script itself said last (its traceback, where Python printed one)."""
    return [ln for ln in (stderr or "").rstrip().splitlines() if ln.strip() and not _PROFILER_LOG.match(ln)][-n:]


def _wait(proc, timeout_s: float | None) -> tuple[str, str, str | None]:
    """(stdout, stderr, why stopped) of the child: ``timeout`` after ``timeout_s`` or ``interrupted`` on Ctrl-C /
    SIGTERM, each after a SIGINT that lets the child end its profile and write what it had (60 s, then killed)."""
    import subprocess

    try:
        return (*proc.communicate(timeout=timeout_s), None)
    except subprocess.TimeoutExpired:
        why = "timeout"
    except KeyboardInterrupt:
        why = "interrupted"
    proc.send_signal(signal.SIGINT)
    try:
        return (*proc.communicate(timeout=60), why)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        return (*proc.communicate(), why)


def _child(td: str, name: str, flags: list[str], cmd: list[str], device: str | None, timeout_s: float | None) -> dict:
    """One child Python running the script (profiled, or bare with ``--bare``); what it wrote, or why it did not."""
    import subprocess

    out = Path(td) / name
    args = [sys.executable, "-m", "gpuscope.measure.profile.script", "--out", str(out)] + flags
    if device:
        args += ["--device", device]
    t0 = time.perf_counter()
    proc = subprocess.Popen(args + ["--"] + cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    stdout, stderr, why = _wait(proc, timeout_s)
    if not out.exists():
        rc = proc.returncode
        status = why or ("killed" if rc is not None and rc < 0 else "error")
        lines = error_lines(stderr)
        return {"schema": SCHEMA, "script": cmd, "script_status": status, "script_exit_code": rc,
                "script_error": lines[-1] if lines else f"the profiling process ended with code {rc}",
                "script_traceback": lines, "wall_s_total": time.perf_counter() - t0}
    s = json.loads(out.read_text())
    if why:  # stopped from outside: the script saw a KeyboardInterrupt
        s["script_status"] = why
    if s.get("script_status") != "ok" and not s.get("script_traceback"):  # sys.exit(n): what it printed last
        s["script_traceback"] = error_lines(stderr) or None
    s["script_stdout_tail"] = (stdout or "")[-2000:]
    s["script_stderr_tail"] = "\n".join(error_lines(stderr, 40))[-2000:]
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
    global _SHIELD
    _SHIELD = True
    s = run_script_bare(argv, device) if bare else run_script_profiled(argv, device, bare_step_s)
    text = json.dumps(s, default=str)
    if out:
        Path(out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
