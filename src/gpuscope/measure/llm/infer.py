"""LLM inference workload: random-weight Hugging Face model, TTFT / E2E / TPOT with peak memory.

Case keys: ``kind="infer"``, ``model`` (preset name, path to a config.json or a directory holding one) or an
inline HF config dict under ``config``, ``batch``, ``prompt``, ``gen``, ``dtype`` (bf16|fp16|fp32), ``attn``
(sdpa), ``repeats`` (3), ``min_time_s`` (0: the TTFT and the E2E repeats each go on until this many seconds have
passed, at least ``repeats`` of them; the counts run are ``ttft_repeats`` / ``e2e_repeats``), ``decode_iters`` (20),
``seed`` (0), optional ``device``.

Metric definitions (also written into each result as ``metric_formulas``):
- TTFT = time of ``generate(max_new_tokens=1, min_new_tokens=1)``: prefill of the whole batch plus one token.
- E2E  = time of ``generate(max_new_tokens=G, min_new_tokens=G)``; EOS is disabled so exactly G tokens come out.
- TPOT = (E2E - TTFT) / (G - 1), from the medians; decode tokens/s = batch / TPOT.
- ``prefill_forward_s`` / ``decode_forward_s``: one bare ``model(...)`` call (no generate loop), so that
  TPOT - decode_forward_s is the per-token overhead of the generate loop (sampling, masks, host work).
All times are device-event seconds on CUDA with a synchronize around the timed region; medians over repeats
with min/max; peaks are ``max_memory_allocated`` after ``reset_peak_memory_stats`` (None on CPU).
"""

from __future__ import annotations

import gc
import statistics

import torch

from gpuscope.measure.choices import ENGINES, check_choice
from gpuscope.measure.device.device import Device, release, run_as_result, summarize
from gpuscope.measure.device.device import repeats as timed_repeats
from gpuscope.measure.device.nvml import PhaseEnergy
from gpuscope.measure.host.gc_pauses import GCPauses, freeze
from gpuscope.measure.host.load import HostLoad
from gpuscope.measure.host.probe import HostProbe
from gpuscope.measure.models.hf_model import (DTYPES, build_model, cache_bytes, cache_kwarg, case_config,
                                              load_pretrained, model_bytes, out_cache, placement_bytes,
                                              silence_generation, vocab_size)
from gpuscope.measure.runner import progress


def _max_or_none(xs):
    xs = [x for x in xs if x is not None]
    return max(xs) if xs else None


# --- the workload ------------------------------------------------------------------------------------------
METRIC_FORMULAS = {
    "ttft_s": "median over repeats of time(generate(max_new_tokens=1, min_new_tokens=1, do_sample=False)); the "
              "gs engines: a prefill and first token in the full run's kept static cache",
    "e2e_s": "median over repeats of time(generate(max_new_tokens=G, min_new_tokens=G, do_sample=False)), EOS disabled",
    "tpot_s": "(e2e_s - ttft_s) / (G - 1)",
    "decode_tokens_per_s": "batch / tpot_s",
    "prefill_tokens_per_s": "batch * prompt / ttft_s",
    "prefill_forward_s": "median of time(model(ids, attention_mask, use_cache=True, logits_to_keep=1))",
    "decode_forward_s": "median of time(model(next_ids[B,1], past_key_values, use_cache=True)), after 2 warm steps: "
                        "HF's eager forward over a DynamicCache whatever the engine, in a second pass over the same "
                        "KV lengths; decode_forward_first_visit_s: the first pass's (new shapes: per-shape set-up)",
    "generate_overhead_per_token_s": "tpot_s - decode_forward_s (hf-eager only: the other engines' steps are "
                                     "compiled or replayed, not that eager forward)",
    "e2e_spread": "(max - min) / median of the E2E repeats: TPOT from medians of so few samples is uncertain by "
                  "about that much (bench's headline calls a run noisy above workloads/infer.NOISY_SPREAD)",
    "gc_pause_s_per_token": "seconds Python's garbage collector paused the host during the E2E repeats (gc.callbacks)"
                            " / (e2e_repeats * generated_tokens); gc_pause_s_per_ttft likewise per TTFT call",
    "gc_tracked_objects": "len(gc.get_objects()) after warm-up (a compiled model's graphs and guards add ~0.8 M); "
                          "with --gc-freeze, gc_frozen_objects were moved out of the collector's reach first",
    "host_load_generate": "the host during the E2E repeats (measure/host/load.py): steal_fraction (hypervisor), "
                          "busy_fraction (all CPUs), this process's involuntary context switches and CPU seconds",
    "host_probe_s": "mean of host_probe_before_s and host_probe_after_s: measure/host/probe.py's fixed tiny forward "
                    "(median of 30) timed just before and just after the E2E repeats; the host's speed they met "
                    "(host_probe_ttft_s: the same around the TTFT repeats)",
    "peak_*_bytes": "torch.cuda.max_memory_allocated after reset_peak_memory_stats, max over repeats",
    "decode_weights_gbs": "weights_bytes / tpot_s / 1e9 (the weights read once per decode step; KV reads not counted)",
    "j_per_token": "generate_energy_j / (e2e_repeats * batch * generated_tokens): NVML energy over the E2E repeats "
                   "(prefill included, as a user's request pays it)",
}


def run_infer(case: dict) -> dict:
    return run_as_result(_run_infer, case)


def tpot_fields(ttft_s: float, e2e_s: float, gen: int, batch: int, weights_bytes: int) -> dict:
    """TPOT = (E2E - TTFT) / (G - 1) and the rates from it. When the E2E median is not above the TTFT median the
    G - 1 decode steps are within the run-to-run noise (a short --gen on a busy host): TPOT is unresolved (None, with
    the reason in ``tpot_unresolved``), never a negative time. One generated token has no decode step (None)."""
    out: dict = {"tpot_s": None, "decode_tokens_per_s": None, "decode_weights_gbs": None}
    if gen <= 1:
        return out
    tpot = (e2e_s - ttft_s) / (gen - 1)
    if tpot <= 0:
        out["tpot_unresolved"] = (f"the E2E median ({e2e_s * 1e3:.2f} ms) is not above the TTFT median "
                                  f"({ttft_s * 1e3:.2f} ms): {gen - 1} decode steps are within the run-to-run "
                                  "noise; use a longer --gen or more --repeats")
        return out
    return {"tpot_s": tpot, "decode_tokens_per_s": batch / tpot, "decode_weights_gbs": weights_bytes / tpot / 1e9}


def generate(model, ids, mask, n: int, engine: str = "hf-eager", cache_len: int | None = None,
              deferred: list | None = None):
    """hf-eager: plain generate (DynamicCache). hf-graph: a static KV cache, with which transformers compiles the
    decode step (torch.compile, mode "reduce-overhead": CUDA graphs) on CUDA devices. gs-graph: gpuscope's greedy
    loop over a static cache with the decode step captured once as a CUDA graph (measure/llm/graph_decode.py);
    gs-compile: the same with the step compiled by torch.compile (Inductor) before capture. ``deferred`` (a list,
    HF engines): generate reads its stop flag one token late instead of waiting every token
    (measure/llm/defer_stop.py); the list collects whether it applied."""
    if deferred is not None:
        from gpuscope.measure.llm.defer_stop import deferred_stop

        with deferred_stop(deferred):
            return generate(model, ids, mask, n, engine, cache_len)
    if engine in ("gs-graph", "gs-compile"):  # gpuscope's own: static cache + the step replayed as one CUDA graph
        from gpuscope.measure.llm.graph_decode import static_greedy

        # cache_len: a TTFT (n = 1) runs in the full run's kept static cache, as the E2E runs do
        return static_greedy(model, ids, n, compile=engine == "gs-compile", cache_len=cache_len)
    kw = {"cache_implementation": "static"} if engine == "hf-graph" else {}
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                          **kw)


_generate = generate  # what the timed phases call (tests replace it to fail a phase)


def deferred_stop_log(case: dict, engine: str, dev: Device) -> list | None:
    """The list that collects whether generate deferred its stop check, or None without ``defer_stop``."""
    if not case.get("defer_stop"):
        return None
    from gpuscope.measure.llm.defer_stop import problem

    why = problem(engine, dev.type)
    if why:
        raise ValueError(f"defer_stop: {why}")
    return []


def infer_settings(case: dict) -> dict:
    """The case's inference settings with their defaults, checked in this order: sizes, dtype, engine (a KeyError
    or a ValueError that names what is allowed)."""
    t = {"batch": int(case["batch"]), "prompt": int(case["prompt"]), "gen": int(case["gen"]),
         "dtype": case.get("dtype", "bf16")}
    if t["dtype"] not in DTYPES:  # before the engine is looked at, as the dtype table lookup always did
        raise KeyError(t["dtype"])
    t.update(attn=case.get("attn", "sdpa"), repeats=max(1, int(case.get("repeats", 3))),
             min_time_s=max(0.0, float(case.get("min_time_s", 0.0))),
             decode_iters=max(1, int(case.get("decode_iters", 20))), engine=case.get("engine", "hf-eager"))
    check_choice("engine", t["engine"], ENGINES)
    return t


def _load_model(case: dict, dev: Device, cfg: dict, t: dict):
    """The model (random weights, or a local checkpoint's own with ``weights``), in eval mode, fused where asked;
    returns (model, config, the result's first fields, the device the inputs go to)."""
    dev.reset_peak()
    if case.get("weights"):  # a local checkpoint's own weights (from_pretrained, optional device_map)
        model, config = load_pretrained(case, dev, DTYPES[t["dtype"]], t["attn"])
        config.use_cache = True
    else:
        model, config = build_model(cfg, dev, DTYPES[t["dtype"]], t["attn"], use_cache=True)
    model.eval()
    silence_generation(model)
    fused = None
    if case.get("fuse_proj"):  # one GEMM for q|k|v and one for gate|up (measure/llm/fused_proj.py)
        from gpuscope.measure.llm.fused_proj import fuse_projections

        fused = fuse_projections(model)
    dev.synchronize()
    res: dict = {"status": "ok", "kind": "infer", "model": case.get("model") or cfg.get("model_type"),
                 "model_type": config.model_type, "device": dev.name, "device_name": dev.device_name(),
                 "dtype": t["dtype"], "attn": t["attn"], "batch": t["batch"], "prompt": t["prompt"], "gen": t["gen"],
                 "repeats": t["repeats"]}
    if fused is not None:
        res["fused_proj"] = fused
    res.update(model_bytes(model))
    res["mem_after_load_bytes"] = dev.allocated()
    res["peak_load_bytes"] = dev.peak_allocated()
    res["weights"] = "pretrained" if case.get("weights") else "random"
    in_dev = dev.torch_device
    if case.get("weights"):
        res["device_map"] = case.get("device_map")
        res["placement_bytes"] = placement_bytes(model)
        emb = model.get_input_embeddings().weight.device
        in_dev = emb if (case.get("device_map") and emb.type != "meta") else dev.torch_device
    return model, config, res, in_dev


def _warm_up(model, ids, mask, t: dict, deferred, dev: Device, res: dict) -> None:
    """An MoE model's routing counted in an untimed eager prefill, then generate at the full length (and a TTFT in
    the kept static cache), so the first timed run pays no allocator growth, compile or graph capture."""
    from gpuscope.measure.llm.moe_routing import prefill_routing

    engine, P, G = t["engine"], t["prompt"], t["gen"]
    routing = prefill_routing(model, ids, mask)  # an MoE model's rows per expert, in an untimed eager prefill
    if routing:  # random weights route unevenly (moe_routing.py): said beside the timings
        res["moe_routing"] = {k: v for k, v in routing.items() if k != "rows_per_expert"}
    # Warm up with the full length: the first generate of G tokens grows the caching allocator's pool for every
    # KV-cache size it meets (cudaMalloc), which would otherwise land in the first timed run. hf-graph also
    # compiles and records its CUDA graphs here (two calls at the timed cache length).
    # a second eager warm-up grows CUDA's caching pool to the timed runs' sizes; a CPU's allocator keeps no pool
    n = (1 if dev.type == "cpu" else 2) if engine == "hf-eager" else 3
    for i in range(n):
        progress.say("warm-up generate", i + 1, n)
        out = _generate(model, ids, mask, G, engine, deferred=deferred)
    out = _generate(model, ids, mask, 1, engine, cache_len=P + G, deferred=deferred)
    del out
    release(dev)


def _time_ttft(model, ids, mask, t: dict, deferred, dev: Device, res: dict) -> list[float]:
    """(a) TTFT: prefill + first token through generate, repeated; the host probe and GC pauses around it."""
    ttft, peaks = [], []
    with HostProbe(dev) as ttft_probe, GCPauses() as gcp:
        for _ in progress.repeats("timed TTFT", timed_repeats(t["repeats"], t["min_time_s"]), t["repeats"]):
            dev.reset_peak()
            with dev.timer() as tm:
                out = _generate(model, ids, mask, 1, t["engine"], cache_len=t["prompt"] + t["gen"], deferred=deferred)
            ttft.append(tm.s)
            peaks.append(dev.peak_allocated())
            del out
    res["ttft_repeats"] = len(ttft)
    res["gc_pause_s_per_ttft"] = gcp.summary()["gc_pause_s"] / len(ttft)
    res["host_probe_ttft_s"] = ttft_probe.summary()["host_probe_s"]  # the host's speed around the TTFT repeats
    res["peak_prefill_bytes"] = _max_or_none(peaks)
    return ttft


def _time_e2e(model, ids, mask, t: dict, deferred, dev: Device, res: dict) -> tuple[list[float], list[float]]:
    """(b) E2E: exactly G new tokens, repeated, with NVML energy, GC pauses, the host's load and probe around the
    repeats; returns (device-timed, wall) seconds."""
    B, P = t["batch"], t["prompt"]
    e2e, e2e_wall, peaks, rpeaks, n_out = [], [], [], [], None
    # every timer synchronises: the energy counter covers the repeats' work; the host's load is recorded beside it
    with HostProbe(dev) as probe, PhaseEnergy(dev) as energy, GCPauses() as gcp, HostLoad() as host:
        for _ in progress.repeats("timed generate", timed_repeats(t["repeats"], t["min_time_s"]), t["repeats"]):
            dev.reset_peak()
            with dev.timer() as tm:
                out = _generate(model, ids, mask, t["gen"], t["engine"], deferred=deferred)
            e2e.append(tm.s)
            e2e_wall.append(tm.wall_s)
            peaks.append(dev.peak_allocated())
            rpeaks.append(dev.peak_reserved())
            n_out = int(out.shape[1]) - P
            del out
    res["generate_energy_j"] = energy.joules
    res["energy_source"] = energy.source
    res["e2e_repeats"] = len(e2e)
    res["j_per_token"] = energy.joules / (len(e2e) * B * n_out) if energy.joules and n_out else None
    res["peak_generate_bytes"] = _max_or_none(peaks)
    res["peak_generate_reserved_bytes"] = _max_or_none(rpeaks)
    res["generated_tokens"] = n_out
    g = gcp.summary()
    res["host_load_generate"] = host.summary()
    res.update(probe.summary())  # the host's speed around the E2E repeats (measure/host/probe.py)
    res["gc_pause_s_per_token"] = g["gc_pause_s"] / (len(e2e) * n_out) if n_out else None
    res["gc_collections_generate"] = g["gc_collections_by_generation"]
    if deferred is not None:  # the timed E2E calls' decode loops (generate asks once per call, after the prefill)
        used = deferred[-len(e2e):]
        res["stop_check"] = "deferred" if all(used) else "per-token sync (transformers refused to defer)"
    release(dev)
    return e2e, e2e_wall


def _time_prefill_forward(model, ids, mask, t: dict, dev: Device, res: dict) -> tuple[list[float], dict]:
    """(c) The bare prefill forward (what generate does for its first step, without the loop around it), with the
    head on the last position where the model takes ``logits_to_keep``; returns (seconds, the forward's kwargs)."""
    pf, peaks = [], []
    kw = {"logits_to_keep": 1}
    o = None
    for i in range(t["repeats"]):
        progress.say("prefill forward", i + 1, t["repeats"])
        o = None
        dev.reset_peak()
        with dev.timer() as tm:
            try:
                o = model(input_ids=ids, attention_mask=mask, use_cache=True, **kw)
            except TypeError:  # a model without logits_to_keep
                kw = {}
                o = model(input_ids=ids, attention_mask=mask, use_cache=True)
        pf.append(tm.s)
        peaks.append(dev.peak_allocated())
    res["peak_prefill_forward_bytes"] = _max_or_none(peaks)
    res["prefill_forward_logits_to_keep"] = kw.get("logits_to_keep")
    res["kv_cache_bytes"] = cache_bytes(out_cache(o))  # for the P prompt tokens of the whole batch
    return pf, kw


def _time_decode_forward(model, ids, mask, kw: dict, t: dict, in_dev, dev: Device) -> tuple[list[float], list[float]]:
    """(d) The bare decode-step forward with the past cache (the cache grows by one token per step), twice over the
    same KV lengths from a fresh prefill: the first pass visits each length for the first time in eager mode (the
    static-cache engines never ran them: cuDNN's SDPA builds a plan per new shape, 54 vs 12 ms a step for
    Llama-3.2-1B on an H200, research/results/2026-11-30-h200-f/probes_1b.json); the second is the steady state timed.
    Returns (first pass, second pass) seconds."""
    B, P, warm = t["batch"], t["prompt"], 2
    full_mask = torch.ones(B, P + warm + t["decode_iters"], dtype=mask.dtype, device=in_dev)
    cache_kw = cache_kwarg(model)
    passes = []
    for k in range(2):
        progress.say("decode-step forwards, pass", k + 1, 2)
        o = model(input_ids=ids, attention_mask=mask, use_cache=True, **kw)
        pkv, nxt, times = out_cache(o), o.logits[:, -1:].argmax(-1), []
        for i in range(warm + t["decode_iters"]):
            step_mask = full_mask[:, : P + i + 1]
            with dev.timer() as tm:
                o = model(input_ids=nxt, attention_mask=step_mask, use_cache=True, **{cache_kw: pkv})
            pkv = out_cache(o)
            nxt = o.logits[:, -1:].argmax(-1)
            times.append(tm.s)
        passes.append(times[warm:])
        del o, pkv
    release(dev)
    return passes[0], passes[1]


def _timing_fields(t: dict, res: dict, ttft, e2e, e2e_wall, pf, dec, timer: str) -> dict:
    """The medians, spreads and rates of the four timed phases (METRIC_FORMULAS), with their samples."""
    B, P, G = t["batch"], t["prompt"], t["gen"]
    s_ttft, s_e2e, s_pf, s_dec = summarize(ttft), summarize(e2e), summarize(pf), summarize(dec)
    out = tpot_fields(s_ttft["median"], s_e2e["median"], G, B, res["weights_bytes"])
    tpot = out["tpot_s"]
    out.update({
        "ttft_s": s_ttft["median"], "ttft_s_min": s_ttft["min"], "ttft_s_max": s_ttft["max"],
        "e2e_s": s_e2e["median"], "e2e_s_min": s_e2e["min"], "e2e_s_max": s_e2e["max"],
        "e2e_wall_s": statistics.median(e2e_wall),
        "prefill_tokens_per_s": B * P / s_ttft["median"] if s_ttft["median"] else None,
        "prefill_forward_s": s_pf["median"], "prefill_forward_s_min": s_pf["min"], "prefill_forward_s_max": s_pf["max"],
        "decode_forward_s": s_dec["median"], "decode_forward_s_min": s_dec["min"], "decode_forward_s_max": s_dec["max"],
        "decode_forward_iters": s_dec["n"],
        "generate_overhead_per_token_s": (tpot - s_dec["median"]) if tpot is not None and t["engine"] == "hf-eager"
        else None,
        "e2e_spread": (s_e2e["max"] - s_e2e["min"]) / s_e2e["median"] if s_e2e["median"] else None,
        "samples_s": {"ttft": ttft, "e2e": e2e, "prefill_forward": pf, "decode_forward": dec},
        "timer": timer,
        "metric_formulas": METRIC_FORMULAS,
    })
    return out


@torch.no_grad()
def _run_infer(case: dict, dev: Device, state: dict) -> dict:
    t = infer_settings(case)
    deferred = deferred_stop_log(case, t["engine"], dev)
    torch.manual_seed(int(case.get("seed", 0)))

    state["phase"] = "load"
    progress.say("building the model")
    model, config, res, in_dev = _load_model(case, dev, case_config(case), t)
    ids = torch.randint(0, vocab_size(config), (t["batch"], t["prompt"]), device=in_dev)
    mask = torch.ones_like(ids)

    state["phase"] = "warmup"
    res["engine"] = t["engine"]
    _warm_up(model, ids, mask, t, deferred, dev, res)
    res["mem_before_generate_bytes"] = dev.allocated()
    if case.get("gc_freeze"):  # the live objects (the model, a compile's graphs and guards) leave the GC's reach
        res["gc_frozen_objects"] = freeze()
    res["gc_tracked_objects"] = len(gc.get_objects())

    state["phase"] = "prefill"
    ttft = _time_ttft(model, ids, mask, t, deferred, dev, res)
    state["phase"] = "generate"
    e2e, e2e_wall = _time_e2e(model, ids, mask, t, deferred, dev, res)
    state["phase"] = "prefill_forward"
    pf, kw = _time_prefill_forward(model, ids, mask, t, dev, res)
    state["phase"] = "decode_forward"
    first, dec = _time_decode_forward(model, ids, mask, kw, t, in_dev, dev)
    res["decode_forward_first_visit_s"] = statistics.median(first)
    res.update(_timing_fields(t, res, ttft, e2e, e2e_wall, pf, dec, dev.timer_kind))
    del model
    if case.get("gc_freeze"):
        gc.unfreeze()
    release(dev)
    return res
