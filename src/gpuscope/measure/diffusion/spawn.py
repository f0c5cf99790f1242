"""Run the points of one build in their own process (measure/diffusion/child.py), each point's record handed to
``on_record`` as soon as the child prints it, so that what was measured is kept when a later point hangs or the
process dies. No torch here: the parent holds no device memory.

- ``timeout_s`` bounds each point: the child must print a point's line within that many seconds of the previous
  one (the first includes the build). On a timeout the child's process group is killed and the points left get
  ``status: timeout``; a child that exits early leaves ``status: error`` with the end of its stderr.
"""

from __future__ import annotations

import json
import os
from collections import deque
import queue
import signal
import subprocess
import sys
import threading
import time

from gpuscope.measure.device.provenance import provenance
from gpuscope.measure.runner.suite import SCHEMA, child_env
from gpuscope.workloads import case_id

CHILD = "gpuscope.measure.diffusion.child"


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's own process group (it was started in a new session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _reader(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


def _missing(case: dict, result: dict) -> dict:
    return {"schema": SCHEMA, "case_id": case_id(case, strict=False), "case": case, "result": result,
            "provenance": provenance(None, with_torch=False), "wall_s": None}


def run_group(cases: list[dict], timeout_s: float, on_record) -> None:
    """Measure ``cases`` (one build) in a child process; ``on_record(record)`` for each, in order."""
    proc = subprocess.Popen([sys.executable, "-m", CHILD, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(), start_new_session=True)
    err: deque = deque(maxlen=200)  # the end of the child's stderr
    q: queue.Queue = queue.Queue()
    threads = [threading.Thread(target=_reader, args=(proc.stdout, q), daemon=True),
               threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)]
    for t in threads:
        t.start()
    left = list(cases)
    try:
        proc.stdin.write(json.dumps(cases))
        proc.stdin.close()
        why = _collect(q, left, timeout_s, on_record)
    except BaseException:  # Ctrl-C: the child runs in its own session, so end it too
        kill_group(proc)
        raise
    if left:
        kill_group(proc)
    proc.wait()
    threads[1].join(timeout=5)
    tail = "".join(err)[-2000:]
    ended = {"status": "error", "error": f"the measuring process ended (exit code {proc.returncode}) before this "
                                         "point"}
    for c in left:
        res = {"status": "timeout", "timeout_s": timeout_s} if why == "timeout" else ended
        on_record(_missing(c, {"kind": "diffusion", "component": c.get("component"), **res, "stderr_tail": tail}))


def _collect(q: queue.Queue, left: list[dict], timeout_s: float, on_record) -> str:
    """Hand each record line to on_record until every case has one ("done"), the child's output ends ("ended")
    or a point overruns its time ("timeout")."""
    deadline = time.monotonic() + timeout_s
    while left:
        try:
            line = q.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return "timeout"
        if line is None:
            return "ended"
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or "result" not in rec:
            continue
        left.pop(0)
        on_record(rec)
        deadline = time.monotonic() + timeout_s
    return "done"
