"""Two rates the planner had no measurement for (run on the GPU machine, ~10 s):
- torch._grouped_mm (what transformers 5 runs for MoE experts by default) for Mixtral- and DeepSeek-V2-Lite-like
  prefill shapes, TFLOP/s against the dense GEMM rate;
- SDPA with an explicit causal mask (what a sliding-window config makes transformers pass) against is_causal=True,
  for Phi-3-mini's attention shape.
Usage: PYTHONPATH=src python3 research/scripts/gpu_moe_attn_check.py --out $OUT/moe_attn.json
"""

import argparse
import json

import torch


def t(fn, rep=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(rep):
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = {"grouped_mm": [], "sdpa": []}
    for name, e, tok, k, n in (("mixtral gate_up", 8, 256, 4096, 28672), ("mixtral down", 8, 256, 14336, 4096),
                               ("dsv2lite gate_up", 64, 384, 2048, 2816), ("dsv2lite down", 64, 384, 1408, 2048)):
        x = torch.randn(e * tok, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        offs = torch.arange(1, e + 1, device="cuda", dtype=torch.int32) * tok
        try:
            s = t(lambda: torch._grouped_mm(x, w, offs=offs))
            dense = t(lambda: x @ w[0])
            out["grouped_mm"].append({"name": name, "s": s, "tflops": 2 * e * tok * k * n / s / 1e12,
                                      "dense_same_rows_tflops": 2 * e * tok * k * n / dense / 1e12})
        except Exception as exc:  # noqa: BLE001
            out["grouped_mm"].append({"name": name, "error": repr(exc)[:200]})
    b, h, s_, d = 4, 32, 2048, 96
    q, kk, v = (torch.randn(b, h, s_, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(s_, s_, device="cuda", dtype=torch.bool).tril()[None, None]
    f = 4 * b * h * s_ * s_ * d / 2
    tc = t(lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True))
    tm = t(lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, attn_mask=mask))
    out["sdpa"].append({"shape": [b, h, s_, d], "is_causal_tflops": f / tc / 1e12, "masked_tflops": f / tm / 1e12})
    json.dump(out, open(args.out, "w"), indent=1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
