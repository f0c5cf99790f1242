"""Launch a distributed benchmark under torchrun and collect what its ranks report, as JSON lines.

The launcher is ``python -m torch.distributed.run`` (torchrun) and nothing else: it sets RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT for every worker, and ends the job when one worker fails.

Contract between the launcher and a worker module (reusable by any distributed benchmark)
-----------------------------------------------------------------------------------------
* The launcher sets ``$GPUSCOPE_DIST_OUT`` to a file path; a worker appends one JSON object per line to it with
  :func:`emit` (usually on rank 0 only). Each line is flushed and fsync'ed, so a job that dies keeps its
  finished lines.
* A worker that fails on purpose (a hung collective, a wrong result it cannot continue from) calls :func:`fail`:
  the message goes to stderr and, as ``{"gpuscope_error": message, "rank": r}``, to the output file; the
  process exits non-zero at once (``os._exit``, so no hung NCCL/gloo call can hold it), and torchrun then stops
  the other ranks. :func:`run_torchrun` raises :class:`DistributedRunError` with that message.
* No process outlives the job: torchrun dies with the launcher and each worker with torchrun (a parent-death
  signal, measure/runner/lifeline.py); each worker starts through ``measure/distributed/rank.py``, which registers
  its pid, and once the job ends, fails, times out or is interrupted, every registered worker's session is killed
  (torch elastic starts each worker in its own session, out of reach of torchrun's group).
* ``NCCL_NVLS_ENABLE=0`` is put in the workers' environment unless the caller's environment (or ``env``) sets
  it: NVLink SHARP (multicast) stays off, so measured busbw is the ring/tree figure that ``estimate/comm.py``
  models, and no job depends on the fabric manager's multicast support.

Example (how ``bench collectives`` and the DDP/FSDP benchmarks use it)::

    records = run_torchrun("gpuscope.measure.collectives.worker", ["--ops", "all_reduce"], nproc=2, timeout_s=600,
                           on_record=print)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuscope.measure.distributed.rank import LAUNCHER_ENV, RUN_DIR_ENV
from gpuscope.measure.runner import lifeline

OUT_ENV = "GPUSCOPE_DIST_OUT"
ERROR_KEY = "gpuscope_error"
NVLS_ENV = "NCCL_NVLS_ENABLE"
DEFAULT_RDZV_PORT = 29500
_SRC = str(Path(__file__).resolve().parents[3])  # the directory that holds the gpuscope package
RANK_ENTRY = "gpuscope.measure.distributed.rank"  # each worker: die with torchrun, register its pid, run the module

__all__ = ["DistributedRunError", "torchrun_command", "run_torchrun", "worker_env", "emit", "fail", "output_path",
           "OUT_ENV", "NVLS_ENV"]


class DistributedRunError(RuntimeError):
    """A torchrun job that failed, hung past its wall-clock limit, or reported an error.

    ``records``: the JSON lines the job wrote before it ended; ``returncode``; ``stderr_tail``: the end of its
    combined stderr (torchrun's and the workers')."""

    def __init__(self, message: str, records: list[dict] | None = None, returncode: int | None = None,
                 stderr_tail: str = ""):
        super().__init__(message)
        self.records = list(records or [])
        self.returncode = returncode
        self.stderr_tail = stderr_tail


# --- command line -------------------------------------------------------------------------------------------------
def torchrun_command(module: str, args: list[str], nproc: int, nnodes: int = 1, node_rank: int = 0,
                     rdzv_endpoint: str | None = None, rdzv_backend: str = "c10d", rdzv_id: str = "gpuscope",
                     python: str | None = None) -> list[str]:
    """The torchrun argv. One node: ``--standalone`` (torchrun picks a free local port, so two jobs on one host do
    not collide). Several nodes: ``--nnodes --node-rank --rdzv-backend --rdzv-endpoint HOST:PORT --rdzv-id``, the
    same on every node (with the c10d backend the endpoint is any one of the nodes, usually the first)."""
    _check_int("nproc", nproc, 1)
    _check_int("nnodes", nnodes, 1)
    _check_int("node_rank", node_rank, 0)
    if node_rank >= nnodes:
        raise ValueError(f"node_rank must be below nnodes ({nnodes}), not {node_rank}.")
    cmd = [python or sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    if nnodes == 1 and not rdzv_endpoint:
        cmd += ["--standalone", "--nnodes", "1"]
    else:
        if not rdzv_endpoint:
            raise ValueError("a job over several nodes needs rdzv_endpoint HOST:PORT (the first node, usually).")
        endpoint = rdzv_endpoint if ":" in rdzv_endpoint else f"{rdzv_endpoint}:{DEFAULT_RDZV_PORT}"
        cmd += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--rdzv-backend", rdzv_backend,
                "--rdzv-endpoint", endpoint, "--rdzv-id", str(rdzv_id)]
    cmd += ["--max-restarts", "0", "-m", module, *map(str, args)]
    return cmd


def _check_int(name: str, v, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, not {v!r}.")


def worker_env(env: dict | None = None, out_path: str | None = None) -> dict:
    """The workers' environment: ours + ``env``, gpuscope importable, NCCL_NVLS_ENABLE=0 unless set."""
    e = dict(os.environ)
    e.update({k: str(v) for k, v in (env or {}).items()})
    e["PYTHONPATH"] = _SRC + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.setdefault(NVLS_ENV, "0")
    e.setdefault("OMP_NUM_THREADS", "1")  # torchrun would set it with a warning per run
    e.setdefault("PYTHONUNBUFFERED", "1")
    if out_path is not None:
        e[OUT_ENV] = str(out_path)
    return e


# --- running ------------------------------------------------------------------------------------------------------
def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM torchrun's whole process group (it runs in its own session), then SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            if proc.poll() is None:
                proc.kill()
        try:
            proc.wait(timeout=wait)
            try:  # torchrun gone; its workers may still be alive in the group
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def json_dict_lines(text: str) -> list[dict]:
    """The lines of ``text`` that parse as JSON objects (blank, torn or foreign lines are skipped): how every
    results file and worker stream here is read."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


class _Reader:
    """Reads complete JSON lines appended to a file since the last call."""

    def __init__(self, path: Path):
        self.path, self.pos, self.records, self.errors = path, 0, [], []

    def poll(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.pos += end + 1
        new = []
        for rec in json_dict_lines(data[:end].decode("utf-8", "replace")):
            if ERROR_KEY in rec:
                self.errors.append(rec)
            else:
                self.records.append(rec)
                new.append(rec)
        return new


def run_torchrun(module: str, args: list[str], nproc: int, nnodes: int = 1, node_rank: int = 0,
                 rdzv_endpoint: str | None = None, timeout_s: float = 3600.0, env: dict | None = None, *,
                 rdzv_id: str = "gpuscope", on_record=None, poll_s: float = 0.2) -> list[dict]:
    """Run ``python -m torch.distributed.run ... -m module *args`` and return the JSON lines its ranks emitted.

    ``module`` must write its results with :func:`emit` (to ``$GPUSCOPE_DIST_OUT``). ``nproc`` processes per node,
    ``nnodes`` nodes (on several nodes run this same call on every node with its ``node_rank`` and one shared
    ``rdzv_endpoint`` HOST:PORT; only the node holding rank 0 gets records back, usually). ``timeout_s``: wall
    clock for the whole job; past it torchrun's process group is killed (SIGTERM, then SIGKILL). ``env``: extra
    environment for the workers (``NCCL_NVLS_ENABLE`` defaults to 0). ``on_record(rec)`` is called for each line
    as soon as it is written (store or print results while the job runs).

    Raises :class:`DistributedRunError` (with ``.records`` so far) when the job exits non-zero, reports an error
    with :func:`fail`, or runs past ``timeout_s``; ``ValueError`` for bad arguments.
    """
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}.")
    cmd = torchrun_command(RANK_ENTRY, [module, *args], nproc, nnodes, node_rank, rdzv_endpoint, rdzv_id=rdzv_id)
    with tempfile.TemporaryDirectory(prefix="gpuscope-dist-") as tmp:
        out_path, log_path, run_dir = Path(tmp) / "out.jsonl", Path(tmp) / "torchrun.log", Path(tmp) / "pids"
        out_path.touch()
        run_dir.mkdir()
        reader = _Reader(out_path)
        t0 = time.monotonic()
        with open(log_path, "w+b") as log:
            proc = _start(cmd, log, worker_env(env, str(out_path)), run_dir)
            try:
                timed_out = _watch(proc, reader, on_record, t0 + timeout_s, poll_s)
            finally:  # torchrun's group, then every worker's own session: nothing of this job lives on
                _kill_group_leftovers(proc)
                lifeline.kill_registered(run_dir)
            for rec in reader.poll():
                if on_record is not None:
                    on_record(rec)
            log.seek(0)
            tail = log.read().decode("utf-8", "replace")[-6000:]
    rc = proc.returncode
    if reader.errors:
        msgs = list(dict.fromkeys(e[ERROR_KEY] for e in reader.errors))
        raise DistributedRunError("; ".join(msgs), reader.records, rc, tail)
    if timed_out:
        raise DistributedRunError(f"the torchrun job ({module}, {nnodes} node(s) x {nproc} processes) did not "
                                  f"finish within {timeout_s:g} s and was killed", reader.records, rc, tail)
    if rc != 0:
        raise DistributedRunError(f"the torchrun job ({module}) exited with code {rc}: {_last_error(tail)}",
                                  reader.records, rc, tail)
    return reader.records


def _start(cmd: list[str], log, env: dict, run_dir: Path) -> subprocess.Popen:
    """torchrun in its own session, dying with this process (lifeline.preexec); its workers, started through
    measure/distributed/rank.py, die with torchrun and register their pids in ``run_dir``."""
    env = dict(env, **{LAUNCHER_ENV: str(os.getpid()), RUN_DIR_ENV: str(run_dir)})
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, preexec_fn=lifeline.preexec(os.getpid()))


def _watch(proc: subprocess.Popen, reader, on_record, deadline: float, poll_s: float) -> bool:
    """Wait for the torchrun job, handing each new line to ``on_record``; a rank that gave up (``fail``) or the
    job past ``deadline`` (time.monotonic) ends the whole process group. Returns whether it timed out."""
    try:
        while True:
            try:
                proc.wait(timeout=poll_s)
                return False
            except subprocess.TimeoutExpired:
                pass
            for rec in reader.poll():
                if on_record is not None:
                    on_record(rec)
            if reader.errors or time.monotonic() > deadline:
                # a rank gave up (fail) or the job is past its wall clock: end everything now
                _kill_group(proc, grace_s=2.0 if reader.errors else 5.0)
                return not reader.errors
    except BaseException:  # Ctrl-C or an error in on_record: never leave workers behind
        _kill_group(proc, grace_s=1.0)
        raise


def _kill_group_leftovers(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # workers torchrun may have left behind
    except (ProcessLookupError, PermissionError):
        pass


def _last_error(tail: str) -> str:
    """The most telling line of a failed job's log: the last exception line of a worker, else the last line."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error" in ln or "error:" in ln) and not ln.startswith(("torch.distributed.elastic", "[")):
            return ln[:400]
    return lines[-1][:400] if lines else "no output"


# --- worker side --------------------------------------------------------------------------------------------------
def output_path(explicit: str | None = None) -> str | None:
    """Where a worker writes its JSON lines: ``explicit`` (a --out option), else ``$GPUSCOPE_DIST_OUT``."""
    return explicit or os.environ.get(OUT_ENV) or None


def emit(record: dict, path: str | None = None) -> None:
    """Append one JSON line to ``path`` (default ``$GPUSCOPE_DIST_OUT``; stdout when neither), flushed and synced."""
    from gpuscope.measure.runner.run_case import clean

    line = json.dumps(clean(record)) + "\n"
    p = output_path(path)
    if p is None:
        sys.stdout.write(line)
        sys.stdout.flush()
        return
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def fail(message: str, path: str | None = None, code: int = 3) -> None:
    """Report ``message`` (stderr and the output file) and end this process at once with ``code``."""
    rank = os.environ.get("RANK")
    try:
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
        emit({ERROR_KEY: message, "rank": int(rank) if rank and rank.isdigit() else rank}, path)
    finally:
        os._exit(code)
