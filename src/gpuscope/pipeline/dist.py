"""The torchrun jobs of bench: a distributed training or compression case as one job (its failures become
results: oom, error), and a collectives sweep whose points are stored as rank 0 writes them."""

from __future__ import annotations

import sys
import time

from gpuscope.errors import UserError
from gpuscope.pipeline.estimate import estimate_beside
from gpuscope.pipeline.session import Session


def _failed_result(recs: list[dict], err) -> tuple[dict, dict]:
    """(result, provenance) of a job that did not end with rank 0's final record: an OOM on any rank first, then
    any rank's result, then rank 0's final one (another node failed), else the job's error."""
    final = [r for r in recs if r.get("final")]
    failed = [r for r in recs if not r.get("final") and isinstance(r.get("result"), dict)]
    oom = [r for r in failed if r["result"].get("status") == "oom"]
    pick = (oom or failed or [None])[0]
    if pick is not None:
        res, prov = dict(pick["result"]), dict(pick.get("provenance") or {})
    elif final:
        res, prov = dict(final[0]["result"]), dict(final[0].get("provenance") or {})
    else:
        res, prov = {"status": "error", "error": str(err) if err else "the job wrote no result"}, {}
    if err is not None:
        res.setdefault("job_error", str(err)[:500])
        res["job_returncode"] = err.returncode
        res["stderr_tail"] = (err.stderr_tail or "")[-1500:]
    if not prov:
        from gpuscope.measure.device.provenance import provenance

        prov = provenance(None, with_torch=False)
    return res, prov


def launch(case, node_rank: int = 0, rdzv: str | None = None) -> tuple[dict, dict, float]:
    """(result, provenance, wall_s) of one torchrun job of a train-dist or compression Case (workloads/)."""
    import json

    from gpuscope.measure.distributed.launch import DistributedRunError, run_torchrun
    from gpuscope.workloads import module

    t0 = time.perf_counter()
    try:
        recs = run_torchrun(module(case.KIND).WORKER, ["--case", json.dumps(case.to_dict())], case.nproc,
                            nnodes=case.nnodes, node_rank=node_rank, rdzv_endpoint=rdzv, timeout_s=case.timeout_s)
        err = None
    except DistributedRunError as e:
        recs, err = e.records, e
    except ValueError as e:
        raise UserError(str(e)) from None
    wall = time.perf_counter() - t0
    final = [r for r in recs if r.get("final")]
    if final and err is None:
        res, prov = final[0]["result"], dict(final[0].get("provenance") or {})
    else:
        res, prov = _failed_result(recs, err)
    prov.update(wall_s=wall, parent_argv=list(sys.argv))
    return res, prov, wall


def run_job(s: Session, case, gpu: str | None = None, node_rank: int = 0, rdzv: str | None = None) -> dict:
    """One distributed case run, stored, with the planner's estimate beside it where the kind has one."""
    from gpuscope import workloads

    res, prov, wall = launch(case, node_rank, rdzv)
    d = case.to_dict()
    mid = s.store.put(s.run_id, case.key, case.KIND.value, case.name, d, res, prov)
    entry = {"id": mid, "key": case.key, "name": case.name, "skipped": False, "status": res.get("status"),
             "result": res, "wall_s": wall}
    if workloads.has_estimate(case.KIND):
        entry["estimate"] = dist_estimate(d, res, gpu)
    return s.add(entry)


def dist_estimate(case: dict, res: dict, gpu: str | None) -> dict:
    """The planner's DDP/FSDP estimate beside a measured train-dist case (memory per phase, step, MFU, scaling
    efficiency when the baseline ran: pipeline/estimate.estimate_beside) or {"unavailable": why}."""
    return estimate_beside({"case": case, "result": res}, gpu)


def _point_provenance(rec: dict) -> dict:
    env = dict(rec.get("env") or {})
    prov = dict(env.pop("provenance", None) or {})
    prov.update(parent_argv=list(sys.argv), distributed=env)
    if not prov.get("device_name") and env.get("device_names"):
        prov["device_name"] = ", ".join(env["device_names"])
    return prov


def run_collectives(s: Session, args: list[str], nproc: int, nnodes: int, node_rank: int, rdzv_endpoint,
                    rdzv_id: str, wall_timeout: float) -> list[dict]:
    """A collectives sweep (the worker's ``args``) under torchrun; each point is stored as rank 0 writes it.
    Returns the points; a job that failed (its wall timeout fired, a rank died or hung) sets ``s.error``."""
    from gpuscope.measure.distributed.launch import DistributedRunError, run_torchrun
    from gpuscope.workloads.collective import WORKER, CollectiveCase

    points: list[dict] = []

    def on_record(rec: dict) -> None:
        case = CollectiveCase.from_record(rec)
        result = {k: v for k, v in rec.items() if k != "env"}
        mid = s.store.put(s.run_id, case.key, "collective", case.name, case.to_dict(), result,
                          _point_provenance(rec))
        points.append(rec)
        s.add({"id": mid, "key": case.key, "name": case.name, "skipped": False, "status": result["status"],
               "result": result})

    s.note(f"collectives: torchrun {nnodes} node(s) x {nproc} processes ...")
    try:
        run_torchrun(WORKER, args, nproc, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
                     timeout_s=wall_timeout, rdzv_id=rdzv_id, on_record=on_record)
    except DistributedRunError as e:
        s.error = str(e)
    return points
