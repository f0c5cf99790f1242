"""Why does HF's static-cache compiled generate (bench's hf-graph engine) decode slower than one CUDA graph?

Run on the GPU machine: PYTHONPATH=src python3 research/scripts/gpu_hf_graph.py --model llama-3.2-1b --prompt 512 \
    --variants default,user_cache,fullgraph,no_compile --out $OUT/hf_graph_1b.json
Per variant of `model.generate(..., cache_implementation="static")` (random weights, greedy, fixed length):
- TPOT = (E2E(G) - E2E(1)) / (G - 1), medians of --repeats after warm-ups (the same formula as bench infer);
- what torch.compile did: dynamo/inductor counters (graph breaks, recompiles, cudagraph skips) and the
  perf_hints / recompiles / graph_breaks / cudagraphs log lines;
- a torch.profiler trace of one generate of --prof-gen tokens: counts of cudaGraphLaunch and kernel launches per
  decoded token, GPU kernel time and host time per token.
Variants: default (what bench runs), defer / eager_defer (static-cache / plain generate with transformers'
DeferredStopCheck switched on for CUDA, measure/llm/defer_stop.py; checks the tokens equal the reference's), eager, user_cache (one StaticCache passed in and reset between calls, so its tensors
keep their addresses), fullgraph (CompileConfig(fullgraph=True)), no_compile (disable_compile=True: the static cache
eager, the baseline that tells whether compile ran at all).
"""

import argparse
import io
import json
import logging
import statistics
import time

import torch

from gpuscope.measure.device.device import Device
from gpuscope.measure.models.hf_model import build_model, case_config, silence_generation


def _capture_logs():
    buf = io.StringIO()
    h = logging.StreamHandler(buf)
    h.setLevel(logging.DEBUG)
    for name in ("torch._dynamo", "torch._inductor", "torch"):
        logging.getLogger(name).addHandler(h)
    for kw in ({"perf_hints": True}, {"recompiles": True}, {"graph_breaks": True}, {"cudagraphs": True},
               {"cudagraph_static_inputs": True}):
        try:
            torch._logging.set_logs(**{**_LOGS, **kw})
            _LOGS.update(kw)
        except (ValueError, TypeError) as e:  # an artifact this torch does not have
            print("log artifact not set:", kw, e)
    return buf, h


_LOGS: dict = {}
_USED: list = []  # the defer variants: whether transformers applied the deferred stop check, per generate


def _counters() -> dict:
    from torch._dynamo.utils import counters

    return {k: dict(v) for k, v in counters.items() if v}


def _gen(model, ids, mask, n, variant, cache):
    kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    if variant in ("defer", "eager_defer"):  # generate reads its stop flag one token late (measure/llm/defer_stop.py)
        from gpuscope.measure.llm.defer_stop import deferred_stop

        with deferred_stop(_USED):
            return model.generate(**kw) if variant == "eager_defer" else model.generate(
                cache_implementation="static", **kw)
    if variant == "eager":
        return model.generate(**kw)
    if variant == "user_cache":
        cache.reset()
        return model.generate(past_key_values=cache, **kw)
    return model.generate(cache_implementation="static", **kw)


def _time(fn, repeats, dev):
    ts = []
    for _ in range(repeats):
        dev.synchronize()
        t0 = time.perf_counter()
        fn()
        dev.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def _profile(fn, n_tokens, dev):
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    dev.synchronize()
    with profile(activities=acts) as prof:
        fn()
        dev.synchronize()
    rows = {}
    gpu_us = 0.0
    for e in prof.key_averages():
        rows[e.key] = {"count": e.count, "self_cpu_us": e.self_cpu_time_total,
                       "device_us": getattr(e, "self_device_time_total", 0.0)}
    for e in prof.events():
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
            gpu_us += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    launches = {k: v["count"] for k, v in rows.items()
                if k in ("cudaGraphLaunch", "cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx",
                         "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaStreamSynchronize",
                         "cudaDeviceSynchronize", "cudaEventSynchronize")}
    top = sorted(rows.items(), key=lambda kv: -kv[1]["self_cpu_us"])[:40]
    return {"tokens": n_tokens, "launch_counts": launches,
            "launch_per_token": {k: v / n_tokens for k, v in launches.items()},
            "gpu_kernel_us_total": gpu_us, "top_self_cpu": [{"name": k, **v} for k, v in top]}


def _bare_forwards(model, ids, dev, n: int = 20) -> dict:
    """Eager prefill and decode-step forwards over a DynamicCache (what bench infer's decode_forward_s times)."""
    from gpuscope.measure.models.hf_model import cache_kwarg, out_cache
    from gpuscope.measure.host.overhead import decode_steps

    kw = cache_kwarg(model)
    pre = []
    for _ in range(3):
        dev.synchronize()
        t0 = time.perf_counter()
        o = model(ids, use_cache=True, logits_to_keep=1)
        dev.synchronize()
        pre.append(time.perf_counter() - t0)
    dec, _ = decode_steps(model, ids[:, -1:], out_cache(o), kw, dev, n)
    return {"prefill_s": statistics.median(pre), "decode_s": statistics.median(dec[3:]), "decode_samples": dec}


def _probes(model, ids, mask, variant, cache, dev, repeats) -> list:
    """Why do eager forwards and the TTFT run slower in a process that compiled the step? Each stage times the bare
    eager forwards and generate of one token (TTFT): as is; after gc.collect() + gc.freeze() (the collector no
    longer walks the compile's objects, as vLLM does after capture); after torch._dynamo.reset() (compiled code
    and guards dropped; the next generate compiles again, untimed)."""
    import gc

    stages = []
    for stage in ("as_is", "gc_freeze", "dynamo_reset"):
        if stage == "gc_freeze":
            gc.collect()
            gc.freeze()
        if stage == "dynamo_reset":
            torch._dynamo.reset()
            _gen(model, ids, mask, 2, variant, cache)
        row = {"stage": stage, "gc_objects": len(gc.get_objects()), "gc_counts": gc.get_count(),
               "gc_frozen": gc.get_freeze_count()}
        row.update(_bare_forwards(model, ids, dev))
        row["ttft_s"], row["ttft_samples"] = _time(lambda: _gen(model, ids, mask, 1, variant, cache), repeats, dev)
        stages.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "decode_samples"}), flush=True)
    gc.unfreeze()
    return stages


def run_variant(cfg, dev, args, variant, layers: int = 0):
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    _USED.clear()
    if layers:  # 0: the preset's own depth
        cfg = {**cfg, "num_hidden_layers": layers}
    model, config = build_model(cfg, dev, torch.bfloat16, "sdpa", use_cache=True)
    model.eval()
    silence_generation(model)
    if variant == "fullgraph":
        from transformers import CompileConfig

        model.generation_config.compile_config = CompileConfig(fullgraph=True)
    if variant == "no_compile":
        model.generation_config.disable_compile = True
    cache = None
    if variant == "user_cache":
        from transformers import StaticCache

        cache = StaticCache(config=config, max_cache_len=args.prompt + args.gen)
    B, P, G = 1, args.prompt, args.gen
    ids = torch.randint(0, config.vocab_size, (B, P), device=dev.torch_device)
    mask = torch.ones_like(ids)
    out = {"variant": variant}
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(3):
            _gen(model, ids, mask, G, variant, cache)
        dev.synchronize()
        out["warmup_s"] = time.perf_counter() - t0
        e1, e1s = _time(lambda: _gen(model, ids, mask, 1, variant, cache), args.repeats, dev)
        eg, egs = _time(lambda: _gen(model, ids, mask, G, variant, cache), args.repeats, dev)
        out.update(ttft_s=e1, ttft_samples=e1s, e2e_s=eg, e2e_samples=egs, tpot_s=(eg - e1) / (G - 1))
        trend = []  # TPOT per later call: does the per-step cost grow with the number of generate calls made?
        for _ in range(args.trend):
            a, _x = _time(lambda: _gen(model, ids, mask, 1, variant, cache), 1, dev)
            b, _x = _time(lambda: _gen(model, ids, mask, G, variant, cache), 1, dev)
            trend.append((b - a) / (G - 1))
        out["tpot_trend_s"] = trend
        if variant in ("defer", "eager_defer"):  # the same tokens as without deferral (the extra step is undone)
            ref = "default" if variant == "defer" else "eager"
            a = _gen(model, ids, mask, G, variant, cache)
            b = _gen(model, ids, mask, G, ref, cache)
            out["tokens_equal_to_" + ref] = bool(a.shape == b.shape and torch.equal(a, b))
            out["generated_tokens"] = int(a.shape[1]) - P
            out["deferred_applied"] = sorted(set(_USED))
        if args.probes:
            out["probes"] = _probes(model, ids, mask, variant, cache, dev, args.repeats)
        pg = args.prof_gen
        if pg <= 1:
            out["counters"] = _counters()
            del model, cache
            return out
        p1 = _profile(lambda: _gen(model, ids, mask, 1, variant, cache), 1, dev)
        pn = _profile(lambda: _gen(model, ids, mask, pg, variant, cache), pg, dev)
        out["profile_gen1"] = p1
        out["profile_genN"] = pn
        out["decode_launch_per_token"] = {
            k: (pn["launch_counts"].get(k, 0) - p1["launch_counts"].get(k, 0)) / (pg - 1)
            for k in pn["launch_counts"]}
        out["decode_gpu_us_per_token"] = (pn["gpu_kernel_us_total"] - p1["gpu_kernel_us_total"]) / (pg - 1)
    out["counters"] = _counters()
    out["compiled_call"] = repr(getattr(model, "_compiled_call", None))[:300]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    out["weights_bytes"] = weights
    out["decode_gbs"] = weights / out["tpot_s"] / 1e9
    del model, cache
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--prof-gen", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", default="default,user_cache,fullgraph,no_compile")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--trend", type=int, default=0, help="time this many more (gen 1, gen G) pairs, one by one")
    ap.add_argument("--layers", default="", help="comma list: rebuild the model with each layer count")
    ap.add_argument("--small", action="store_true", help="hidden 256, 4 heads, 2 KV heads, FFN 512, vocab 4096")
    ap.add_argument("--logs", action="store_true", help="debug logs of compile/cudagraphs (they slow the host)")
    ap.add_argument("--probes", action="store_true", help="time bare eager forwards and TTFT as is, after "
                    "gc.freeze() and after torch._dynamo.reset() (_probes)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers

    dev = Device(args.device)
    cfg = case_config({"model": args.model})
    res = {"model": args.model, "prompt": args.prompt, "gen": args.gen, "torch": torch.__version__,
           "transformers": transformers.__version__, "variants": []}
    if args.small:
        cfg = {**cfg, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
               "intermediate_size": 512, "vocab_size": 4096}
    buf = _capture_logs()[0] if args.logs else io.StringIO()
    layer_list = [int(x) for x in args.layers.split(",")] if args.layers else [0]
    for n_layers in layer_list:
        for v in args.variants.split(","):
            mark = buf.tell()
            try:
                r = run_variant(cfg, dev, args, v, n_layers)
            except Exception as e:  # one variant's failure is a result
                r = {"variant": v, "error": f"{type(e).__name__}: {e}"[:2000]}
            r["layers"] = n_layers or cfg.get("num_hidden_layers")
            r["log"] = buf.getvalue()[mark:][-20000:]
            res["variants"].append(r)
            print(json.dumps({k: r.get(k) for k in ("variant", "layers", "tpot_s", "ttft_s", "decode_gbs",
                                                    "decode_launch_per_token", "decode_gpu_us_per_token",
                                                    "tpot_trend_s", "tokens_equal_to_default",
                                                    "tokens_equal_to_eager", "deferred_applied", "error")}), flush=True)
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
