"""Serving in this process through transformers' own continuous batching (``init_continuous_batching``: a paged KV
cache, a FIFO scheduler mixing prefill and decode per step, CUDA graphs on a GPU), the embedded default of
`bench serve --model`: random weights, prompts of random token ids, EOS disabled so each request makes exactly its
output length.

Timing (the same definitions as the HTTP load generator, metrics.py): a request's clock starts just before
``add_request``; its tokens' times are the engine's own ``record_timestamps`` (a perf_counter read as each token is
appended, once per step); so TTFT includes the queueing a request meets. Steps: each call of the batch processor's
``update_batch`` (one per forward) is timed, and the tokens whose timestamps fall inside it are that step's.

API used exists in transformers 5.17 and 5.24 alike: ``init_continuous_batching(generation_config,
continuous_batching_config, workload_hints)``, ``manager.warmup/start/add_request/get_result/stop/destroy``,
``GenerationOutput.timestamps/generated_tokens/error/lifespan``; ContinuousBatchingConfig gets only the keys both
take (num_blocks, max_batch_tokens, max_memory_percent).
"""

from __future__ import annotations

import inspect
import statistics
import time
from collections import deque

import torch

from gpuscope.measure.device.device import Device, release, run_as_result
from gpuscope.measure.models.hf_model import DTYPES, build_model, case_config, model_bytes, silence_generation, vocab_size
from gpuscope.measure.serve.metrics import RequestRecord, slo_of, summarize
from gpuscope.measure.serve.schedule import Plan, plan_of, workload_blocks

CB_KEYS = ("num_blocks", "max_batch_tokens", "max_memory_percent")
POLL_S = 0.02  # the longest the collecting loop waits on the output queue (it wakes earlier for an arrival)


def cb_config(case: dict, plan: Plan, dev: Device):
    """The ContinuousBatchingConfig: the case's keys where given; on a CPU, a cache sized to the workload (the
    engine otherwise sizes it to a fraction of the host's free memory, tens of seconds to allocate)."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    kw = {k: case[k] for k in CB_KEYS if case.get(k) is not None}
    if dev.type == "cpu" and "num_blocks" not in kw:
        kw["num_blocks"] = workload_blocks(plan)
    allowed = inspect.signature(ContinuousBatchingConfig).parameters
    return ContinuousBatchingConfig(**{k: v for k, v in kw.items() if k in allowed})


def manager_for(model, plan: Plan, cfg):
    """A continuous-batching manager for the plan's requests (greedy, EOS disabled: each makes its max_new_tokens)."""
    from transformers import GenerationConfig
    from transformers.generation.continuous_batching.utils import WorkloadHints

    gen = GenerationConfig(max_new_tokens=max(plan.output_lens), do_sample=False, eos_token_id=-1)
    hints = WorkloadHints(max_prompt_length=max(plan.prompt_lens), max_generated_length=max(plan.output_lens),
                          num_requests=len(plan.prompt_lens))
    return model.init_continuous_batching(generation_config=gen, continuous_batching_config=cfg, workload_hints=hints)


def _time_steps(manager) -> list[tuple[float, float]]:
    """(start, end) of every update_batch call from now on; [] kept empty where the processor has none."""
    steps: list[tuple[float, float]] = []
    bp = getattr(manager, "batch_processor", None)
    inner = getattr(bp, "update_batch", None)
    if inner is None:
        return steps

    def timed():
        a = time.perf_counter()
        inner()
        steps.append((a, time.perf_counter()))

    bp.update_batch = timed
    return steps


def serve(manager, ids: list[list[int]], plan: Plan, deadline_s: float) -> list[RequestRecord]:
    """Submit the plan's requests (at their arrival offsets, or as concurrency slots free) and collect them."""
    n = len(ids)
    recs = [RequestRecord(i, plan.prompt_lens[i], plan.output_lens[i], 0.0) for i in range(n)]
    pending, flying, done = deque(range(n)), {}, 0
    t0 = time.perf_counter()
    while done < n:
        now = time.perf_counter()
        while pending and now >= t0 + plan.arrivals_s[pending[0]] and (not plan.concurrency or
                                                                       len(flying) < plan.concurrency):
            i = pending.popleft()
            recs[i].sent_s = time.perf_counter()
            flying[manager.add_request(ids[i], request_id=f"s{i}", max_new_tokens=plan.output_lens[i],
                                       record_timestamps=True)] = i
        free = pending and not (plan.concurrency and len(flying) >= plan.concurrency)
        due = t0 + plan.arrivals_s[pending[0]] - time.perf_counter() if free else POLL_S
        out = manager.get_result(timeout=min(POLL_S, max(due, 1e-4)))  # a result, or the next arrival's time
        if out is not None and out.is_finished() and out.request_id in flying:
            r = recs[flying.pop(out.request_id)]
            r.token_times_s = list(out.timestamps or [])
            r.output_tokens, r.error = len(out.generated_tokens), out.error
            done += 1
        elif out is None and (not manager.is_running() or time.perf_counter() > t0 + deadline_s):
            why = "the engine stopped" if not manager.is_running() else f"not finished within {deadline_s:.0f} s"
            for i in list(flying.values()) + list(pending):
                recs[i].error, recs[i].token_times_s = why, []
            break
    return recs


def step_fields(steps: list[tuple[float, float]], recs: list[RequestRecord]) -> dict:
    """Steps and the tokens each made (a token belongs to the step whose update_batch read its timestamp)."""
    if not steps:
        return {"steps": None}
    times = sorted(t for r in recs if r.ok for t in r.token_times_s)
    import bisect

    per = [bisect.bisect_right(times, b) - bisect.bisect_left(times, a) for a, b in steps]
    per = [k for k in per if k]
    return {"steps": len(per), "tokens_per_step_mean": sum(per) / len(per) if per else None,
            "tokens_per_step_max": max(per, default=None),
            "step_s_median": statistics.median(b2 - b1 for (_, b1), (_, b2) in zip(steps, steps[1:]))
            if len(steps) > 1 else None}


def _engine_fields(manager, model) -> dict:
    bp = getattr(manager, "batch_processor", None)
    cache = getattr(bp, "cache", None)
    cfg = getattr(manager, "continuous_batching_config", None)
    return {"attn_impl_cb": getattr(model.config, "_attn_implementation", None),
            "num_blocks": getattr(cache, "num_blocks", None), "max_batch_tokens": getattr(cache, "max_batch_tokens",
                                                                                          None),
            "use_cuda_graph": str(getattr(cfg, "use_cuda_graph", None)),
            "use_async_batching": getattr(cfg, "use_async_batching", None)}


WARM_GEN = 4  # output tokens of a warm-up request: enough for decode steps after its prefill, cheap at any size


def _warm(manager, vocab: int, plan: Plan, count: int) -> None:
    """An untimed round of ``count`` requests at the plan's prompt lengths and WARM_GEN output tokens: the first
    steps' set-up (allocator growth, kernel selection; graphs were captured by ``manager.warmup``) is not timed."""
    if count <= 0:
        return
    ids = [torch.randint(0, vocab, (plan.prompt_lens[i % len(plan.prompt_lens)],)).tolist() for i in range(count)]
    warm = Plan(tuple(len(x) for x in ids), (min(WARM_GEN, max(plan.output_lens)),) * count, (0.0,) * count)
    serve(manager, ids, warm, deadline_s=600)


@torch.no_grad()
def _run(case: dict, dev: Device, state: dict) -> dict:
    torch.manual_seed(int(case.get("seed", 0)))
    plan = plan_of(case)
    state["phase"] = "load"
    dtype = case.get("dtype", "bf16")
    model, config = build_model(case_config(case), dev, DTYPES[dtype], case.get("attn", "sdpa"))
    model.eval()
    silence_generation(model)
    res: dict = {"status": "ok", "kind": "serve", "engine": "transformers-cb", "model": case.get("model"),
                 "model_type": config.model_type, "device": dev.name, "device_name": dev.device_name(),
                 "dtype": dtype, "mode": plan.mode}
    res.update(model_bytes(model))
    vocab = vocab_size(config)
    ids = [torch.randint(0, vocab, (p,)).tolist() for p in plan.prompt_lens]
    state["phase"] = "warmup"
    manager = manager_for(model, plan, cb_config(case, plan, dev))
    try:
        manager.warmup()
        manager.start()
        _warm(manager, vocab, plan, int(case.get("warmup_requests", min(len(ids), 8))))
        dev.reset_peak()
        state["phase"] = "serve"
        steps = _time_steps(manager)
        recs = serve(manager, ids, plan, float(case.get("deadline_s", 3600)))
        res.update(_engine_fields(manager, model))
    finally:
        manager.stop(block=True, timeout=30)
        manager.destroy()
    res["peak_serve_bytes"] = dev.peak_allocated()
    res.update(summarize(recs, slo_of(case)))
    res.update(step_fields(steps, recs))
    res["request_records"] = [r.to_dict() for r in recs]
    res["timer"] = "time.perf_counter (the engine's record_timestamps)"
    del model
    release(dev)
    return res


def run_inprocess(case: dict) -> dict:
    return run_as_result(_run, case)
