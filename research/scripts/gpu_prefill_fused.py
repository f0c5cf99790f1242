"""Why does bench all's 8B hf-graph case read a TTFT 12% longer than planned? Session 10's two runs of
`bench all` measured 76-77 ms for Llama-3.1-8B, batch 1, a 2048-token prompt, with `--fuse-proj --defer-stop`,
against 67.7 ms planned; session 5 measured 67.2 ms for the same case without fused projections.

Two copies of the model on one GPU, one with fused q|k|v and gate|up (measure/llm/fused_proj.py), timed alternately:
- ttft: HF generate, one new token, static cache (what bench's TTFT times for hf-graph);
- prefill: the bare forward over the prompt (logits of the last position only, as generate asks), no cache;
- a torch.profiler kernel table of one ttft of each.
Usage (GPU machine): PYTHONPATH=src python3 research/scripts/gpu_prefill_fused.py --out $OUT/prefill_fused.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def wall_ms(dev, fn) -> float:
    """Milliseconds of ``fn()`` on the host's clock, the device synchronised before and after."""
    dev.synchronize()
    a = time.perf_counter()
    fn()
    dev.synchronize()
    return (time.perf_counter() - a) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    import torch

    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.llm.fused_proj import fuse_projections
    from gpuscope.measure.models.hf_model import build_model, case_config, silence_generation
    from gpuscope.measure.llm.infer import generate

    dev = Device(pick_device(None))
    t0 = time.perf_counter()
    models = {}
    for name in ("plain", "fused"):
        m, cfg = build_model(case_config({"model": args.model}), dev, torch.bfloat16, "sdpa", use_cache=True)
        m.eval()
        silence_generation(m)
        if name == "fused":
            fuse_projections(m)
        models[name] = m
    ids = torch.randint(0, 1000, (1, args.prompt), device=dev.torch_device)
    mask = torch.ones_like(ids)
    out = {"model": args.model, "prompt": args.prompt, "build_s": time.perf_counter() - t0,
           "ttft_ms": {"plain": [], "fused": []}, "prefill_ms": {"plain": [], "fused": []}}

    def timed(fn) -> float:
        return wall_ms(dev, fn)

    with torch.no_grad():
        for m in models.values():  # warm-up: allocator pools, cuBLAS/cuDNN plans
            for _ in range(2):
                generate(m, ids, mask, 1, "hf-graph")
                m(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1)
        for _ in range(args.rounds):
            for name, m in models.items():
                out["ttft_ms"][name].append(statistics.median(
                    timed(lambda: generate(m, ids, mask, 1, "hf-graph")) for _ in range(args.reps)))
                out["prefill_ms"][name].append(statistics.median(
                    timed(lambda: m(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1))
                    for _ in range(args.reps)))
        from torch.profiler import ProfilerActivity, profile

        out["kernels"] = {}
        for name, m in models.items() if dev.type == "cuda" else ():
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                generate(m, ids, mask, 1, "hf-graph")
                dev.synchronize()
            rows = sorted(((e.key, e.device_time_total / 1e3, e.count) for e in prof.key_averages()
                           if e.device_time_total > 0), key=lambda r: -r[1])
            out["kernels"][name] = {"total_ms": sum(r[1] for r in rows),
                                    "top": [{"kernel": k[:120], "ms": ms, "count": n} for k, ms, n in rows[:12]]}
    for key in ("ttft_ms", "prefill_ms"):
        print(key, {n: [round(v, 2) for v in vs] for n, vs in out[key].items()})
    for name, k in out["kernels"].items():
        print(name, "kernels", round(k["total_ms"], 2), "ms")
        for r in k["top"][:8]:
            print(f"   {r['ms']:8.2f} ms x{r['count']:4d} {r['kernel']}")
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
