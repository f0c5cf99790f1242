"""Gradient compression under DDP (torchrun worker): communication hooks compared on the same run.

    python -m torch.distributed.run --standalone --nproc-per-node N -m gpuscope.measure.distributed.compression \
        --model llama-3.2-1b --micro-batch 4 --seq 1024 --steps 12 --hooks none,fp16,bf16,powersgd1,powersgd4,sign

Each variant trains the SAME model (same seed, so the same initial weights), on the SAME data (each rank cycles
through its own fixed pool of ``pool`` batches, the same for every variant, so the loss actually falls and the
trajectories can be compared), for the same ``steps`` optimizer steps (AdamW, lr ``lr``). A reference run with no
hook comes first; every variant (``none`` included: its deviation is the run-to-run noise floor, exactly 0 on CPU,
small on GPU where kernels are not deterministic) is compared with it through the loss averaged over ranks:
``loss_dev_final = |loss_T - ref_T|``, ``loss_dev_max = max_t |loss_t - ref_t|`` (and relative to ref).

The hooks (fp16, bf16, powersgdR, sign) and the bytes each sends per step, with their formulas:
measure/distributed/comm_hooks.py.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.distributed as dist

from gpuscope.measure.choices import PRECISIONS as PRECISION_NAMES, check_choice
from gpuscope.measure.device.device import Device, release, summarize
from gpuscope.measure.distributed.case import add_model_and_device, read_case
from gpuscope.measure.distributed.comm_hooks import Counter, make_hook, static_bytes_per_step, wire_bytes_per_step
from gpuscope.measure.distributed.train import make_batches
from gpuscope.measure.distributed.worker import env_ranks, gather, worker_main
from gpuscope.measure.models.hf_model import build_model, case_config, model_bytes, vocab_size
from gpuscope.measure.models.train_step import PRECISIONS, autocast, grad_scaler, optimizer_step

HOOKS = ("none", "fp16", "bf16", "powersgd1", "powersgd2", "powersgd4", "sign")


def parse_hooks(spec) -> list[str]:
    items = spec if isinstance(spec, (list, tuple)) else str(spec).split(",")
    out = []
    for h in (str(x).strip().lower() for x in items):
        if not h:
            continue
        if h not in HOOKS and not (h.startswith("powersgd") and h[8:].isdigit() and int(h[8:]) > 0):
            raise ValueError(f"hooks: '{h}' is not one of {', '.join(HOOKS)} (powersgdR for any rank R >= 1)")
        if h not in out:
            out.append(h)
    if not out:
        raise ValueError("hooks: none given")
    return out


def _ddp_with_hook(scheme: str | None, case: dict, dev: Device, world: int, counter: Counter):
    """The case's model (the same seed for every variant: the same initial weights) under DDP, with ``scheme``'s
    counting hook registered (none for the reference and ``none``); returns (model, config, ddp)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    seed = int(case.get("seed", 0))
    torch.manual_seed(seed)
    model, config = build_model(case_config(case), dev, PRECISIONS[case["precision"]][0], case.get("attn", "sdpa"),
                                use_cache=False)
    model.train()
    kw = {"bucket_cap_mb": float(case.get("bucket_cap_mb", 25))}
    if dev.type == "cuda":
        kw["device_ids"] = [dev.torch_device.index]
    ddp = DDP(model, **kw)
    if scheme not in (None, "none"):
        hstate, hook = make_hook(scheme, counter, world, seed, int(case["start_powersgd_iter"]))
        ddp.register_comm_hook(hstate, hook)
    return model, config, ddp


def _byte_fields(scheme: str | None, model, world: int, steps: int, counter: Counter) -> dict:
    """Bytes per step as counted by the hook (the formula from the parameters for the reference and ``none``, which
    run DDP's own all-reduce), the formula's check, and the bytes on the wire."""
    if scheme in (None, "none"):
        counter.per_step = [static_bytes_per_step("none", model, world)] * steps
    out = {"bytes_per_step": counter.per_step[-1] if counter.per_step else None,
           "bytes_per_step_all": counter.per_step, "buckets_per_step": counter.buckets[-1] if counter.buckets else None,
           "bytes_formula_check": static_bytes_per_step(scheme or "none", model, world,
                                                        counter.buckets[-1] if counter.buckets else 1,
                                                        counter.bucket_numels)}
    if scheme in (None, "none"):
        out["buckets_per_step"] = None
    out["wire_bytes_per_step_ring"] = wire_bytes_per_step(scheme or "none", out["bytes_per_step"], world)
    return out


def run_variant(scheme: str | None, case: dict, dev: Device, state: dict) -> dict:
    """Train ``steps`` steps under DDP with ``scheme`` (None = reference, no hook); this rank's numbers, with the
    per-step loss averaged over ranks."""
    rank, world, _ = env_ranks()
    steps, warmup = int(case["steps"]), int(case["warmup"])
    ac_dtype = PRECISIONS[case["precision"]][1]
    name = scheme or "reference"
    state["phase"] = f"{name}/load"
    counter = Counter()
    model, config, ddp = _ddp_with_hook(scheme, case, dev, world, counter)
    opt = torch.optim.AdamW(ddp.parameters(), lr=float(case.get("lr", 1e-3)), fused=dev.type == "cuda")
    scaler = grad_scaler(dev, ac_dtype)
    pool = make_batches(vocab_size(config), int(case["micro_batch"]), int(case["seq"]),
                        max(1, int(case.get("pool", 4))), int(case.get("seed", 0)), rank, dev)
    losses = torch.zeros(steps, device=dev.torch_device)

    dist.barrier()
    st = dev.step_timer()
    st.start()
    for t in range(steps):
        state["phase"] = f"{name}/step{t}"
        ids = pool[t % len(pool)]
        with autocast(dev, ac_dtype):
            loss = ddp(input_ids=ids, labels=ids, use_cache=False).loss
        (scaler.scale(loss) if scaler else loss).backward()
        optimizer_step(opt, scaler)
        losses[t] = loss.detach().float()
        st.mark()
        counter.end_step()
    times = st.times_s()
    dist.all_reduce(losses)  # SUM (gloo has no AVG)
    s = summarize(times[warmup:] or times)
    out = {"hook": name, "step_s": s["median"], "step_s_min": s["min"], "step_s_max": s["max"],
           "samples_s": times, "losses": (losses / world).tolist(),
           **_byte_fields(scheme, model, world, steps, counter)}
    if scaler:
        out["grad_scale"] = float(scaler.get_scale())
    state["model_bytes"] = model_bytes(model)
    del ddp, model, opt
    release(dev)
    return out


def deviations(ref: list[float], var: list[float]) -> dict:
    d = [abs(a - b) for a, b in zip(var, ref)]
    fin = all(math.isfinite(x) for x in var)
    return {"loss_final": var[-1], "loss_dev_final": d[-1], "loss_dev_max": max(d),
            "loss_dev_final_rel": d[-1] / abs(ref[-1]) if ref[-1] else None, "loss_finite": fin}


def check_case(case: dict) -> dict:
    c = dict(case)
    c.setdefault("kind", "compression")
    c.setdefault("precision", "fp32")
    c.setdefault("steps", 12)
    c.setdefault("warmup", 3)
    c.setdefault("start_powersgd_iter", 2)
    c["hooks"] = parse_hooks(c.get("hooks", ",".join(HOOKS)))
    check_choice("precision", c["precision"], PRECISION_NAMES)
    for k in ("micro_batch", "seq", "steps"):
        if int(c.get(k) or 0) <= 0:
            raise ValueError(f"{k}: must be a positive integer, not {c.get(k)}")
    if int(c["start_powersgd_iter"]) < 2:
        raise ValueError("start_powersgd_iter: must be >= 2 (PowerSGD with error feedback / warm start needs it)")
    if int(c["warmup"]) < 0 or int(c["warmup"]) >= int(c["steps"]):
        raise ValueError(f"warmup: must be >= 0 and below steps ({c['steps']}), not {c['warmup']}")
    if not c.get("model") and not c.get("config"):
        raise ValueError("case has neither 'model' nor 'config'")
    return c


def _body(case: dict, dev: Device, state: dict) -> dict | None:
    case = check_case(case)
    world = dist.get_world_size()
    ref = run_variant(None, case, dev, state)
    variants = []
    for h in case["hooks"]:
        v = run_variant(h, case, dev, state)
        v.update(deviations(ref["losses"], v["losses"]))
        variants.append(v)
    timings = gather({h["hook"]: h["step_s"] for h in [ref, *variants]})
    if dist.get_rank() != 0:
        return None
    for v in [ref, *variants]:  # the slowest rank sets the pace
        per_rank = [t[v["hook"]] for t in timings]
        v["rank_step_s"] = per_rank
        v["step_s"] = max(per_rank)
    base = ref["bytes_per_step"]
    for v in variants:
        v["compression_ratio"] = base / v["bytes_per_step"] if v["bytes_per_step"] else None
        v["speedup_vs_reference"] = ref["step_s"] / v["step_s"] if v["step_s"] else None
    res = {"status": "ok", "kind": "compression", "world_size": world, "precision": case["precision"],
           "micro_batch": int(case["micro_batch"]), "seq": int(case["seq"]), "steps": int(case["steps"]),
           "warmup": int(case["warmup"]), "lr": float(case.get("lr", 1e-3)), "pool": int(case.get("pool", 4)),
           "start_powersgd_iter": int(case["start_powersgd_iter"]),
           "bucket_cap_mb": float(case.get("bucket_cap_mb", 25)),
           "model": case.get("model") or case_config(case).get("model_type"), "device": dev.name,
           "device_name": dev.device_name(), "timer": dev.timer_kind, "reference": ref, "variants": variants,
           "metric_formulas": {
               "step_s": "max over ranks of the per-rank median over steps[warmup:] (perf_counter+sync or events)",
               "bytes_per_step": "payload handed to the collective per rank per step (all_reduce; all_gather for "
                                 "sign: sum over buckets of ceil(d_b/8) + 4) (module docstring formulas)",
               "wire_bytes_per_step_ring": "bytes each rank receives per step: bytes_per_step * 2 (N-1)/N (ring "
                                           "all-reduce: none, fp16, bf16, powersgdR); bytes_per_step * (N-1) "
                                           "(all_gather, (N-1)/N * N * payload: sign)",
               "compression_ratio": "reference bytes_per_step / variant bytes_per_step (payload, not wire)",
               "loss_dev_final": "|loss_T - reference_T|, loss averaged over ranks",
               "loss_dev_max": "max_t |loss_t - reference_t|",
           }}
    res.update(state.get("model_bytes") or {})
    return res


def parse_case(argv):
    p = argparse.ArgumentParser(prog="python -m gpuscope.measure.distributed.compression",
                                description="DDP gradient-compression hooks compared; launch with torchrun.")
    p.add_argument("--case", help="case JSON, @file.json or - (overrides the flags)")
    p.add_argument("--model")
    p.add_argument("--config", help="inline HF config JSON or a path")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--precision", default="fp32", choices=PRECISION_NAMES)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--hooks", default=",".join(HOOKS))
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--pool", type=int, default=4)
    p.add_argument("--start-powersgd-iter", type=int, default=2)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device")
    p.add_argument("--timeout-s", type=float, default=1800.0)
    p.add_argument("--out")
    a = p.parse_args(argv)
    if a.case:
        return read_case(a.case), a
    case = {"kind": "compression", "micro_batch": a.micro_batch, "seq": a.seq, "precision": a.precision,
            "steps": a.steps, "warmup": a.warmup, "hooks": a.hooks, "lr": a.lr, "pool": a.pool,
            "start_powersgd_iter": a.start_powersgd_iter, "bucket_cap_mb": a.bucket_cap_mb, "seed": a.seed,
            "timeout_s": a.timeout_s}
    return add_model_and_device(case, a), a


def main(argv=None) -> int:
    return worker_main(argv, parse_case, check_case, _body)


if __name__ == "__main__":
    sys.exit(main())
