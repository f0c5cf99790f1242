"""The communication layer of the collectives benchmark (``gpuscope.measure.collectives.worker``): the watchdog that
turns a hung collective into a clear error, and ``Comm``, one rank's process group (backend, device, dtype) with the
calls that run under that watchdog: the op dispatch, seeded random buffers and the MAX over ranks."""

from __future__ import annotations

import argparse
import datetime
import os
import threading
import time

from gpuscope.measure.distributed import launch


# --- watchdog -----------------------------------------------------------------------------------------------------
class Watchdog:
    """A daemon thread that ends the process with a clear message when an armed call runs past its deadline."""

    def __init__(self, timeout_s: float, out: str | None):
        self.timeout_s, self.out = timeout_s, out
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._what = ""
        threading.Thread(target=self._run, name="gpuscope-collective-watchdog", daemon=True).start()

    def arm(self, what: str) -> None:
        with self._lock:
            self._what, self._deadline = what, time.monotonic() + self.timeout_s

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def expire(self, what: str | None = None) -> None:
        """Report the armed (or given) call as hung now: used when the backend's own timeout fired first."""
        launch.fail(self._message(what or self._what), self.out)

    def _message(self, what: str) -> str:
        return (f"{what} did not finish within {self.timeout_s:g} s (rank {os.environ.get('RANK', '?')} of "
                f"{os.environ.get('WORLD_SIZE', '?')}); a rank is missing or stuck, or the network is down")

    def _run(self) -> None:
        while True:
            time.sleep(min(0.1, self.timeout_s / 20))
            with self._lock:
                d, what = self._deadline, self._what
            if d is not None and time.monotonic() > d:
                launch.fail(self._message(what), self.out)


# --- the process group ------------------------------------------------------------------------------------------------
class Comm:
    """One rank of the benchmark: rank and world from torchrun's environment, the backend and device, the dtype,
    and the process group, initialised under the watchdog. ``Bench`` (collectives_bench.py) builds on it."""

    def __init__(self, a: argparse.Namespace):
        import torch
        import torch.distributed as dist

        self.a, self.torch, self.dist = a, torch, dist
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        backend = a.backend
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.backend = backend
        if backend == "nccl":
            if not torch.cuda.is_available():
                launch.fail("--backend nccl needs CUDA GPUs, and none is visible", a.out, code=2)
            if self.local_rank >= torch.cuda.device_count():
                launch.fail(f"local rank {self.local_rank} has no GPU: {torch.cuda.device_count()} visible "
                            f"on this node; use --nproc-per-node <= {torch.cuda.device_count()}", a.out, code=2)
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        self.dtype_name = a.dtype
        self.dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
        self.elem = torch.tensor([], dtype=self.dtype).element_size()
        self.dog = Watchdog(a.timeout, a.out)
        # The backend's own timeout is the fallback; ours fires first with the clear message.
        pg_timeout = datetime.timedelta(seconds=a.timeout + max(10.0, 0.5 * a.timeout))
        self.dog.arm("process-group initialisation (rendezvous of all ranks)")
        import inspect

        kw = {}
        if backend == "nccl" and "device_id" in inspect.signature(dist.init_process_group).parameters:
            kw["device_id"] = self.device  # binds the rank to its GPU (barrier, all_gather_object), torch >= 2.3
        dist.init_process_group(backend=backend, timeout=pg_timeout, **kw)
        self.dog.disarm()

    # --- helpers -----------------------------------------------------------------------------------------------
    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def guarded(self, what: str, fn):
        """Run fn() (a collective and the wait for it) under the watchdog; a backend timeout reads the same."""
        self.dog.arm(what)
        try:
            out = fn()
            self.sync()
            return out
        except RuntimeError as e:  # gloo/NCCL's own timeout, or a peer that went away
            self._backend_error(what, e)
            raise
        finally:
            self.dog.disarm()

    def _backend_error(self, what: str, e: BaseException) -> None:
        msg = " ".join(str(e).split())
        if "timeout" in msg.lower() or "timed out" in msg.lower():
            self.dog.expire(what)
        launch.fail(f"{what} failed on rank {self.rank}: {msg[:300]}", self.a.out)

    def rand(self, numel: int, rank: int, seed: int):
        g = self.torch.Generator(device=self.device)
        g.manual_seed(seed * 1_000_003 + rank)
        return self.torch.randn(numel, generator=g, device=self.device, dtype=self.dtype)

    def call(self, op: str, inp, out):
        d = self.dist
        if op == "all_reduce":
            return d.all_reduce(inp)
        if op == "all_gather":  # all_gather_into_tensor, renamed all_gather_single in newer torch
            return (getattr(d, "all_gather_single", None) or d.all_gather_into_tensor)(out, inp)
        if op == "reduce_scatter":  # reduce_scatter_tensor, renamed reduce_scatter_single in newer torch
            return (getattr(d, "reduce_scatter_single", None) or d.reduce_scatter_tensor)(out, inp)
        if op == "all_to_all":
            return d.all_to_all_single(out, inp)
        if op == "broadcast":
            return d.broadcast(inp, src=0)
        raise ValueError(op)

    def buffers(self, op: str, n_in: int, n_out: int, seed: int):
        inp = self.rand(n_in, self.rank, seed)
        out = None if op in ("all_reduce", "broadcast") else self.torch.empty(n_out, device=self.device,
                                                                               dtype=self.dtype)
        return inp, out

    def max_over_ranks(self, values: list[float]) -> list[float]:
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        self.guarded("all_reduce (MAX) of timings", lambda: self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX))
        return t.cpu().tolist()
