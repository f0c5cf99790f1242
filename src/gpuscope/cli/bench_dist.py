"""Distributed benchmarks of `gpuscope bench`: collectives (here), DDP/FSDP training and compression (to come).

`gpuscope bench collectives` starts ``gpuscope.measure.collectives.worker`` under torchrun
(``gpuscope.measure.distributed.launch.run_torchrun``), stores each (op, size) in the results database (kind "collective")
as soon as rank 0 writes it, and prints op, size, time, algbw, busbw, the planner's predicted busbw and the error.
A hung collective ends the job with "collective X of N bytes did not finish within T s" and exit code 1.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

import typer

from gpuscope.cli.bench import DB_HELP, GPU_HELP, JSON_HELP, require_torch
from gpuscope.cli.bench_run import BENCH_SCHEMA, Session, _console
from gpuscope.errors import UserError

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
COLLECTIVE_DTYPES = ("fp32", "bf16", "fp16")
BACKENDS = ("auto", "nccl", "gloo")
WORKER = "gpuscope.measure.collectives.worker"


def register_distributed(bench: typer.Typer) -> None:
    """Add the distributed benchmarks to the `bench` group."""
    _register_collectives(bench)
    from gpuscope.cli.bench_dist_train import register_dist_train  # DDP/FSDP training, gradient compression

    register_dist_train(bench)


# --- helpers (pure: no torch) -------------------------------------------------------------------------------------
def _ops(values: list[str] | None) -> list[str]:
    if not values:
        return list(COLLECTIVE_OPS)
    out: list[str] = []
    for v in values:
        for o in v.split(","):
            o = o.strip().lower().replace("-", "_")
            if not o:
                continue
            if o not in COLLECTIVE_OPS:
                raise UserError(f"--ops '{o}' is not one of {', '.join(COLLECTIVE_OPS)}.")
            if o not in out:
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


def collective_key(rec: dict) -> tuple[str, str, dict]:
    """(key, name, config) of one measured point, as stored."""
    config = {"op": rec["op"], "nbytes": rec["nbytes"], "dtype": rec["dtype"], "backend": rec["backend"],
              "world_size": rec["world_size"], "nnodes": rec["nnodes"], "nproc_per_node": rec["nproc_per_node"],
              "device": rec.get("device")}
    name = (f"collective/{rec['op']}/{rec['dtype']}/{rec['nbytes']}B/{rec['backend']}/"
            f"{rec['nnodes']}x{rec['nproc_per_node']}")
    digest = hashlib.sha1(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:8]
    return f"{name}#{digest}", name, config


def _fmt_time(s) -> str:
    if not isinstance(s, (int, float)):
        return "-"
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.3f} ms"


def _fmt_gbs(v) -> str:
    return "-" if not isinstance(v, (int, float)) else (f"{v:.4g}" if v >= 1e-3 else f"{v:.2e}")


def collectives_table(rows: list[dict]):
    from rich.table import Table

    first = rows[0] if rows else {}
    env = first.get("env") or {}
    t = Table(title=(f"collectives: {first.get('backend', '?')} {first.get('world_size', '?')} ranks "
                     f"({first.get('nnodes', '?')}x{first.get('nproc_per_node', '?')}), {first.get('dtype', '?')}, "
                     f"NCCL {env.get('nccl_version') or '-'}; GB/s decimal"))
    for col in ("op", "size", "time", "algbw", "busbw", "pred busbw", "error", "check"):
        t.add_column(col, justify="left" if col in ("op", "check") else "right")
    for r in rows:
        err = r.get("error")
        t.add_row(r["op"], r["size"], _fmt_time(r.get("time_s")), _fmt_gbs(r.get("algbw_gbs")),
                  _fmt_gbs(r.get("busbw_gbs")), _fmt_gbs(r.get("predicted_busbw_gbs")),
                  "-" if err is None else f"{err:+.1%}", "ok" if r.get("correct") else "WRONG")
    return t


def _provenance(rec: dict) -> dict:
    env = dict(rec.get("env") or {})
    prov = dict(env.pop("provenance", None) or {})
    prov.update(parent_argv=list(sys.argv), distributed=env)
    if not prov.get("device_name") and env.get("device_names"):
        prov["device_name"] = ", ".join(env["device_names"])
    return prov


# --- the command --------------------------------------------------------------------------------------------------
def _register_collectives(bench: typer.Typer) -> None:
    @bench.command("collectives")
    def collectives(
        nproc: int = typer.Option(None, "--nproc", help="Processes per node (default: the GPUs of this node, "
                                  "else 2 on CPU)."),
        ops: list[str] = typer.Option(None, "--ops", help="Repeat or comma-separate: "
                                      f"{', '.join(COLLECTIVE_OPS)} (default: all)."),
        min_bytes: str = typer.Option("8", "--min-bytes", help="Smallest size S (nccl-tests' size; 8, 64K, 1M)."),
        max_bytes: str = typer.Option(None, "--max-bytes", help="Largest size S, doubling from --min-bytes "
                                      "(default 8G with NCCL, 64K on CPU)."),
        dtype: str = typer.Option("fp32", "--dtype", help="fp32|bf16|fp16."),
        backend: str = typer.Option("auto", "--backend", help="nccl (GPUs), gloo (CPU tensors), auto: nccl when "
                                    "CUDA is available."),
        nnodes: int = typer.Option(1, "--nnodes", help="Nodes (run the same command on each)."),
        node_rank: int = typer.Option(0, "--node-rank", help="This node's rank, 0 .. nnodes-1."),
        rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", help="HOST[:PORT] of the rendezvous (first "
                                          "node) for several nodes; port 29500 by default."),
        rdzv_id: str = typer.Option("gpuscope-collectives", "--rdzv-id", help="Job id shared by all nodes."),
        timeout: float = typer.Option(300.0, "--timeout", help="Seconds one collective may take; past it the job "
                                      "ends with an error."),
        wall_timeout: float = typer.Option(7200.0, "--wall-timeout", help="Seconds for the whole job."),
        warmup: int = typer.Option(None, "--warmup", help="Untimed calls per point (default 5 GPU, 2 CPU)."),
        min_iters: int = typer.Option(None, "--min-iters", help="Timed samples at least (default 10 GPU, 5 CPU)."),
        min_time: float = typer.Option(None, "--min-time", help="Timed seconds per point at least "
                                       "(default 0.2 GPU, 0.02 CPU)."),
        gpu: str = typer.Option(None, "--gpu", help=GPU_HELP),
        db: str = typer.Option(None, "--db", help=DB_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Collectives (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast) over a size sweep under
        torchrun: time, algbw, busbw (nccl-tests), correctness, and the planner's prediction beside each."""
        require_torch()
        op_list = _ops(ops)
        lo = _size("min-bytes", min_bytes)
        if dtype not in COLLECTIVE_DTYPES:
            raise UserError(f"--dtype '{dtype}' is not one of {', '.join(COLLECTIVE_DTYPES)}.")
        if backend not in BACKENDS:
            raise UserError(f"--backend '{backend}' is not one of {', '.join(BACKENDS)}.")
        for name, v in (("nnodes", nnodes), ("timeout", timeout), ("wall-timeout", wall_timeout)):
            if v is None or not v > 0:
                raise UserError(f"--{name} must be positive, not {v}.")
        if not 0 <= node_rank < nnodes:
            raise UserError(f"--node-rank must be from 0 to --nnodes - 1 ({nnodes - 1}), not {node_rank}.")
        if nnodes > 1 and not rdzv_endpoint:
            raise UserError("--rdzv-endpoint HOST[:PORT] is required with --nnodes > 1 (the first node's address).")
        for name, v in (("warmup", warmup), ("min-iters", min_iters)):
            if v is not None and v < (0 if name == "warmup" else 1):
                raise UserError(f"--{name} must be {'non-negative' if name == 'warmup' else 'positive'}, not {v}.")
        if min_time is not None and min_time < 0:
            raise UserError(f"--min-time must be non-negative, not {min_time}.")

        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if backend == "nccl" and gpus == 0:
            raise UserError("--backend nccl needs CUDA GPUs and none is visible; use --backend gloo.")
        on_gpu = backend == "nccl" or (backend == "auto" and gpus > 0)
        if nproc is None:
            nproc = gpus if on_gpu else 2
        if nproc < 1:
            raise UserError(f"--nproc must be a positive integer, not {nproc}.")
        if on_gpu and nproc > gpus:
            raise UserError(f"--nproc {nproc} is more than the {gpus} GPUs visible on this node (NCCL needs one "
                            "GPU per process).")
        hi = _size("max-bytes", max_bytes) if max_bytes else (8 * 2 ** 30 if on_gpu else 64 * 2 ** 10)
        if hi < lo:
            raise UserError(f"--max-bytes ({hi}) must not be below --min-bytes ({lo}).")

        args = ["--ops", ",".join(op_list), "--min-bytes", str(lo), "--max-bytes", str(hi), "--dtype", dtype,
                "--backend", backend, "--timeout", repr(float(timeout))]
        for flag, v in (("--warmup", warmup), ("--min-iters", min_iters), ("--min-time", min_time), ("--gpu", gpu)):
            if v is not None:
                args += [flag, str(v)]

        s = Session(db, "bench collectives", False, as_json)  # no --resume yet: every point is measured again
        rows: list[dict] = []

        def on_record(rec: dict) -> None:
            key, name, config = collective_key(rec)
            result = {k: v for k, v in rec.items() if k != "env"}
            mid = s.store.put(s.run_id, key, "collective", name, config, result, _provenance(rec))
            s.out.append({"id": mid, "key": key, "name": name, "skipped": False, "status": result["status"],
                          "result": result})
            rows.append(rec)
            pred = rec.get("predicted_busbw_gbs")
            s.note(f"[{mid}] {rec['op']} {rec['size']}: {_fmt_time(rec['time_s'])}, busbw "
                   f"{_fmt_gbs(rec['busbw_gbs'])} GB/s" + (f" (predicted {_fmt_gbs(pred)})" if pred else "")
                   + ("" if rec.get("correct") else " WRONG RESULT"))

        _run(s, args, nproc, nnodes, node_rank, rdzv_endpoint, rdzv_id, wall_timeout, on_record, rows)


def _run(s: Session, args, nproc, nnodes, node_rank, rdzv_endpoint, rdzv_id, wall_timeout, on_record, rows) -> None:
    from gpuscope.measure.distributed.launch import DistributedRunError, run_torchrun
    from gpuscope.measure.run_case import clean

    t0 = time.perf_counter()
    s.note(f"collectives: torchrun {nnodes} node(s) x {nproc} processes ...")
    error = None
    try:
        run_torchrun(WORKER, args, nproc, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
                     timeout_s=wall_timeout, rdzv_id=rdzv_id, on_record=on_record)
    except DistributedRunError as e:
        error = str(e)
    except KeyboardInterrupt:
        print(f"interrupted: {len(s.out)} finished measurements of this run are kept in {s.store.path}.",
              file=sys.stderr)
        s.close()
        raise typer.Exit(130)
    except BaseException:
        s.close()
        raise
    wall = time.perf_counter() - t0
    if s.as_json:
        doc = {"schema": BENCH_SCHEMA, "db": str(s.store.path), "run_id": s.run_id, "wall_s": wall,
               "measurements": s.out}
        if error:
            doc["error"] = error
        typer.echo(json.dumps(clean(doc), indent=1))
    else:
        if rows:
            _console().print(collectives_table(rows))
            why = rows[0].get("estimate")
            if isinstance(why, str):
                s.note(f"pred busbw: {why}")
        wrong = sum(1 for r in rows if not r.get("correct"))
        s.note(f"{len(s.out)} points in {wall:.1f}s{f', {wrong} WRONG' if wrong else ''}; stored in "
               f"{s.store.path} (run {s.run_id})")
    s.close()
    if error:
        print(f"error: {error}", file=sys.stderr)
        raise typer.Exit(1)
    if any(not r.get("correct") for r in rows):
        raise typer.Exit(1)
