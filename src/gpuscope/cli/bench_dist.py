"""`gpuscope bench collectives`: ``gpuscope.measure.collectives.worker`` under torchrun over a size sweep; each
(op, size) is stored (kind "collective", workloads/collective.py) as soon as rank 0 writes it, and printed with
time, algbw, busbw, the planner's predicted busbw and the error. A hung collective, a rank that died or the wall
timeout ends the job with exit code 1 (what was measured is kept); so does a wrong result.
"""

from __future__ import annotations

import typer

from gpuscope.cli import options
from gpuscope.cli.bench_run import Session, bench_gpu, console, exit_on_failures, finish, json_out
from gpuscope.errors import UserError
from gpuscope.workloads.collective import BACKENDS, DTYPES, OPS


def _ops(values: list[str] | None) -> list[str]:
    if not values:
        return list(OPS)
    out: list[str] = []
    for o in (x.strip().lower().replace("-", "_") for v in values for x in v.split(",")):
        if o and o not in OPS:
            raise UserError(f"--ops '{o}' is not one of {', '.join(OPS)}.")
        if o and o not in out:
            out.append(o)
    return out


def _size(name: str, text: str) -> int:
    from gpuscope.measure.collectives.worker import parse_size

    try:
        v = parse_size(text)
    except ValueError:
        raise UserError(f"--{name} '{text}' is not a number of bytes such as 8, 64K, 1M, 8G.") from None
    if v < 1:
        raise UserError(f"--{name} must be at least 1 byte, not {text}.")
    return v


def _check(dtype, backend, nnodes, node_rank, rdzv_endpoint, timeout, wall_timeout, warmup, min_iters,
           min_time) -> None:
    options.choice("dtype", dtype, DTYPES)
    options.choice("backend", backend, BACKENDS)
    for name, v in (("nnodes", nnodes), ("timeout", timeout), ("wall-timeout", wall_timeout)):
        if v is None or not v > 0:
            raise UserError(f"--{name} must be positive, not {v}.")
    if not 0 <= node_rank < nnodes:
        raise UserError(f"--node-rank must be from 0 to --nnodes - 1 ({nnodes - 1}), not {node_rank}.")
    if nnodes > 1 and not rdzv_endpoint:
        raise UserError("--rdzv-endpoint HOST[:PORT] is required with --nnodes > 1 (the first node's address).")
    if warmup is not None and warmup < 0:
        raise UserError(f"--warmup must be non-negative, not {warmup}.")
    if min_iters is not None and min_iters < 1:
        raise UserError(f"--min-iters must be positive, not {min_iters}.")
    if min_time is not None and min_time < 0:
        raise UserError(f"--min-time must be non-negative, not {min_time}.")


def _ranks(backend: str, nproc: int | None) -> tuple[bool, int]:
    """(on GPUs, processes per node) for the backend and the GPUs visible."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "nccl" and gpus == 0:
        raise UserError("--backend nccl needs CUDA GPUs and none is visible; use --backend gloo.")
    on_gpu = backend == "nccl" or (backend == "auto" and gpus > 0)
    nproc = (gpus if on_gpu else 2) if nproc is None else nproc
    if nproc < 1:
        raise UserError(f"--nproc must be a positive integer, not {nproc}.")
    if on_gpu and nproc > gpus:
        raise UserError(f"--nproc {nproc} is more than the {gpus} GPUs visible on this node (NCCL needs one "
                        "GPU per process).")
    return on_gpu, nproc


def _print(s: Session, points: list[dict]) -> None:
    from gpuscope.report.bench_view import collectives_table

    if s.as_json or not points:
        return
    console().print(collectives_table(points))
    why = points[0].get("estimate")
    if isinstance(why, str):
        s.note(f"pred busbw: {why}")
    wrong = sum(1 for r in points if not r.get("correct"))
    if wrong:
        s.note(f"{wrong} of {len(points)} points WRONG")


def collectives(
    nproc: int = typer.Option(None, "--nproc", help="Processes per node (default: the GPUs of this node, "
                              "else 2 on CPU)."),
    ops: list[str] = typer.Option(None, "--ops", help=f"Repeat or comma-separate: {', '.join(OPS)} (default: all)."),
    min_bytes: str = typer.Option("8", "--min-bytes", help="Smallest size S (nccl-tests' size; 8, 64K, 1M)."),
    max_bytes: str = typer.Option(None, "--max-bytes", help="Largest size S, doubling from --min-bytes "
                                  "(default 8G with NCCL, 64K on CPU)."),
    dtype: str = typer.Option("fp32", "--dtype", help="|".join(DTYPES) + "."),
    backend: str = typer.Option("auto", "--backend", help="nccl (GPUs), gloo (CPU tensors), auto: nccl when "
                                "CUDA is available."),
    nnodes: int = typer.Option(1, "--nnodes", help="Nodes (run the same command on each)."),
    node_rank: int = typer.Option(0, "--node-rank", help="This node's rank, 0 .. nnodes-1."),
    rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", help="HOST[:PORT] of the rendezvous (first node) "
                                      "for several nodes; port 29500 by default."),
    rdzv_id: str = typer.Option("gpuscope-collectives", "--rdzv-id", help="Job id shared by all nodes."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds one collective may take; past it the job ends "
                                  "with an error."),
    wall_timeout: float = typer.Option(7200.0, "--wall-timeout", help="Seconds for the whole job."),
    warmup: int = typer.Option(None, "--warmup", help="Untimed calls per point (default 5 GPU, 2 CPU)."),
    min_iters: int = typer.Option(None, "--min-iters", help="Timed samples at least (default 10 GPU, 5 CPU)."),
    min_time: float = typer.Option(None, "--min-time", help="Timed seconds per point at least "
                                   "(default 0.2 GPU, 0.02 CPU)."),
    gpu: str = bench_gpu(), db: str = options.db(), as_json: bool = json_out(),
) -> None:
    """Collectives (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast) over a size sweep under
    torchrun: time, algbw, busbw (nccl-tests), correctness, and the planner's prediction beside each."""
    from gpuscope.pipeline.dist import run_collectives

    options.require_torch()
    op_list, lo = _ops(ops), _size("min-bytes", min_bytes)
    _check(dtype, backend, nnodes, node_rank, rdzv_endpoint, timeout, wall_timeout, warmup, min_iters, min_time)
    on_gpu, nproc = _ranks(backend, nproc)
    options.known_gpu(gpu)
    hi = _size("max-bytes", max_bytes) if max_bytes else (8 * 2 ** 30 if on_gpu else 64 * 2 ** 10)
    if hi < lo:
        raise UserError(f"--max-bytes ({hi}) must not be below --min-bytes ({lo}).")
    args = ["--ops", ",".join(op_list), "--min-bytes", str(lo), "--max-bytes", str(hi), "--dtype", dtype,
            "--backend", backend, "--timeout", repr(float(timeout))]
    for flag, v in (("--warmup", warmup), ("--min-iters", min_iters), ("--min-time", min_time), ("--gpu", gpu)):
        if v is not None:
            args += [flag, str(v)]
    s = Session(db, "bench collectives", False, as_json)  # no --resume yet: every point is measured again
    try:
        points = run_collectives(s, args, nproc, nnodes, node_rank, rdzv_endpoint, rdzv_id, wall_timeout)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: {s.kept()} finished measurements of this run are kept in {s.store.path}.", err=True)
        s.close()
        raise typer.Exit(130)
    except BaseException:
        s.close()
        raise
    _print(s, points)
    run = finish(s)
    exit_on_failures(run)
    if any(not r.get("correct") for r in points):
        raise typer.Exit(1)


def register_collectives(bench: typer.Typer) -> None:
    bench.command("collectives")(collectives)
