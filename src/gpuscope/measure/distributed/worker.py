"""The skeleton every torchrun worker here shares (DDP/FSDP training, gradient compression): this rank's place in
the job, its device and process group (nccl on CUDA, gloo otherwise), rank-0's one JSON line (the contract of
measure/distributed/launch.py), and failures reported per rank: a rank that fails writes its own line with
``"final": false`` (status ``oom``, an out-of-memory result, or ``error``) and exits 3 at once, so torchrun stops the
other ranks instead of leaving them blocked in a collective; an error also goes through ``launch.fail``."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from gpuscope.measure.device.device import Device, is_oom

SCHEMA = "gpuscope.dist/1"


def env_ranks() -> tuple[int, int, int]:
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def init_dist(device: str | None, timeout_s: float) -> Device:
    """Bind this rank to its device (cuda:LOCAL_RANK when CUDA is there and not refused), init the process group
    (nccl on CUDA, gloo otherwise) and return the Device. NCCL_* variables (NCCL_NVLS_ENABLE=0 included) are taken
    from the environment as torchrun passed them; nothing here overrides them."""
    rank, world, local = env_ranks()
    kind = (device or ("cuda" if torch.cuda.is_available() else "cpu")).split(":")[0]
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' was asked for but is not available")
        torch.cuda.set_device(local)
        dev = Device(f"cuda:{local}")
        backend = "nccl"
    elif kind == "cpu":
        dev, backend = Device("cpu"), "gloo"
    else:
        raise ValueError(f"device: '{device}' is not supported for distributed runs (cuda or cpu)")
    if not dist.is_initialized():
        kw = {"backend": backend, "timeout": _dt.timedelta(seconds=float(timeout_s))}
        if backend == "nccl":
            kw["device_id"] = dev.torch_device
        dist.init_process_group(**kw)
    return dev


def dist_facts(dev: Device) -> dict:
    rank, world, local = env_ranks()
    return {"backend": dist.get_backend() if dist.is_initialized() else None, "world_size": world,
            "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", world)),
            "nnodes": max(1, world // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world)))),
            "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}}


def gather(obj) -> list:
    """Every rank's ``obj`` (a JSON-able dict), in rank order, on every rank."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def emit(line: dict, out: str | None, stdout) -> None:
    """One JSON line: appended to ``out`` or ``$GPUSCOPE_DIST_OUT`` (launch.emit: flushed and fsync'ed), else
    written at once to the real ``stdout``."""
    from gpuscope.measure.distributed.launch import emit as launch_emit, output_path
    from gpuscope.measure.runner.run_case import clean

    path = output_path(out)
    if path is not None:
        launch_emit(line, path)
        return
    stdout.write(json.dumps(clean(line)) + "\n")
    stdout.flush()


def provenance_for(dev: Device) -> dict:
    from gpuscope.measure.device.provenance import provenance

    prov = provenance(dev)
    prov.update(dist_facts(dev))
    return prov


def run_worker(case: dict, out: str | None, body) -> int:
    """Shared skeleton of the torchrun workers: stdout reserved for the JSON line, process group set up and torn
    down, failures (OOM included) reported per rank with exit code 3. ``body(case, dev, state)`` returns the result
    dict on rank 0 (None elsewhere)."""
    stdout = sys.stdout
    t0 = time.perf_counter()
    rank, world, _ = env_ranks()
    state = {"phase": "setup"}
    dev = None
    with contextlib.redirect_stdout(sys.stderr):
        try:
            dev = init_dist(case.get("device"), float(case.get("timeout_s", 1800)))
            result = body(case, dev, state)
            if rank == 0:
                line = {"schema": SCHEMA, "final": True, "rank": 0, "world_size": world, "case": case,
                        "result": result, "provenance": provenance_for(dev), "wall_s": time.perf_counter() - t0}
                emit(line, out, stdout)
            dist.barrier()
            dist.destroy_process_group()
            return 0
        except Exception as e:
            if dev is not None and is_oom(e):
                from gpuscope.measure.device.device import oom_result

                res = oom_result(dev, state["phase"], e)
            else:
                from gpuscope.measure.runner.run_case import error_result

                res = error_result(e)
                res["phase"] = state["phase"]
            res["rank"] = rank
            line = {"schema": SCHEMA, "final": False, "rank": rank, "world_size": world, "case": case,
                    "result": res, "wall_s": time.perf_counter() - t0}
            try:
                line["provenance"] = provenance_for(dev) if dev is not None else None
            except Exception:
                line["provenance"] = None
            emit(line, out, stdout)
            sys.stderr.flush()
            if res["status"] != "oom":
                from gpuscope.measure.distributed.launch import fail

                fail(f"rank {rank}: {res['error']}", out)
            os._exit(3)  # no clean teardown: the other ranks may be blocked in a collective; torchrun ends them


def worker_main(argv, parse, check, body) -> int:
    """A torchrun worker's entry point: parse and check its case (bad input: one line on stderr, exit 2), then
    ``run_worker`` with ``body``."""
    try:
        case, a = parse(argv)
        check(case)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run_worker(case, a.out, body)
