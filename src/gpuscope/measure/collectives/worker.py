"""Collective-communication benchmark: the worker that torchrun starts on every rank.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m gpuscope.measure.collectives.worker \
        --ops all_reduce,all_gather --min-bytes 8 --max-bytes 8G --dtype bf16 --out coll.jsonl

(``gpuscope bench collectives`` builds this command through ``gpuscope.measure.distributed.launch.run_torchrun``.)

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
import os
import sys

from gpuscope.measure.distributed import launch
from gpuscope.measure.collectives.bench import SCHEMA, Bench  # noqa: F401  (re-exported: tests use coll.Bench)
from gpuscope.measure.collectives.sizes import (  # noqa: F401  (re-exported for the CLI and tests)
    element_counts, fmt_bytes, gpu_topology, parse_size, parse_topo_matrix, size_sweep, tolerance,
)

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
DTYPES = ("fp32", "bf16", "fp16")

# The worker's names, including those re-exported from bench.py and sizes.py: parse_size is imported by
# cli/bench_dist.py, and tests/test_collectives.py uses coll.Bench, coll.parse_topo_matrix, ...
__all__ = [
    "SCHEMA", "OPS", "DTYPES", "Bench", "parser", "main",
    "element_counts", "fmt_bytes", "gpu_topology", "parse_size", "parse_topo_matrix", "size_sweep", "tolerance",
]


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
    p = argparse.ArgumentParser(prog="python -m torch.distributed.run ... -m gpuscope.measure.collectives.worker",
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
