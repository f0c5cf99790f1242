"""Collective-communication benchmark: the worker that torchrun starts on every rank.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m gpuscope.measure.collectives \
        --ops all_reduce,all_gather --min-bytes 8 --max-bytes 8G --dtype bf16 --out coll.jsonl

(``gpuscope bench collectives`` builds this command through ``gpuscope.measure.launch.run_torchrun``.)

What it measures, per (op, size), with nccl-tests' conventions (estimate/comm.py has the definitions):
* ops: all_reduce, all_gather (``all_gather_into_tensor``), reduce_scatter (``reduce_scatter_tensor``),
  all_to_all (``all_to_all_single``), broadcast (from rank 0).
* size S = the buffer nccl-tests prints: all_gather the full output (each rank sends S/n), reduce_scatter the
  full input (each rank receives S/n), the others the per-rank buffer. S is rounded down to whole elements
  (a multiple of n for the chunked ops); sizes below that are skipped. Sizes double from --min-bytes to
  --max-bytes.
* timing: --warmup untimed calls; then samples of ``inner`` back-to-back calls, each sample timed with CUDA
  events (NCCL) or ``perf_counter`` (gloo, where each call is synchronous), all ranks released together by a
  barrier before each sample; ``inner`` and the number of samples are chosen from the slowest rank's warm-up
  time so that there are at least --min-iters samples and --min-time seconds. The time of a sample is the
  slowest rank's (an all_reduce MAX of the per-rank times); the result is the median over samples, with min/max.
* algbw = S / t, busbw = algbw x F(op, n) (``bus_bandwidth_gbs``; all_reduce 2(n-1)/n, all_gather /
  reduce_scatter / all_to_all (n-1)/n, broadcast 1).
* correctness: after timing, one call on fresh random data (a new seed per check, every rank's input drawn from
  a generator seeded by (seed, rank), so any rank can rebuild the expected result): all_reduce = sum of all
  inputs; all_gather = rank r's input at chunk r; reduce_scatter = sum of the ranks' chunk r on rank r;
  all_to_all = chunk r of rank j at position j on rank r; broadcast = rank 0's input. Copies must be exact;
  reductions are compared in fp32 with a tolerance of the dtype (see ``tolerance``). Any rank's failure marks
  the point wrong (an all_reduce MAX of the error flags).
* estimate: on CUDA, ``collective_time`` on ``topology_for`` of the catalog entry of the detected GPU (or
  --gpu), with k = LOCAL_WORLD_SIZE ranks per node; predicted busbw and error = (predicted - measured) /
  measured time. On CPU: no estimate.
* environment: NCCL version, backend, world size, nodes, device name of every rank, NCCL_* variables, the
  ``nvidia-smi topo -m`` matrix per GPU pair (or "unavailable") and the provenance of rank 0.

Rank 0 writes one JSON line per (op, size) (``launch.emit``; ``--out`` or ``$GPUSCOPE_DIST_OUT``).

A hung collective: every collective call runs under a watchdog armed for --timeout seconds; past it the rank
reports "collective X of N bytes did not finish within T s" and exits non-zero (``launch.fail``), and torchrun
stops the others. The process group gets the same timeout plus a margin, so NCCL's/gloo's own timeout is the
fallback, never the first to fire.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import statistics
import sys
import threading
import time

from gpuscope.measure import launch

SCHEMA = "gpuscope.collective/1"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
DTYPES = ("fp32", "bf16", "fp16")
from gpuscope.measure.collectives_sizes import (  # noqa: F401  (re-exported for the CLI and tests)
    element_counts, fmt_bytes, gpu_topology, parse_size, parse_topo_matrix, size_sweep, tolerance,
)


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


# --- the benchmark ------------------------------------------------------------------------------------------------
class Bench:
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
        self.check_seed = a.seed

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

    # --- one (op, size) ----------------------------------------------------------------------------------------
    def measure(self, op: str, nbytes: int) -> dict | None:
        counts = element_counts(op, nbytes, self.elem, self.world)
        if counts is None:
            return None
        n_in, n_out = counts
        s_bytes = (n_out if op == "all_gather" else n_in) * self.elem  # nccl-tests' S after rounding
        what = f"collective {op} of {s_bytes} bytes"
        a = self.a
        inp, out = self.buffers(op, n_in, n_out, seed=self.check_seed + 7)
        if a.simulate_hang_rank is not None and self.rank == a.simulate_hang_rank:
            time.sleep(max(60.0, 10 * a.timeout))  # this rank "skips" the collective: the others must time out
            launch.fail(f"rank {self.rank} skipped {what} on purpose (--simulate-hang-rank)", a.out)

        # warm-up, timed on the host to size the samples
        t0 = time.perf_counter()
        for _ in range(a.warmup):
            self.guarded(what, lambda: self.call(op, inp, out))
        warm = (time.perf_counter() - t0) / max(1, a.warmup)
        warm = self.max_over_ranks([warm])[0]
        per_sample_target = a.min_time / a.min_iters
        inner = int(min(a.max_inner, max(1, per_sample_target // max(warm, 1e-7))))
        samples = int(min(a.max_iters, max(a.min_iters, math.ceil(a.min_time / max(warm * inner, 1e-9)))))

        times = [self.sample(op, inp, out, inner, what) for _ in range(samples)]
        times = self.max_over_ranks(times)
        t = statistics.median(times)
        del inp, out

        check = self.check(op, n_in, n_out, what)
        from gpuscope.estimate.comm import alg_bandwidth_gbs, bus_bandwidth_gbs, bus_factor

        rec = {
            "schema": SCHEMA, "op": op, "nbytes": s_bytes, "size": fmt_bytes(s_bytes), "requested_bytes": nbytes,
            "dtype": self.dtype_name, "count_in": n_in, "count_out": n_out, "world_size": self.world,
            "nnodes": self.world // max(1, self.local_world), "nproc_per_node": self.local_world,
            "backend": self.backend, "device": self.device.type,
            "time_s": t, "time_min_s": min(times), "time_max_s": max(times),
            "rel_iqr": _rel_iqr(times), "samples": samples, "iters_per_sample": inner, "warmup": a.warmup,
            "timer": "cuda_event" if self.device.type == "cuda" else "perf_counter+barrier",
            "time_convention": "median over samples of the slowest rank's mean time per call in a sample",
            "algbw_gbs": alg_bandwidth_gbs(s_bytes, t), "busbw_gbs": bus_bandwidth_gbs(op, s_bytes, self.world, t),
            "bus_factor": bus_factor(op, self.world),
            "formula": "algbw = S/t (GB/s, 1e9); busbw = algbw x F(op, n) (nccl-tests PERFORMANCE.md)",
            **check,
        }
        rec["status"] = "ok" if check["correct"] else "wrong"
        rec.update(self.estimate(op, s_bytes, t))
        return rec

    def sample(self, op, inp, out, inner: int, what: str) -> float:
        torch = self.torch
        self.guarded("barrier before a timed sample", lambda: self.dist.barrier())
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.dog.arm(what)
            start.record()
            for _ in range(inner):
                self.call(op, inp, out)
            end.record()
            end.synchronize()
            self.dog.disarm()
            return start.elapsed_time(end) / 1e3 / inner
        t0 = time.perf_counter()
        self.dog.arm(what)
        try:
            for _ in range(inner):
                self.call(op, inp, out)  # gloo: synchronous
        except RuntimeError as e:
            self._backend_error(what, e)
            raise
        finally:
            self.dog.disarm()
        return (time.perf_counter() - t0) / inner

    def check(self, op: str, n_in: int, n_out: int, what: str) -> dict:
        """One call on fresh random data; compare with the result rebuilt from every rank's seeded input."""
        torch, world, r = self.torch, self.world, self.rank
        self.check_seed += 1
        seed = self.check_seed
        inp, out = self.buffers(op, n_in, n_out, seed)
        self.guarded(what, lambda: self.call(op, inp, out))
        got = inp if op in ("all_reduce", "broadcast") else out
        exact = op in ("all_gather", "all_to_all", "broadcast")
        if op == "all_reduce":
            exp = torch.zeros(n_in, device=self.device, dtype=torch.float32)
            for j in range(world):
                exp += self.rand(n_in, j, seed).float()
        elif op == "broadcast":
            exp = self.rand(n_in, 0, seed)
        elif op == "all_gather":
            exp = torch.cat([self.rand(n_in, j, seed) for j in range(world)])
        elif op == "reduce_scatter":
            exp = torch.zeros(n_out, device=self.device, dtype=torch.float32)
            for j in range(world):
                exp += self.rand(n_in, j, seed)[r * n_out:(r + 1) * n_out].float()
        else:  # all_to_all: position j of rank r's output holds chunk r of rank j's input
            c = n_in // world
            exp = torch.cat([self.rand(n_in, j, seed)[r * c:(r + 1) * c] for j in range(world)])
        tol = 0.0 if exact else tolerance(self.dtype_name, world)
        bad, err = 0.0, 0.0
        step = 1 << 26  # compare in slices: a few GiB buffers need no extra full-size temporaries
        for i in range(0, got.numel(), step):
            g, e = got[i:i + step], exp[i:i + step]
            diff = (g.float() - e.float()).abs_()
            err = max(err, float(diff.max().item()))
            if exact:
                bad += float((g != e).sum().item())
            else:
                bad += float((diff > e.abs().add_(1).mul_(tol)).sum().item())
            del diff
        worst = self.max_over_ranks([bad, err])
        return {"correct": worst[0] == 0, "check": "exact" if exact else "fp32 reference, |d| <= tol x (1 + |ref|)",
                "check_tolerance": tol, "check_max_abs_err": worst[1], "check_mismatches": int(worst[0]),
                "check_seed": seed}

    def estimate(self, op: str, s_bytes: int, t: float) -> dict:
        hw = getattr(self, "_hw", None)
        if hw is None:
            return {"predicted_time_s": None, "predicted_busbw_gbs": None, "error": None,
                    "estimate": self._no_estimate}
        from gpuscope.estimate.comm import bus_bandwidth_gbs, collective_time

        pred = collective_time(op, s_bytes, self.world, self._topo,
                               gpus_per_node_in_group=min(self.local_world, self._topo.gpus_per_node))
        return {"predicted_time_s": pred,
                "predicted_busbw_gbs": bus_bandwidth_gbs(op, s_bytes, self.world, pred) if pred > 0 else None,
                "error": (pred - t) / t, "error_convention": "(predicted - measured) / measured time",
                "estimate": {"hardware": hw.key, "calibrated": bool(getattr(hw, "is_calibrated", False)),
                             "topology": self._topo.name}}

    # --- environment -------------------------------------------------------------------------------------------
    def environment(self) -> dict:
        torch = self.torch
        from gpuscope.measure.device import Device

        dev = Device(str(self.device))
        me = {"rank": self.rank, "hostname": os.uname().nodename, "device": str(self.device),
              "device_name": dev.device_name()}
        everyone: list = [None] * self.world
        self.guarded("all_gather_object of device names", lambda: self.dist.all_gather_object(everyone, me))
        nccl = None
        if self.backend == "nccl":
            try:
                v = torch.cuda.nccl.version()
                nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except Exception:
                nccl = None
        self._hw, self._topo, self._no_estimate = None, None, "no estimate: measured on CPU"
        if self.device.type == "cuda":
            self._load_estimate(me["device_name"])
        env = {
            "backend": self.backend, "world_size": self.world, "nproc_per_node": self.local_world,
            "nnodes": self.world // max(1, self.local_world), "nccl_version": nccl, "torch": torch.__version__,
            "ranks": everyone, "device_names": sorted({e["device_name"] for e in everyone}),
            "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TORCH_NCCL_"))},
            "gpu_topology": gpu_topology() if self.device.type == "cuda" else "unavailable",
        }
        if self.rank == 0:
            from gpuscope.measure.provenance import provenance

            env["provenance"] = provenance(dev)
        return env

    def _load_estimate(self, device_name: str) -> None:
        from gpuscope.errors import UserError
        from gpuscope.estimate.comm import topology_for
        from gpuscope.specs.hardware import load_hardware

        self._hw, self._topo = None, None
        try:
            if self.a.gpu:
                hw = load_hardware(self.a.gpu)
            else:
                from gpuscope.measure.calibrate import catalog_key_for

                key = catalog_key_for(device_name)
                if key is None:
                    self._no_estimate = (f"no estimate: device '{device_name}' is not in the hardware catalog; "
                                         "pass --gpu NAME")
                    return
                hw = load_hardware(key)
            self._topo = topology_for(hw, self.world, gpus_per_node=min(self.local_world, self.world))
            self._hw = hw
        except UserError as e:
            self._no_estimate = f"no estimate: {e}"

    def run(self) -> int:
        env = self.environment()
        a = self.a
        for op in a.ops:
            for nbytes in size_sweep(a.min_bytes, a.max_bytes):
                rec = self.measure(op, nbytes)
                if rec is None:
                    continue
                if self.rank == 0:
                    rec["env"] = env
                    launch.emit(rec, a.out)
        self.guarded("final barrier", lambda: self.dist.barrier())
        self.dist.destroy_process_group()
        return 0


def _rel_iqr(xs: list[float]) -> float | None:
    if len(xs) < 4:
        return None
    q = statistics.quantiles(xs, n=4)
    med = statistics.median(xs)
    return (q[2] - q[0]) / med if med > 0 else None


def _ops(text: str) -> list[str]:
    out = []
    for o in text.split(","):
        o = o.strip().lower().replace("-", "_")
        if not o:
            continue
        if o not in OPS:
            raise argparse.ArgumentTypeError(f"op '{o}' is not one of {', '.join(OPS)}")
        out.append(o)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch.distributed.run ... -m gpuscope.measure.collectives",
                                description="Collective benchmark worker (one process per rank, under torchrun).")
    p.add_argument("--ops", type=_ops, default=list(OPS), help=f"comma-separated: {', '.join(OPS)}")
    p.add_argument("--min-bytes", type=parse_size, default=None, help="smallest S (default 8 on GPU, 8 on CPU)")
    p.add_argument("--max-bytes", type=parse_size, default=None, help="largest S (default 8G on GPU, 64K on CPU)")
    p.add_argument("--dtype", choices=DTYPES, default="fp32")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls per point (default 5 GPU, 2 CPU)")
    p.add_argument("--min-iters", type=int, default=None, help="timed samples at least (default 10 GPU, 5 CPU)")
    p.add_argument("--min-time", type=float, default=None, help="timed seconds at least (default 0.2 GPU, 0.02 CPU)")
    p.add_argument("--max-iters", type=int, default=200, help="timed samples at most")
    p.add_argument("--max-inner", type=int, default=100, help="back-to-back calls per sample at most")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one collective may take before the job "
                   "ends with an error")
    p.add_argument("--gpu", default=None, help="hardware for the estimate (catalog name or TOML; default: detected)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", default=None, help="JSON lines file (default $GPUSCOPE_DIST_OUT, else stdout)")
    p.add_argument("--simulate-hang-rank", type=int, default=None,
                   help="testing: this rank skips the first collective, so the others must hit --timeout")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    os.environ.setdefault(launch.NVLS_ENV, "0")  # before NCCL initialises: no NVLink SHARP (multicast)
    import torch

    gpu = a.backend == "nccl" or (a.backend == "auto" and torch.cuda.is_available())
    a.min_bytes = a.min_bytes if a.min_bytes is not None else 8
    a.max_bytes = a.max_bytes if a.max_bytes is not None else (8 * 2 ** 30 if gpu else 64 * 2 ** 10)
    a.warmup = a.warmup if a.warmup is not None else (5 if gpu else 2)
    a.min_iters = a.min_iters if a.min_iters is not None else (10 if gpu else 5)
    a.min_time = a.min_time if a.min_time is not None else (0.2 if gpu else 0.02)
    for name in ("warmup", "min_iters", "max_iters", "max_inner"):
        if getattr(a, name) < (0 if name == "warmup" else 1):
            launch.fail(f"--{name.replace('_', '-')} must be a positive integer, not {getattr(a, name)}", a.out, 2)
    if not a.timeout > 0 or not a.min_time >= 0:
        launch.fail("--timeout must be positive and --min-time non-negative", a.out, 2)
    try:
        size_sweep(a.min_bytes, a.max_bytes)
    except ValueError as e:
        launch.fail(str(e).rstrip("."), a.out, 2)
    return Bench(a).run()


if __name__ == "__main__":
    sys.exit(main())
