"""What a report draws, gathered from the results database: the planner beside every stored workload (the same
rows as `results compare`: pipeline/estimate.estimate_beside), each device's measured ceilings (`bench micro`),
the measured workloads as roofline points, distributed-training and collectives rows, and each run's provenance.

Roofline points: a matmul shape is 2mnk FLOP over (mk + kn + mn) elements of its dtype read or written; an LLM
phase is the planner's FLOPs over the planner's bytes of that phase (its per-operation model, estimate/ops.py), at
the planner's FLOPs over the measured time (prefill: TTFT; decode: TPOT; training: one step). The FLOPs of a
workload do not depend on the device, so the points are as measured as the times are.
"""

from __future__ import annotations

from gpuscope import workloads
from gpuscope.errors import UserError

def select(store, run: str | None = None, kind: str | None = None) -> list[dict]:
    """Stored measurements (full rows), oldest first, of one run and/or one kind; one sentence when none match."""
    rows = [r for r in store.all(kind) if run is None or r["run_id"] == run]
    if not rows:
        what = " and ".join(x for x in (f"run '{run}'" if run else "", f"kind '{kind}'" if kind else "") if x)
        raise UserError(f"results database '{store.path}' holds no measurements" + (f" of {what}" if what else "")
                        + "; `gpuscope results list` shows what it holds.")
    return rows


def accuracy_rows(rows: list[dict], gpu: str | None = None, calibrated: bool = False) -> tuple[list, list]:
    """(rows, skipped): every ok workload's estimate rows beside the measurement ({id, run_id, case, device,
    metric, estimated, measured, error}) and why the others have none."""
    from gpuscope.pipeline.estimate import estimate_beside, stored_record

    out, skipped = [], []
    kinds = workloads.estimated_kinds()  # the kinds the planner estimates, as `results compare` takes them
    for r in rows:
        if r["kind"] not in kinds or r["status"] != "ok":
            continue
        est = estimate_beside(stored_record(r), gpu, derived=False, calibrated=calibrated)
        if "unavailable" in est:
            skipped.append({"id": r["id"], "name": r["name"], "why": est["unavailable"]})
            continue
        out += [{"id": r["id"], "run_id": r["run_id"], "case": r["name"], "device": r["device_name"],
                 "hardware": est["hardware"], "metric": x["metric"], "estimated": x["estimated"],
                 "measured": x["measured"], "error": x["error"]} for x in est["rows"]]
    return out, skipped


def ceilings(rows: list[dict]) -> dict[str, dict]:
    """Per device: the best measured matmul TFLOP/s of each dtype and the best device-memory bandwidth (GB/s) of
    the `bench micro` rows."""
    out: dict[str, dict] = {}
    for r in rows:
        res = r["result"]
        if r["kind"] != "micro" or r["status"] != "ok":
            continue
        dev = out.setdefault(r["device_name"] or "device", {"matmul_tflops": {}, "memory_gbs": None})
        if res.get("bench") == "matmul" and res.get("tflops"):
            best = max(res["tflops"], res.get("tflops_achievable") or 0)
            dev["matmul_tflops"][res["dtype"]] = max(best, dev["matmul_tflops"].get(res["dtype"], 0))
        elif res.get("bench") == "memory" and res.get("gbs"):
            dev["memory_gbs"] = max(res["gbs"], dev["memory_gbs"] or 0)
    return out


def matmul_points(rows: list[dict]) -> dict[str, list[dict]]:
    """Per device, each measured matmul shape as a point: 2mnk / ((mk + kn + mn) x dtype bytes) FLOP/byte."""
    from gpuscope.estimate.dtypes import BYTES

    out: dict[str, list[dict]] = {}
    for r in rows:
        res = r["result"]
        if r["kind"] != "micro" or r["status"] != "ok" or res.get("bench") != "matmul":
            continue
        for s in res.get("shapes") or []:
            m, n, k = s["m"], s["n"], s["k"]
            moved = (m * k + k * n + m * n) * BYTES.get(res["dtype"], 4.0)
            out.setdefault(r["device_name"] or "device", []).append(
                {"name": f"matmul {res['dtype']} {m}x{n}x{k}", "kind": f"matmul {res['dtype']}",
                 "intensity": 2 * m * n * k / moved, "tflops": s["tflops"]})
    return out


def ops_estimate(case: dict, hw):
    """The planner's estimate of an infer or (full) training case with its per-operation breakdown: the same
    call as workloads/infer.estimate and workloads/train.estimate, asked for its ops (tests hold the two to the
    same times). None for other kinds and LoRA."""
    from gpuscope.specs.axes import Attention
    from gpuscope.workloads.case import model_spec

    c = workloads.as_case(case)
    if c.KIND.value == "infer":
        from gpuscope.estimate.infer import estimate_infer

        return estimate_infer(model_spec(c), hw, batch=c.batch, prompt=c.prompt, gen=c.gen, dtype=c.dtype.value,
                              engine=c.engine.planner(c.defer_stop).value, gqa_fold=c.attn is Attention.GS_GQA,
                              fuse_proj=c.fuse_proj, moe_batched=c.engine.hf_generate and c.device != "cpu",
                              with_ops=True)
    if c.KIND.value == "train" and c.lora_r is None:
        from gpuscope.estimate.train import estimate_train

        return estimate_train(model_spec(c), hw, micro_batch=c.micro_batch, seq=c.seq, precision=c.precision.value,
                              optimizer=c.optimizer.value, recompute=c.recompute.value, fused=c.fused,
                              grad_accum=int(c.grad_accum), with_ops=True)
    return None


PHASES = {"infer": (("prefill", "prefill", "ttft_s"), ("decode", "decode_per_token", "tpot_s")),
          "train": (("forward+backward", "per_step", "step_s"),)}


def _phase_points(r: dict, est) -> list[dict]:
    out = []
    for phase, flops_key, time_key in PHASES[r["kind"]]:
        ops = [o for o in est.ops if phase == "forward+backward" or o["phase"] == phase]
        flops, moved = sum(o["flops"] for o in ops), sum(o["bytes"] for o in ops)
        t = r["result"].get(time_key)
        if flops and moved and t and est.flops.get(flops_key):
            out.append({"name": f"{r['name']} {phase} (id {r['id']})", "kind": f"{r['kind']} {phase}",
                        "intensity": flops / moved, "tflops": est.flops[flops_key] / t / 1e12})
    return out


def workload_points(rows: list[dict], gpu: str | None = None) -> dict[str, list[dict]]:
    """Per device, each ok infer and training measurement's phases as roofline points (module docstring)."""
    from gpuscope.pipeline.estimate import hardware_for_estimate

    out: dict[str, list[dict]] = {}
    for r in rows:
        if r["kind"] not in PHASES or r["status"] != "ok":
            continue
        hw, _why = hardware_for_estimate(gpu, r["device_name"])
        if hw is None:
            continue
        try:
            est = ops_estimate(r["config"], hw)
        except UserError:
            continue
        if est is not None:
            out.setdefault(r["device_name"] or "device", []).extend(_phase_points(r, est))
    return out


def dist_runs(rows: list[dict]) -> list[dict]:
    """Measured distributed-training steps: tokens/s on N GPUs beside the one-GPU baseline's."""
    out = []
    for r in rows:
        res = r["result"]
        if r["kind"] == "train-dist" and r["status"] == "ok" and res.get("tokens_per_s"):
            base = (res.get("baseline") or {}).get("tokens_per_s")
            out.append({"name": f"{r['name']} (id {r['id']})", "world_size": res.get("world_size", 1),
                        "tokens_per_s": res["tokens_per_s"], "baseline_tokens_per_s": base,
                        "scaling_efficiency": res.get("scaling_efficiency")})
    return out


def collective_points(rows: list[dict]) -> list[dict]:
    return [{"op": r["result"]["op"], "world_size": r["result"].get("world_size", 0),
             "nbytes": r["result"]["nbytes"], "busbw_gbs": r["result"]["busbw_gbs"],
             "predicted_busbw_gbs": r["result"].get("predicted_busbw_gbs")}
            for r in rows if r["kind"] == "collective" and r["status"] == "ok" and r["result"].get("busbw_gbs")]
