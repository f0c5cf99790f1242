"""Decode-time ceilings: bandwidth of skinny bf16 GEMMs (M = 1..64 tokens) and the per-kernel floor in a CUDA graph.

Run on the GPU machine: PYTHONPATH=src python3 research/scripts/gpu_decode_ceilings.py --out $OUT/decode_ceilings.json
- GEMM: y = x @ W^T for W of (N, K) bf16, random; 50 launches captured in one CUDA graph, replayed; bytes =
  weights + activations; reported as GB/s and as a fraction of the device-to-device copy bandwidth.
- kernel floor: a CUDA graph of 2000 tiny elementwise kernels (x.add_(1) on 256 floats); seconds per kernel.
"""

import argparse
import json

import torch


def graph_time(fn, n_inner: int, reps: int = 10) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n_inner):
            fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        a.record(); g.replay(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b) / 1e3 / n_inner)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = {"device": torch.cuda.get_device_name()}
    x = torch.randn(1024**3 // 2, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    t = graph_time(lambda: y.copy_(x), 5)
    copy = 2 * x.numel() * 2 / t / 1e9
    out["copy_gbs"] = copy
    del x, y
    rows = []
    for n, k in ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (28672, 4096), (128256, 4096),
                 (2048, 2048), (8192, 2048), (2048, 8192), (5120, 5120), (27648, 5120)):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for m in (1, 4, 16, 64):
            xx = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            t = graph_time(lambda: torch.nn.functional.linear(xx, w), 50)
            gbs = (n * k + m * k + m * n) * 2 / t / 1e9
            rows.append({"m": m, "n": n, "k": k, "s": t, "gbs": gbs, "fraction_of_copy": gbs / copy})
        del w
    out["skinny_gemm"] = rows
    z = torch.randn(256, device="cuda")
    out["graph_kernel_floor_s"] = graph_time(lambda: z.add_(1), 2000, reps=5)
    json.dump(out, open(a.out, "w"), indent=1)
    print("copy", round(copy), "GB/s; kernel floor", out["graph_kernel_floor_s"] * 1e6, "us")
    for r in rows:
        print(f"m={r['m']:3} {r['n']:6}x{r['k']:6}: {r['gbs']:6.0f} GB/s ({r['fraction_of_copy']:.0%}) {r['s'] * 1e6:7.1f} us")


if __name__ == "__main__":
    main()
