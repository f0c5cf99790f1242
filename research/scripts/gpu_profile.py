"""Where does the time go? Kernel-level profiles and ceilings that the planner's time model rests on.

Run on the GPU machine: PYTHONPATH=src python3 research/scripts/gpu_profile.py --out $OUT/profile.json
1. GEMM rates (bf16, random data, CUDA events, median of 20 after 5 warm-ups) for the shapes of the measured
   workloads: M tokens x N out x K in.
2. SDPA flash attention, causal, forward and forward+backward rates.
3. Host cost of eager dispatch: host seconds per small op (torch.add on a 1 KiB CUDA tensor) and per nn.Linear
   module call, measured without synchronising (what the host spends issuing work).
4. torch.profiler kernel tables (GPU time by kernel, top 30) for a llama-3.1-8b prefill (b16 x p1024) and one
   AMP training step of llama-3.2-1b (mb4 x s2048), with the sum of GPU kernel time vs wall time.
"""

import argparse
import json
import statistics
import time

import torch


def bench(fn, warm=5, rep=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(rep):
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)


def gemms(out):
    shapes = []
    for m in (512, 2048, 8192, 16384):
        for n, k in ((4096, 4096), (1024, 4096), (28672, 4096), (4096, 14336), (6144, 4096),
                     (2048, 2048), (512, 2048), (16384, 2048), (2048, 8192), (128256, 2048),
                     (5120, 5120), (55296, 5120), (5120, 27648)):
            shapes.append((m, n, k))
    res = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        t = bench(lambda: torch.nn.functional.linear(a, w))
        res.append({"m": m, "n": n, "k": k, "s": t, "tflops": 2 * m * n * k / t / 1e12})
        del a, w
    out["gemm"] = res


def attention(out):
    res = []
    for b, h, s, d in ((16, 32, 1024, 128), (4, 28, 4096, 128), (4, 32, 2048, 64), (8, 40, 2048, 128)):
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        tf = bench(f)
        o = f()
        g = torch.randn_like(o)
        tb = bench(lambda: torch.autograd.grad(f(), (q, k, v), g))
        flops = 4 * b * h * s * s * d / 2  # causal: half of QK^T and PV
        res.append({"b": b, "h": h, "s": s, "d": d, "fwd_s": tf, "fwd_tflops": flops / tf / 1e12,
                    "fwd_bwd_s": tb, "fwd_bwd_tflops": 3.5 * flops / tb / 1e12})
    out["sdpa"] = res


def host(out):
    x = torch.randn(256, device="cuda")
    lin = torch.nn.Linear(64, 64, device="cuda")
    y = torch.randn(1, 64, device="cuda")
    for name, fn in (("torch.add", lambda: torch.add(x, 1)), ("nn.Linear", lambda: lin(y))):
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        n = 5000
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.setdefault("host", {})[name + "_s_per_call"] = (time.perf_counter() - t0) / n
        torch.cuda.synchronize()


def profile(out, name, run):
    from torch.profiler import ProfilerActivity, profile as prof

    run()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        run()
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    rows = []
    total = 0.0
    for ev in p.key_averages():
        t = ev.device_time_total / 1e6 if hasattr(ev, "device_time_total") else ev.cuda_time_total / 1e6
        if t > 0:
            rows.append({"kernel": ev.key[:140], "s": t, "calls": ev.count})
            total += t
    rows.sort(key=lambda r: -r["s"])
    out[name] = {"wall_s": wall, "kernel_s": total, "kernels": sum(r["calls"] for r in rows), "top": rows[:30]}


def workloads(out):
    from gpuscope.measure.device.device import Device
    from gpuscope.measure.models.hf_model import build_model
    from gpuscope.specs.models import preset_config

    dev = Device("cuda")
    model, cfg = build_model(preset_config("llama-3.1-8b"), dev, torch.bfloat16)
    model.eval()
    ids = torch.randint(0, cfg.vocab_size, (16, 1024), device="cuda")
    with torch.no_grad():
        profile(out, "prefill_llama8b_b16_p1024", lambda: model(ids, use_cache=True, logits_to_keep=1))
    del model
    torch.cuda.empty_cache()
    model, cfg = build_model(preset_config("llama-3.2-1b"), dev, torch.float32, use_cache=False)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (4, 2048), device="cuda")

    def step():
        with torch.autocast("cuda", torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    profile(out, "train_llama1b_mb4_s2048_amp", step)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for fn in (host, gemms, attention, workloads):
        try:
            fn(out)
        except Exception as exc:  # keep what the other parts measured
            out.setdefault("errors", []).append(f"{fn.__name__}: {exc!r}")
        json.dump(out, open(a.out, "w"), indent=1)
    print(json.dumps({k: v for k, v in out.items() if k in ("host", "errors")}))
    for g in out.get("gemm", []):
        print(f"gemm {g['m']}x{g['n']}x{g['k']}: {g['tflops']:.0f} TF")
    for s in out.get("sdpa", []):
        print(f"sdpa {s}")
    for k in ("prefill_llama8b_b16_p1024", "train_llama1b_mb4_s2048_amp"):
        if k in out:
            print(k, {x: out[k][x] for x in ("wall_s", "kernel_s", "kernels")})
            for r in out[k]["top"][:12]:
                print(f"   {r['s'] * 1e3:8.2f} ms {r['calls']:5} {r['kernel'][:100]}")


if __name__ == "__main__":
    main()
