"""The collectives benchmark proper: ``Bench`` measures every (op, size) of the sweep (warm-up, timed samples,
the slowest rank's median), checks the result on fresh random data and writes one record per point. The
conventions are in ``gpuscope.measure.collectives.worker``' docstring; the process group and its guarded calls are in
collectives_comm.py, the environment and the estimate in collectives_env.py."""

from __future__ import annotations

import argparse
import math
import statistics
import time

from gpuscope.measure.distributed import launch
from gpuscope.measure.collectives.comm import Comm
from gpuscope.measure.collectives.env import EnvironmentMixin
from gpuscope.measure.collectives.sizes import element_counts, fmt_bytes, size_sweep, tolerance

SCHEMA = "gpuscope.collective/1"


# --- the benchmark ------------------------------------------------------------------------------------------------
class Bench(EnvironmentMixin, Comm):
    def __init__(self, a: argparse.Namespace):
        super().__init__(a)
        self.check_seed = a.seed

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
