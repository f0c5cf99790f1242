"""Data-parallel LLM training worker (one process per GPU, launched by torchrun): DDP or FSDP2.

    python -m torch.distributed.run --standalone --nproc-per-node N -m gpuscope.measure.distributed.train \
        --model llama-3.2-1b --strategy ddp --micro-batch 4 --seq 2048 --precision amp-bf16 --steps 6 --baseline

(or ``--case '<json>'`` / ``@file.json`` with the keys below). Rank 0 prints ONE JSON line on stdout (everything the
libraries print goes to stderr), or appends it to ``--out PATH`` / ``$GPUSCOPE_DIST_OUT`` (the contract of
``gpuscope.measure.distributed.launch``); a rank that fails reports itself and exits 3 (measure/distributed/worker.py).

Case keys: those of measure/llm/train.py (``model``/``config``, ``micro_batch``, ``seq``, ``precision``,
``recompute``, ``steps``, ``warmup``, ``attn``, ``seed``, ``device``) plus ``strategy`` (ddp | fsdp),
``bucket_cap_mb`` (DDP, 25 = torch's default), ``gradient_as_bucket_view`` (DDP, false), ``reshard_after_forward``
(FSDP, true), ``baseline`` (false), ``timeout_s`` (process-group timeout, 1800), ``fused`` (true) / ``foreach``
(unset): which AdamW implementation runs (measure/distributed/optim.py; ``optimizer_impl`` in the result says).

Strategies:
- ``ddp``: ``DistributedDataParallel(model, device_ids=[local_rank] on CUDA, bucket_cap_mb, gradient_as_bucket_view)``;
  precision exactly as in measure/llm/train.py (amp-* = fp32 parameters + autocast, GradScaler for fp16).
- ``fsdp``: FSDP2 ``fully_shard`` on every decoder layer (the classes in the model's ``_no_split_modules``), then on
  the root. ``amp-bf16`` = ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` with fp32 sharded
  parameters and optimizer states and NO autocast (FSDP casts the parameters; torchtitan does the same);
  ``bf16`` / ``fp32`` = no policy, parameters in that dtype. ``amp-fp16`` is refused (no sharded grad scaler here).
  The full model is built on each rank (same seed, identical weights) and then sharded, so it has to fit one
  device at load time.

Data: each rank draws its own fresh random tokens every step (generator seeded with ``seed`` and the rank), made up
front so that no data kernel falls inside a timed step.

Timing: after ``warmup`` untimed steps and one instrumented step (memory per phase, as measure/llm/train.py), a
barrier, then ``steps`` back-to-back steps timed per rank (device events on CUDA, perf_counter + synchronize
elsewhere). See ``METRIC_FORMULAS`` for every reported number; ``baseline`` runs ``llm/train.run_train`` (same case,
one process, no wrapper, no communication) on rank 0's device while the other ranks wait at a barrier, before the
distributed
run, so ``scaling_efficiency`` compares the two in the same command.
"""

from __future__ import annotations

import math
import socket
import statistics
import sys
import time
from functools import partial

import torch
import torch.distributed as dist

from gpuscope.measure.device.device import Device, release, summarize
from gpuscope.measure.distributed.case import check_case, parse_case
from gpuscope.measure.distributed.optim import adamw_impl, adamw_kwargs, param_types
from gpuscope.measure.distributed.worker import env_ranks, gather, worker_main
from gpuscope.measure.models.hf_model import build_model, case_config, model_bytes, vocab_size
from gpuscope.measure.models.train_step import (PRECISIONS, enable_recompute, grad_scaler, instrumented_step,
                                                matmul_settings, step_functions)

PHASES = ("forward", "backward", "optimizer")
METRIC_FORMULAS = {
    "rank_step_s": "per rank: median over `steps` back-to-back timed steps (after a barrier) of forward + backward "
                   "(with gradient all-reduce / reduce-scatter) + optimizer.step + zero_grad(set_to_none=True)",
    "step_s": "max over ranks of rank_step_s (the slowest rank sets the pace)",
    "phase_s": "the slowest rank's median over the timed steps of each phase (forward; backward with its gradient "
               "reduction; optimizer.step + zero_grad): device time between the marks recorded when the host "
               "reached each phase boundary (events on CUDA, perf_counter + synchronize elsewhere)",
    "host_phase_s": "the slowest rank's median host time per phase: perf_counter at the same boundaries, no "
                    "synchronize (equal to phase_s where the host sets the pace)",
    "tokens_per_s": "world_size * micro_batch * seq / step_s (all ranks)",
    "tokens_per_s_per_gpu": "micro_batch * seq / step_s",
    "peak_*_bytes": "max over ranks of each rank's max_memory_allocated in that phase (reset before); per rank in "
                    "`ranks`",
    "baseline.step_s": "llm_train.run_train on rank 0's device alone, same case (same per-GPU micro-batch)",
    "scaling_efficiency": "baseline.step_s / step_s = tokens_per_s / (world_size * baseline.tokens_per_s) "
                          "(weak scaling: 1.0 = perfect)",
}


# --- case ----------------------------------------------------------------------------------------------------
def decoder_layers(model) -> list:
    """The transformer blocks: modules whose class is in ``_no_split_modules`` (HF's own list of blocks), else the
    children of the longest ModuleList."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if layers:
        return layers
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def make_batches(cfg_vocab: int, B: int, S: int, n: int, seed: int, rank: int, dev: Device) -> list:
    g = torch.Generator().manual_seed(int(seed) * 100_003 + 7919 * (rank + 1))
    return [torch.randint(0, cfg_vocab, (B, S), generator=g).to(dev.torch_device) for _ in range(n)]


def wrap(model, case: dict, dev: Device):
    """DDP or FSDP2 around ``model``; returns (wrapped model, autocast dtype or None, facts)."""
    _, ac_dtype = PRECISIONS[case["precision"]]
    if case["strategy"] == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        kw = {"bucket_cap_mb": float(case.get("bucket_cap_mb", 25)),
              "gradient_as_bucket_view": bool(case.get("gradient_as_bucket_view", False))}
        if dev.type == "cuda":
            kw["device_ids"] = [dev.torch_device.index]
        return DDP(model, **kw), ac_dtype, {"ddp": kw | {"device_ids": kw.get("device_ids")}}
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if case["precision"] == "amp-bf16" else MixedPrecisionPolicy())
    reshard = bool(case.get("reshard_after_forward", True))
    layers = decoder_layers(model)
    block_class = type(layers[0]).__name__ if layers else None  # before fully_shard renames the class
    for layer in layers:
        fully_shard(layer, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mp_policy=mp, reshard_after_forward=reshard)
    facts = {"fsdp": {"api": "fully_shard (FSDP2)", "sharded_blocks": len(layers),
                      "block_class": block_class,
                      "param_dtype": str(mp.param_dtype).replace("torch.", "") if mp.param_dtype else None,
                      "reduce_dtype": str(mp.reduce_dtype).replace("torch.", "") if mp.reduce_dtype else None,
                      "reshard_after_forward": reshard}}
    return model, None, facts  # no autocast: FSDP casts the parameters itself


# --- the workload ------------------------------------------------------------------------------------------------
def _load_and_wrap(case: dict, dev: Device, state: dict, rank: int):
    """The model built on this rank (same seed on every rank: identical weights; FSDP shards each rank's own copy)
    and wrapped; returns (model, config, wrapped, autocast dtype, shared facts, this rank's numbers so far)."""
    attn = case.get("attn", "sdpa")
    state["phase"] = "load"
    torch.manual_seed(int(case.get("seed", 0)))
    dev.reset_peak()
    model, config = build_model(case_config(case), dev, PRECISIONS[case["precision"]][0], attn, use_cache=False)
    model.train()
    recompute_api = enable_recompute(model) if case["recompute"] == "full" else None
    shared = {"model": case.get("model") or case_config(case).get("model_type"), "model_type": config.model_type,
              "recompute_api": recompute_api, "attn": attn}
    shared.update(model_bytes(model))
    dev.synchronize()
    mine: dict = {"rank": rank, "hostname": socket.gethostname(), "device": dev.name,
                  "device_name": dev.device_name(), "mem_after_load_bytes": dev.allocated()}

    state["phase"] = "wrap"
    wrapped, ac_dtype, facts = wrap(model, case, dev)
    shared.update(facts)
    shared["autocast_dtype"] = str(ac_dtype).replace("torch.", "") if ac_dtype else None
    dev.synchronize()
    release(dev)
    mine["mem_after_wrap_bytes"] = dev.allocated()
    return model, config, wrapped, ac_dtype, shared, mine


def _timed_steps(dev: Device, steps: int, fns) -> tuple[list[float], float, float, dict]:
    """``steps`` back-to-back steps after a barrier, timed on this rank, with a mark at every phase boundary:
    returns (step seconds, wall, last loss, {"phase_s", "host_phase_s"}: METRIC_FORMULAS)."""
    forward, backward, opt_step = fns
    dist.barrier()
    dev.reset_peak()
    st = dev.step_timer()
    st.start()
    host = [time.perf_counter()]
    for _ in range(steps):
        loss = forward()
        st.mark()
        host.append(time.perf_counter())
        backward(loss)
        st.mark()
        host.append(time.perf_counter())
        opt_step()
        st.mark()
        host.append(time.perf_counter())
    marks = st.times_s()
    host_d = [b - a for a, b in zip(host, host[1:])]
    phases = {"phase_s": {p: statistics.median(marks[j::3]) for j, p in enumerate(PHASES)},
              "host_phase_s": {p: statistics.median(host_d[j::3]) for j, p in enumerate(PHASES)}}
    times = [sum(marks[i:i + 3]) for i in range(0, len(marks), 3)]
    return times, st.wall_s, float(loss.detach().float()), phases


def train_dist(case: dict, dev: Device, state: dict) -> tuple[dict, dict]:
    """Run the distributed measurement on this rank: (shared facts, this rank's numbers)."""
    rank, world, _ = env_ranks()
    B, S = int(case["micro_batch"]), int(case["seq"])
    steps = max(1, int(case.get("steps", 6)))
    warmup = max(1, int(case.get("warmup", 2)))
    model, config, wrapped, ac_dtype, shared, mine = _load_and_wrap(case, dev, state, rank)

    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-4, **adamw_kwargs(case, dev.type))  # measure/distributed/optim
    scaler = grad_scaler(dev, ac_dtype)
    impl = adamw_impl(opt)
    shared.update({"optimizer": "adamw", "optimizer_fused": impl == "fused", "optimizer_impl": impl,
                   "param_types": param_types(wrapped), "grad_scaler": scaler is not None})
    batches = iter(make_batches(vocab_size(config), B, S, warmup + 1 + steps, int(case.get("seed", 0)), rank, dev))

    stage = ["warmup"]
    fns = step_functions(wrapped, opt, scaler, ac_dtype, dev, batches, state, stage)
    forward, backward, opt_step = fns
    for _ in range(warmup):
        loss = forward()
        backward(loss)
        del loss
        opt_step()
    release(dev)

    stage[0] = "measure"  # one instrumented step: memory per phase (a synchronize between phases)
    dev.synchronize()
    mine["optimizer_state_bytes"] = _local_bytes_state(opt)
    mine.update(instrumented_step(dev, forward, backward, opt_step, partial(_local_grad_bytes, wrapped))[0])

    stage[0] = "timed"
    times, wall_s, loss_last, phases = _timed_steps(dev, steps, fns)
    mine.update(phases)
    mine["peak_bytes"] = dev.peak_allocated()
    mine["peak_reserved_bytes"] = dev.peak_reserved()
    mine["loss_last"] = loss_last
    s = summarize(times)
    mine.update({"step_s": s["median"], "step_s_min": s["min"], "step_s_max": s["max"],
                 "wall_s": wall_s, "samples_s": times})
    shared.update(matmul_settings())
    shared["timer"] = dev.timer_kind
    del wrapped, model, opt
    release(dev)
    return shared, mine


def _local_bytes_state(opt) -> int:
    """Optimizer-state bytes held by this rank (a DTensor counts its local shard)."""
    total = 0
    for st in opt.state.values():
        for t in st.values():
            if isinstance(t, torch.Tensor):
                t = t.to_local() if hasattr(t, "to_local") else t
                total += t.numel() * t.element_size()
    return total


def _local_grad_bytes(model) -> int:
    total = 0
    for p in model.parameters():
        g = p.grad
        if g is not None:
            g = g.to_local() if hasattr(g, "to_local") else g
            total += g.numel() * g.element_size()
    return total


PHASE_KEYS = ("mem_after_load_bytes", "mem_after_wrap_bytes", "mem_rest_bytes", "peak_forward_bytes",
              "peak_backward_bytes", "peak_optimizer_bytes", "peak_bytes", "peak_reserved_bytes",
              "optimizer_state_bytes", "grad_bytes")


def _max(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return max(xs) if xs else None


def combine(case: dict, shared: dict, ranks: list[dict], baseline: dict | None, world: int) -> dict:
    B, S = int(case["micro_batch"]), int(case["seq"])
    step = _max(r.get("step_s") for r in ranks)
    res = {"status": "ok", "kind": "train-dist", "strategy": case["strategy"], "world_size": world,
           "precision": case["precision"], "recompute": case["recompute"], "micro_batch": B, "seq": S,
           "global_batch": B * world, "steps": int(case.get("steps", 6)), "warmup": int(case.get("warmup", 2)),
           "device_name": ranks[0].get("device_name")}
    res.update(shared)
    res["step_s"] = step
    res["rank_step_s"] = [r.get("step_s") for r in ranks]
    slowest = max(ranks, key=lambda r: r.get("step_s") or 0.0)
    res["phase_s"], res["host_phase_s"] = slowest.get("phase_s"), slowest.get("host_phase_s")
    res["step_s_rank_spread"] = (step - min(res["rank_step_s"])) / step if step else None
    res["tokens_per_s"] = world * B * S / step if step else None
    res["tokens_per_s_per_gpu"] = B * S / step if step else None
    for k in PHASE_KEYS:
        res[k] = _max(r.get(k) for r in ranks)
    res["loss_last"] = ranks[0].get("loss_last")
    res["loss_finite"] = all(math.isfinite(r.get("loss_last", float("nan"))) for r in ranks)
    res["ranks"] = ranks
    if baseline is not None:
        b = {k: baseline.get(k) for k in ("status", "step_s", "step_s_min", "step_s_max", "tokens_per_s",
                                           "peak_bytes", "peak_forward_bytes", "peak_backward_bytes",
                                           "peak_optimizer_bytes", "mem_rest_bytes", "error", "phase")
             if k in baseline}
        res["baseline"] = b
        ok = b.get("status") == "ok" and b.get("step_s") and step
        res["scaling_efficiency"] = b["step_s"] / step if ok else None
    else:
        res["baseline"] = None
        res["scaling_efficiency"] = None
    res["metric_formulas"] = METRIC_FORMULAS
    return res


def run_baseline(case: dict, dev: Device) -> dict | None:
    """llm/train.run_train on rank 0's device alone (the other ranks wait at the barrier that follows)."""
    from gpuscope.measure.llm.train import run_train

    if dist.get_rank() != 0:
        return None
    single = {k: v for k, v in case.items() if k not in ("strategy", "bucket_cap_mb", "gradient_as_bucket_view",
                                                         "reshard_after_forward", "baseline", "timeout_s")}
    single.update(kind="train", device=dev.name)
    try:
        return run_train(single)
    except Exception as e:  # a failed baseline is recorded; the distributed run still goes on
        return {"status": "error", "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}


def _body(case: dict, dev: Device, state: dict) -> dict | None:
    case = check_case(case)
    world = dist.get_world_size()
    baseline = None
    if case.get("baseline"):
        state["phase"] = "baseline"
        baseline = run_baseline(case, dev)
        release(dev)
        dist.barrier()
    shared, mine = train_dist(case, dev, state)  # an OOM propagates: run_worker reports it per rank
    ranks = gather(mine)
    if dist.get_rank() != 0:
        return None
    return combine(case, shared, ranks, baseline, world)


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, parse_case, check_case, _body)


if __name__ == "__main__":
    sys.exit(main())
