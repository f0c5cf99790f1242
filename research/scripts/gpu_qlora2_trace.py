"""Where QLoRA's backward host time goes (estimate/lora_train.py BNB_BACKWARD_UNITS: 17.1 launch_s, 294 us on the
catalog H200, a quantized Linear; set from one run's residual in research/results/2026-12-02-h200/qlora.md).

Llama-3.1-8B's decoder layer (its preset config, num_hidden_layers cut to 1 and 3) built as `bench train` builds it
(measure/models/hf_model.build_model, measure/llm/lora.apply_lora / quantize_nf4), micro-batch 1 x 2048 (the runs'
shape), bf16 autocast, no checkpointing. Four bases:
  bf16   frozen bf16 Linears, no adapters (the input embeddings' output requires grad, so dX runs through them);
  nf4    bitsandbytes Linear4bit (NF4, double quant), no adapters, the same;
  lora   peft r16 all-linear on the bf16 base (fp32 adapters);
  qlora  peft r16 all-linear on the NF4 base (peft's bnb Linear4bit layer).
1. Timings without a profiler (median of N iterations): forward and backward, each the host's issue time (the call
   returning, no synchronize) and its wall time (synchronized). A decoder layer's share = (3 layers - 1 layer) / 2;
   a Linear's = that / 7. Host-bound at 2048 tokens: issue time is the host's cost.
2. Inside MatMul4Bit.backward (qlora and nf4): the Python Function's body timed by wrapping it (and, within it,
   F.dequantize_4bit), per call; the rest of the per-Linear backward is the autograd engine, peft's layer and the
   GEMM's dispatch.
3. torch.profiler (CPU + CUDA) of one forward + backward of the 1-layer qlora and lora models: the op tables
   (self CPU, CUDA), the autograd nodes' counts and CPU time, a chrome trace of qlora.
usage: PYTHONPATH=src python3 research/scripts/gpu_qlora2_trace.py --out DIR [--tiny]   (--tiny: TINY_LLAMA on CPU)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from gpuscope.measure.device.device import Device
from gpuscope.measure.llm.lora import apply_lora, quantize_nf4
from gpuscope.measure.models.hf_model import build_model
from gpuscope.measure.models.train_step import autocast

LINEARS_PER_LAYER = 7
BASES = ("bf16", "nf4", "lora", "qlora")


def _config(tiny: bool, layers: int) -> dict:
    if tiny:
        from gpuscope.workloads.sets import TINY_LLAMA
        cfg = dict(TINY_LLAMA)
    else:
        from gpuscope.specs.models import preset_config
        cfg = preset_config("llama-3.1-8b")
    cfg["num_hidden_layers"] = layers
    return cfg


def _build(base: str, cfg: dict, dev: Device):
    model, _ = build_model(cfg, dev, torch.bfloat16, "sdpa", use_cache=False)
    if base in ("lora", "qlora"):
        model, _ = apply_lora(model, {"lora_r": 16, "qlora": base == "qlora", "precision": "amp-bf16"})
    else:
        model.requires_grad_(False)
        if base == "nf4":
            quantize_nf4(model, torch.bfloat16)
        model.enable_input_require_grads()  # dX through the frozen layers, as adapters would need
    model.train()
    return model


def _step(model, ids, dev: Device, times: dict | None):
    t0 = time.perf_counter()
    with autocast(dev, torch.bfloat16):
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    t1 = time.perf_counter()
    dev.synchronize()
    t2 = time.perf_counter()
    loss.backward()
    t3 = time.perf_counter()
    dev.synchronize()
    t4 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    if times is not None:
        for k, v in (("fwd_issue", t1 - t0), ("fwd_wall", t2 - t0), ("bwd_issue", t3 - t2), ("bwd_wall", t4 - t2)):
            times.setdefault(k, []).append(v)


class _Timed:
    """Wraps MatMul4Bit.backward and F.dequantize_4bit (bitsandbytes looks both up at call time) with counters."""

    def __init__(self):
        import bitsandbytes.autograd._functions as fn
        import bitsandbytes.functional as F
        self.fn, self.F, self.acc = fn, F, {"backward": [0, 0.0], "dequantize_4bit": [0, 0.0]}
        self.orig_bwd, self.orig_dq = fn.MatMul4Bit.backward, F.dequantize_4bit

    def _wrap(self, f, key):
        acc = self.acc[key]

        def g(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                acc[0] += 1
                acc[1] += time.perf_counter() - t
        return g

    def __enter__(self):
        self.fn.MatMul4Bit.backward = staticmethod(self._wrap(self.orig_bwd, "backward"))
        self.F.dequantize_4bit = self._wrap(self.orig_dq, "dequantize_4bit")
        return self

    def __exit__(self, *exc):
        self.fn.MatMul4Bit.backward = staticmethod(self.orig_bwd)
        self.F.dequantize_4bit = self.orig_dq

    def per_call_us(self) -> dict:
        return {k: (round(1e6 * s / n, 1) if n else None) for k, (n, s) in self.acc.items()} | \
            {f"{k}_calls": n for k, (n, _) in self.acc.items()}


def _measure(base: str, layers: int, args, dev: Device) -> dict:
    model = _build(base, _config(args.tiny, layers), dev)
    ids = torch.randint(0, model.config.vocab_size, (1, args.seq), device=dev.torch_device)
    for _ in range(args.warmup):
        _step(model, ids, dev, None)
    times: dict = {}
    for _ in range(args.iters):
        _step(model, ids, dev, times)
    out = {k: statistics.median(v) for k, v in times.items()}
    if base in ("nf4", "qlora"):
        with _Timed() as tm:
            for _ in range(args.iters):
                _step(model, ids, dev, None)
        out["matmul4bit"] = tm.per_call_us()
    if layers == 1 and base in ("qlora", "lora"):
        try:  # the timings above stand without it
            _profile(model, ids, dev, base, args)
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            print(f"profile {base} failed: {type(e).__name__}: {e}", flush=True)
    del model
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return out


def _profile(model, ids, dev: Device, base: str, args) -> None:
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        _step(model, ids, dev, None)
    ka = prof.key_averages()
    with open(Path(args.out) / f"profile_{base}.txt", "w") as f:
        f.write(ka.table(sort_by="self_cpu_time_total", row_limit=60) + "\n")
        if dev.type == "cuda":
            f.write(ka.table(sort_by="self_cuda_time_total", row_limit=40) + "\n")
    rows = [{"name": e.key, "count": e.count, "cpu_total_us": round(e.cpu_time_total, 1),
             "self_cpu_us": round(e.self_cpu_time_total, 1),
             "device_us": round(getattr(e, "self_device_time_total", 0.0), 1)} for e in ka]
    (Path(args.out) / f"profile_{base}.json").write_text(json.dumps(rows, indent=0))
    if base == "qlora":
        prof.export_chrome_trace(str(Path(args.out) / "trace_qlora.json"))


def _shares(res: dict) -> dict:
    """Per decoder layer and per Linear: (3 layers - 1 layer) / 2, and / 7; the differences between bases."""
    per = {}
    for base in BASES:
        a, b = res.get(f"{base}_L1"), res.get(f"{base}_L3")
        if a and b:
            per[base] = {k: round(1e6 * (b[k] - a[k]) / 2 / LINEARS_PER_LAYER, 1) for k in a if k != "matmul4bit"}
    diff = {}
    for hi, lo in (("nf4", "bf16"), ("qlora", "lora"), ("lora", "bf16"), ("qlora", "nf4")):
        if hi in per and lo in per:
            diff[f"{hi}-{lo}"] = {k: round(per[hi][k] - per[lo][k], 1) for k in per[hi]}
    return {"us_per_linear": per, "difference_us_per_linear": diff}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    dev = Device("cpu" if args.tiny else "cuda")
    args.seq = 64 if args.tiny else 2048
    res: dict = {"device": dev.name, "seq": args.seq, "iters": args.iters, "torch": torch.__version__}
    for layers in (1, 3):
        for base in BASES:
            t = time.perf_counter()
            res[f"{base}_L{layers}"] = _measure(base, layers, args, dev)
            print(f"{base} L{layers}: {time.perf_counter() - t:.1f} s {res[f'{base}_L{layers}']}", flush=True)
            (Path(args.out) / "trace_times.json").write_text(json.dumps(res | _shares(res), indent=1))
    print(json.dumps(_shares(res), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
