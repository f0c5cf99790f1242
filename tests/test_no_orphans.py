"""No process outlives its run: after SIGINT, SIGTERM or SIGKILL of the parent (`gpuscope bench train`, `gpuscope
bench collectives`), and after a hung or stopped rank, none of the processes it started (the case's child, torchrun,
the workers) is alive 20 s later (they go at once, by the parent-death signal; 20 s leaves a loaded host time to
reap them, and is still far short of the runs' own 120 s and 100000 steps). The process table is read from /proc,
for the ids each run started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

if not sys.platform.startswith("linux"):
    pytest.skip("the parent-death signal and /proc are Linux's", allow_module_level=True)
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # end to end: several processes each (pyproject.toml's markers)
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from gpuscope.measure.distributed.launch import DistributedRunError, run_torchrun  # noqa: E402
from gpuscope.measure.runner import lifeline  # noqa: E402
from gpuscope.workloads.sets import TINY_LLAMA  # noqa: E402

GONE_WITHIN_S = 20.0


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            f = lifeline._stat_fields(int(d.name))
            if f:
                out[int(d.name)] = (int(f[1]), f[0])
    return out


def _descendants(root: int) -> set[int]:
    table, found, todo = _table(), set(), [root]
    while todo:
        p = todo.pop()
        kids = {pid for pid, (ppid, _) in table.items() if ppid == p and pid not in found}
        found |= kids
        todo.extend(kids)
    return found


def _alive(pids) -> set[int]:
    table = _table()
    return {p for p in pids if p in table and table[p][1] not in ("Z", "X")}


def _wait_for(pred, timeout: float, step: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(step)
    return pred()


def _assert_all_gone(pids: set[int], since: float | None = None) -> None:
    """None of ``pids`` alive GONE_WITHIN_S after ``since`` (time.monotonic; default now)."""
    left_s = GONE_WITHIN_S - (time.monotonic() - since if since is not None else 0.0)
    _wait_for(lambda: not _alive(pids), max(0.0, left_s))
    left = _alive(pids)
    assert not left, f"still alive {GONE_WITHIN_S:g} s later: {left} of {pids}"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _gpuscope(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpuscope", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _signal_and_check(proc: subprocess.Popen, sig: int, started: set[int]) -> None:
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130, err[-2000:]
    _assert_all_gone(started, since=t0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["int", "term", "kill"])
def test_bench_case_child_goes_with_its_parent(tmp_path, sig):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    proc = _gpuscope(["bench", "train", "--model", str(cfg), "--device", "cpu", "--micro-batch", "1", "--seq", "16",
                      "--steps", "100000", "--warmup", "0", "--db", str(tmp_path / "r.sqlite"), "--json"])
    try:
        # 180 s: on a loaded 2-core machine importing torch twice (bench, then its case process) took over 60 s
        child = _wait_for(lambda: proc.poll() is not None
                          or {p for p in _descendants(proc.pid) if "run_case" in _cmdline(p)}, 180)
        assert child is not True, f"bench exited {proc.returncode} before its case started: {proc.stderr.read()[-2000:]}"
        assert child, "the case's process never started"
        time.sleep(0.5)
        _signal_and_check(proc, sig, _descendants(proc.pid) | child)
    finally:
        proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["int", "term", "kill"])
def test_torchrun_and_workers_go_with_bench_collectives(tmp_path, sig):
    proc = _gpuscope(["bench", "collectives", "--backend", "gloo", "--nproc", "2", "--ops", "all_reduce",
                      "--min-bytes", "8", "--max-bytes", "8", "--min-time", "120", "--db", str(tmp_path / "r.sqlite")])
    try:
        workers = _wait_for(lambda: {p for p in _descendants(proc.pid) if "distributed.rank" in _cmdline(p)
                                     and "torch.distributed.run" not in _cmdline(p)}, 60)
        assert len(workers) == 2, "the two workers never started"
        time.sleep(1.0)
        started = _descendants(proc.pid)
        assert len(started) >= 3  # torchrun and its two workers
        _signal_and_check(proc, sig, started)
    finally:
        proc.kill()


def _stop_one_worker(seen: set[int], stopped: list[int]) -> None:
    """Watch this process's torchrun job; once both workers are up, SIGSTOP one of them."""
    def workers():
        return {p for p in _descendants(os.getpid()) if "distributed.rank" in _cmdline(p)
                and "torch.distributed.run" not in _cmdline(p)}
    got = _wait_for(lambda: len(workers()) == 2 and workers(), 60)
    seen |= _descendants(os.getpid())
    time.sleep(1.5)
    if got:
        pid = min(got)
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)


@pytest.mark.parametrize("fault", ["hung", "stopped"])
def test_no_rank_outlives_the_job(fault):
    # only what this job starts: earlier tests in this process may have left their own long-lived helpers
    # (a multiprocessing resource tracker, compile workers), which are this process's descendants too
    before = _descendants(os.getpid())
    seen: set[int] = set()
    stopped: list[int] = []
    args = ["--backend", "gloo", "--ops", "all_reduce", "--max-bytes", "16", "--timeout", "3"]
    if fault == "hung":
        args += ["--simulate-hang-rank", "1"]
        watcher = threading.Thread(target=lambda: seen.update(_wait_for(
            lambda: len(_descendants(os.getpid()) - before) >= 3 and _descendants(os.getpid()) - before, 60) or ()))
    else:
        args += ["--min-time", "120"]
        watcher = threading.Thread(target=_stop_one_worker, args=(seen, stopped))
    watcher.start()
    with pytest.raises(DistributedRunError):
        run_torchrun("gpuscope.measure.collectives.worker", args, nproc=2, timeout_s=25)
    watcher.join(5)
    seen -= before
    assert len(seen) >= 3 and (fault == "hung" or stopped), (seen, stopped)
    _assert_all_gone(seen)


def test_a_child_whose_parent_is_already_gone_ends_itself():
    code = ("import os, sys; from gpuscope.measure.runner import lifeline; "
            "lifeline.die_with_parent(parent=os.getppid() + 1); print('not reached')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 137 and "not reached" not in r.stdout
