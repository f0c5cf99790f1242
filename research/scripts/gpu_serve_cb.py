"""transformers continuous batching step by step, for `plan serve --engine transformers` (estimate/serve/).

Builds a random-weight Llama-3.1-8B-shaped model with fewer layers (--layers, default 4: per-layer costs and the
host's per-step costs are what the planner needs; the cache sizes itself to the free memory as in a real run),
runs `init_continuous_batching` (greedy, EOS off, paged|sdpa) over a few offline workloads, and times every step's
three phases in the engine's own loop: prepare_next_batch (scheduling, index lists, mask), _generation_step (the
forward, sampling and the device-to-host copy: a synchronous loop waits on the GPU here) and update_batch. Each step
is recorded with its requests, query tokens and KV tokens read, and each workload with the cache the engine made
(num_blocks, max_batch_tokens) and the memory free before it, so kv_pages.py's memory rule and step_time.py's
host/attention terms can be checked against it.

usage (repo root, GPU machine): python3 research/scripts/gpu_serve_cb.py --out $OUT/serve_cb.json
CPU check: python research/scripts/gpu_serve_cb.py --device cpu --tiny --out /tmp/serve_cb.json
Budget: --budget seconds in all (default 150; each workload is skipped once it would pass it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

WORKLOADS = [(64, 512, 32), (256, 512, 32), (256, 128, 32), (32, 2048, 32), (512, 128, 16)]
TINY_WORKLOADS = [(16, 32, 24), (64, 32, 24), (128, 32, 24), (64, 512, 24), (16, 1024, 16)]


def build(device: str, layers: int, tiny: bool):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if tiny:
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=4096)
    else:  # Llama-3.1-8B's shape (config.json of meta-llama/Llama-3.1-8B) with fewer layers
        cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers, num_attention_heads=32,
                          num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=131072,
                          rope_theta=500000.0, rms_norm_eps=1e-5)
    cfg._attn_implementation = "sdpa"
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    return model, cfg


def instrument(bp, rec: list) -> None:
    import torch

    # the model keeps its manager (and batch processor) between calls: wrap the original methods, never a wrapper
    if not hasattr(bp, "gs_original"):
        bp.gs_original = (bp.prepare_next_batch, bp._generation_step, bp.update_batch)
    pn, gs, ub = bp.gs_original
    cuda = torch.cuda.is_available()

    def prep():
        t = time.perf_counter()
        r = pn()
        io = bp.inputs_and_outputs
        rec.append({"prep_s": time.perf_counter() - t, "requests": getattr(io, "num_request_in_batch", 0),
                    "q": getattr(io, "num_q_tokens", 0), "kv": getattr(io, "max_kv_read", 0)})
        return r

    def step(*a):
        t = time.perf_counter()
        r = gs(*a)
        if cuda:
            torch.cuda.synchronize()
        rec[-1]["fwd_s"] = time.perf_counter() - t
        return r

    def upd():
        t = time.perf_counter()
        r = ub()
        rec[-1]["upd_s"] = time.perf_counter() - t
        return r

    bp.prepare_next_batch, bp._generation_step, bp.update_batch = prep, step, upd


def run_workload(model, n: int, p: int, g: int, device: str) -> dict:
    import torch
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    from transformers.generation.continuous_batching.utils import WorkloadHints

    free_before = torch.cuda.mem_get_info()[0] if device != "cpu" else None
    # on a CPU the engine would size M and the cache to the host's RAM (an [M, N + M] mask of gigabytes): fix both
    cb = (ContinuousBatchingConfig(num_blocks=n * ((p + g) // 256 + 2), max_batch_tokens=512) if device == "cpu"
          else ContinuousBatchingConfig())
    gen = GenerationConfig(max_new_tokens=g, do_sample=False, eos_token_id=-1)
    m = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb,
                                       workload_hints=WorkloadHints(p, g, n))
    rec: list = []
    t0 = time.perf_counter()
    m.start()
    while getattr(m, "batch_processor", None) is None:
        time.sleep(0.005)
    bp = m.batch_processor
    instrument(bp, rec)
    cache = bp.cache
    vocab = model.config.vocab_size
    for i in range(n):
        m.add_request([1 + (7 * i + j) % (vocab - 2) for j in range(p)], request_id=f"r{i}", max_new_tokens=g)
    got, errors = 0, []
    while got < n:
        o = m.get_result(timeout=120)
        if o is None:
            break
        if o.is_finished():
            got += 1
            if o.error:
                errors.append(str(o.error)[:200])
    wall = time.perf_counter() - t0
    m.stop(block=True)
    cfg = m.continuous_batching_config
    steps = [r for r in rec if "upd_s" in r and r["requests"]]
    dec = [r for r in steps if r["q"] == r["requests"]]
    med = (lambda k, xs: statistics.median(r[k] for r in xs) if xs else None)
    out = {"requests": n, "prompt": p, "gen": g, "finished": got, "failed": len(errors), "errors": errors[:3],
           "wall_s": wall,
           "num_blocks": getattr(cache, "num_blocks", None), "max_batch_tokens": getattr(cache, "max_batch_tokens", None),
           "block_size": getattr(cache, "block_size", None), "free_before_bytes": free_before,
           "use_cuda_graph": str(getattr(cfg, "use_cuda_graph", None)),
           "use_async_batching": getattr(cfg, "use_async_batching", None),
           "attn": getattr(model.config, "_attn_implementation", None), "steps": len(steps),
           "decode_steps": len(dec), "decode_median": {k: med(k, dec) for k in ("prep_s", "fwd_s", "upd_s", "kv",
                                                                                 "requests")},
           "step_records": steps}
    del m
    if device != "cpu":
        torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--budget", type=float, default=150.0)
    a = ap.parse_args()
    import torch
    import transformers

    t0 = time.perf_counter()
    model, cfg = build(a.device, a.layers, a.tiny)
    res = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "device": torch.cuda.get_device_name() if a.device != "cpu" else "cpu",
           "layers": cfg.num_hidden_layers, "tiny": a.tiny, "build_s": time.perf_counter() - t0,
           "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters()), "workloads": []}
    for n, p, g in (TINY_WORKLOADS if a.tiny else WORKLOADS):
        spent = time.perf_counter() - t0
        if spent > a.budget * 0.8:
            res["workloads"].append({"requests": n, "prompt": p, "gen": g, "skipped": f"budget ({spent:.0f} s)"})
            continue
        try:
            res["workloads"].append(run_workload(model, n, p, g, a.device))
        except Exception as e:  # an OOM or an engine error is a result
            res["workloads"].append({"requests": n, "prompt": p, "gen": g, "error": f"{type(e).__name__}: {e}"})
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps([{k: w.get(k) for k in ("requests", "prompt", "gen", "wall_s", "num_blocks", "decode_median",
                                               "error", "skipped")} for w in res["workloads"]], indent=1))


if __name__ == "__main__":
    main()
