"""Run a list of cases, each in its own subprocess, appending one JSON line per case to a results file.

- Each case runs as ``sys.executable -m gpuscope.measure.runner.run_case '<case>'`` under a per-case timeout, so an OOM,
  a crash or a hang ends only that case; a crash is recorded as ``status: error``, a hang as ``status: timeout``.
- A line is appended (and fsync'ed) as soon as its case finishes, so an interrupted suite keeps what it measured.
- Cases whose ``case_id`` is already in the file are skipped (resume). ``retry_failed=True`` runs again those whose
  recorded status is error or timeout.
- ``budget_s``: start no new case once this many seconds have passed, and cut the last case's timeout to what is
  left, so the suite ends inside a fixed wall-clock window (run it again to resume).
- A case's process dies with the suite's (a parent-death signal: lifeline.py), SIGKILL of the suite included; on
  a timeout, Ctrl-C or SIGTERM its whole process group is killed.
- The parent process never imports torch, so it holds no GPU memory while the cases run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from gpuscope.measure.distributed.launch import json_dict_lines
from gpuscope.measure.runner import lifeline, progress
from gpuscope.workloads import case_id, case_name, headline

SCHEMA = "gpuscope.measurement/1"
_SRC = str(Path(__file__).resolve().parents[3])  # the directory that holds the gpuscope package


def read_results(path) -> list[dict]:
    """The parseable lines of a results file (a torn last line is ignored)."""
    p = Path(path)
    if not p.exists():
        return []
    return [rec for rec in json_dict_lines(p.read_text()) if "case_id" in rec]


def _done_ids(path, retry_failed: bool) -> set[str]:
    done = set()
    for rec in read_results(path):
        r = rec.get("result") or {}
        if r.get("budget_cut") or (retry_failed and r.get("status") in ("error", "timeout")):
            continue  # a case stopped by the suite's budget (not by its own timeout) runs again on resume
        done.add(rec["case_id"])
    return done


def child_env(with_progress: bool = False, phase_budget_s: float | None = None) -> dict:
    """The environment of a case's process: this gpuscope first on the path, tokenizers single-threaded; with
    ``with_progress`` it tells its phases on stderr (progress.py); with ``phase_budget_s`` its timed phases end at
    that budget (progress.BUDGET_ENV; a budget this environment already sets is kept). This process's own
    environment is left as it is."""
    env = dict(os.environ)
    env.pop(progress.PROGRESS_ENV, None)  # asked by this suite only, not inherited
    if with_progress:
        env[progress.PROGRESS_ENV] = "1"
    if phase_budget_s is not None:
        env.setdefault(progress.BUDGET_ENV, f"{phase_budget_s:g}")
    env["PYTHONPATH"] = _SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env[lifeline.PARENT_ENV] = str(os.getpid())  # run_case dies with this process (lifeline.arm_from_env)
    return env


def _last_json(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "result" in rec:
                return rec
    return None


def _light_provenance() -> dict:
    from gpuscope.measure.device.provenance import provenance

    return provenance(None, with_torch=False)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group (start_new_session)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _read_streams(proc: subprocess.Popen, on_progress) -> tuple[list, list]:
    """Threads that read the case's stdout whole and its stderr line by line as it comes: a progress line goes
    to ``on_progress``, the others are kept (the last 400). Returns (the threads, [stdout, stderr])."""
    got: list = ["", ""]
    tail: deque = deque(maxlen=400)

    def read_out() -> None:
        got[0] = proc.stdout.read()

    def read_err() -> None:
        for line in proc.stderr:
            event = progress.parse(line)
            if event is None:
                tail.append(line)
                continue
            try:
                on_progress(event)
            except Exception:  # noqa: BLE001 - a display's failure never ends the case
                pass
        got[1] = "".join(tail)

    threads = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
    for t in threads:
        t.start()
    return threads, got


def _communicate(proc: subprocess.Popen, timeout_s: float, on_progress) -> tuple[str, str, bool]:
    """(stdout, stderr, timed out): the case's output once it ends or ``timeout_s`` passes (then its group is
    killed); with ``on_progress``, its progress lines are handed over as they come and left out of stderr."""
    if on_progress is None:
        try:
            out, err = proc.communicate(timeout=timeout_s)
            return out, err, False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            return out, err, True
    threads, got = _read_streams(proc, on_progress)
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.wait()
        timed_out = True
    for t in threads:  # bounded: a grandchild outside the group that still holds a pipe must not hang the suite
        t.join(timeout=10)
    return got[0], got[1], timed_out


def run_one(case: dict, timeout_s: float, on_progress=None, phase_budget_s: float | None = None) -> dict:
    """Run one case in a subprocess; always returns a record (ok, oom, error or timeout). ``on_progress(event)``
    (optional) gets the case's phases and repeats as they happen (progress.py); ``phase_budget_s`` (optional) is
    the case's timed-phase budget (child_env)."""
    cid = case_id(case, strict=False)
    cmd = [sys.executable, "-m", "gpuscope.measure.runner.run_case", json.dumps(case)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(on_progress is not None, phase_budget_s),
                            start_new_session=True)
    try:
        out, err, timed_out = _communicate(proc, timeout_s, on_progress)
    except BaseException:  # Ctrl-C or any other exit: the case runs in its own session, so end it too
        _kill_group(proc)
        raise
    if timed_out:
        return {"schema": SCHEMA, "case_id": cid, "case": case,
                "result": {"status": "timeout", "timeout_s": timeout_s, "stderr_tail": (err or "")[-2000:]},
                "provenance": _light_provenance(), "wall_s": time.perf_counter() - t0}
    rec = _last_json(out or "")
    if rec is None:
        rec = {"schema": SCHEMA, "case_id": cid, "case": case,
               "result": {"status": "error", "returncode": proc.returncode,
                          "error": f"no result line from run_case (exit code {proc.returncode})",
                          "stderr_tail": (err or "")[-2000:]},
               "provenance": _light_provenance()}
    rec["case_id"] = cid
    rec["returncode"] = proc.returncode
    rec["wall_s"] = time.perf_counter() - t0
    if rec["result"].get("status") == "error" and "stderr_tail" not in rec["result"]:
        rec["result"]["stderr_tail"] = (err or "")[-1000:]
    return rec


def summary_line(rec: dict) -> str:
    """One line for a finished case: its name, its headline (workloads.headline) and its wall time."""
    r = rec.get("result") or {}
    head = headline(r)
    return f"{case_name(rec.get('case') or {}, strict=False)}: {'ok ' if r.get('status') == 'ok' else ''}{head} " \
           f"({rec.get('wall_s', 0):.1f}s)"


def run_suite(cases: list[dict], out_path, timeout_s: float = 300, retry_failed: bool = False,
              budget_s: float | None = None, log=None) -> list[dict]:
    """Run ``cases`` (skipping those already in ``out_path``); return the records written by this call."""
    log = log or sys.stderr
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _done_ids(out, retry_failed)
    t_start = time.perf_counter()
    written: list[dict] = []
    n = len(cases)
    for i, case in enumerate(cases, 1):
        cid = case_id(case, strict=False)
        if cid in done:
            print(f"[{i}/{n}] {case_name(case, strict=False)}: skipped (already in {out.name})", file=log, flush=True)
            continue
        limit = timeout_s
        if budget_s is not None:
            left = budget_s - (time.perf_counter() - t_start)
            if left < 5:
                print(f"[{i}/{n}] {case_name(case, strict=False)}: not started (suite budget {budget_s:.0f}s spent; run again "
                      f"to resume)", file=log, flush=True)
                continue
            limit = min(timeout_s, left)
        rec = run_one(case, limit)
        if limit < timeout_s and rec["result"].get("status") == "timeout":
            rec["result"]["budget_cut"] = True
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())
        done.add(cid)
        written.append(rec)
        print(f"[{i}/{n}] {summary_line(rec)}", file=log, flush=True)
    return written
