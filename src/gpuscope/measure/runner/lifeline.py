"""No process outlives its run: children that die with their parent, and a run's registered processes ended.

* :func:`die_with_parent` (Linux): ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel kills this process when its
  parent goes, SIGKILL of the parent included. The signal fires when the parent *thread* that started this process
  exits, so every child here is started from the thread that then waits for it. The parent may have died between
  the fork and the prctl: afterwards this process checks that its parent is still the expected one (or, for a
  torchrun worker, that its parent's parent is the launcher) and ends itself at once when not.
* :func:`arm_from_env`: the same with the expected pid read from an environment variable, which is then removed, so
  this process's own children do not take it for theirs.
* :func:`preexec`: a ``preexec_fn`` for ``subprocess.Popen`` doing it in the child right after the fork, for a
  program we do not write (torchrun).
* :func:`register` / :func:`kill_registered`: a process writes ``"<pid> <start time>"`` into a run folder; the
  run's owner SIGKILLs each such process's group (torch elastic starts every worker in its own session, so killing
  torchrun's group never reaches them) and the process itself, if it is still the same process (its start time in
  /proc matches, so a reused pid is left alone).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
PARENT_ENV = "GPUSCOPE_PARENT_PID"
_LIBC = None
if sys.platform.startswith("linux"):  # loaded here, not after a fork: a preexec_fn must not load libraries
    try:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _PRCTL = _LIBC.prctl
    except (OSError, AttributeError):
        _LIBC = None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on, or None when the process is gone (or not on Linux)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes().decode("ascii", "replace")
    except OSError:
        return None
    return data.rsplit(")", 1)[-1].split()


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    f = _stat_fields(pid)
    return f[19] if f and len(f) > 19 else None


def parent_of(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[1]) if f and len(f) > 1 else None


def die_with_parent(parent: int | None = None, grandparent: int | None = None) -> bool:
    """Ask the kernel to SIGKILL this process when its parent exits; end at once when the expected ``parent``
    (or ``grandparent``: the parent of our parent) is already gone. Returns whether the signal was armed."""
    if _LIBC is None:
        return False
    armed = _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    ppid = os.getppid()
    if (parent is not None and ppid != parent) or (grandparent is not None and parent_of(ppid) != grandparent):
        os._exit(137)  # the parent died before the signal was armed: nobody waits for this process
    return armed


def arm_from_env(name: str = PARENT_ENV, grandparent: bool = False) -> bool:
    """:func:`die_with_parent` with the pid that ``$name`` holds (the variable is removed); nothing when unset."""
    value = os.environ.pop(name, "")
    if not value.isdigit():
        return False
    pid = int(value)
    return die_with_parent(grandparent=pid) if grandparent else die_with_parent(parent=pid)


def preexec(parent: int):
    """A ``preexec_fn``: in the child, right after the fork, die with ``parent`` (the pid of the process that
    calls Popen)."""
    def _arm() -> None:
        if _LIBC is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:
                os._exit(137)
    return _arm


def register(run_dir: str | os.PathLike | None) -> None:
    """Write this process's pid and start time into ``run_dir`` (nothing when None or the folder is gone)."""
    if not run_dir:
        return
    pid = os.getpid()
    try:
        Path(run_dir, f"{pid}.pid").write_text(f"{pid} {start_time(pid) or ''}\n")
    except OSError:
        pass


def kill_registered(run_dir: str | os.PathLike) -> list[int]:
    """SIGKILL the process group (or session) and the process of every pid registered in ``run_dir`` that is still
    the same process; returns those pids."""
    killed = []
    for f in sorted(Path(run_dir).glob("*.pid")):
        try:
            pid_text, _, started = f.read_text().strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if pid == os.getpid() or start_time(pid) is None or (started and start_time(pid) != started):
            continue
        try:
            if os.getpgid(pid) == pid:  # a session or group leader: its children go with it
                os.killpg(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        killed.append(pid)
    return killed
