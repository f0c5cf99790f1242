"""Precision tuning on the user's model: speed, memory and deviation from fp32 per precision.

Precision sweep (``precision_sweep``): the same random weights and inputs in fp32, tf32 (fp32 with TF32 matmuls),
bf16, fp16 and fp8 (CUDA compute capability >= 8.9 with torchao only; otherwise reported unsupported).
Inference: one forward over batch x seq tokens; deviation of the logits from fp32: max_rel = max|x - ref| /
max|ref|, mean_rel = mean|x - ref| / mean|ref|, top1 = share of positions with the same argmax. Training: autocast
(amp-bf16, amp-fp16 with a GradScaler) for ``steps`` AdamW steps on the same batches; deviation = |loss - loss_fp32|
/ |loss_fp32|, last step and max over steps.
"""

from __future__ import annotations

import contextlib
import copy
import statistics

import torch

from gpuscope.measure.device.device import Device, is_oom
from gpuscope.measure.models.train_step import optimizer_step
from gpuscope.measure.tune.batch import release

SCHEMA_PRECISION = "gpuscope.tune.precision/1"
PRECISION_MODES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@contextlib.contextmanager
def _tf32(on: bool):
    old = torch.get_float32_matmul_precision()
    old_cudnn = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high" if on else "highest")
    torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)
        torch.backends.cudnn.allow_tf32 = old_cudnn


def fp8_support(dev: Device) -> str | None:
    """None when fp8 can run here, else why not."""
    if dev.type != "cuda":
        return f"fp8 needs a CUDA GPU of compute capability 8.9 or newer (this is {dev.type})"
    cap = torch.cuda.get_device_capability(dev.torch_device)
    if cap < (8, 9):
        return f"fp8 needs compute capability 8.9 or newer (this GPU is {cap[0]}.{cap[1]})"
    try:
        import torchao  # noqa: F401
    except ImportError:
        return "fp8 runs through torchao (pip install torchao), which is not installed"
    return None


def _to_fp8(model, training: bool):
    if training:
        from torchao.float8 import convert_to_float8_training

        return convert_to_float8_training(model)
    from torchao.quantization import float8_dynamic_activation_float8_weight, quantize_

    quantize_(model, float8_dynamic_activation_float8_weight())
    return model


def deviation(x: torch.Tensor, ref: torch.Tensor) -> dict:
    x, ref = x.float(), ref.float()
    d = (x - ref).abs()
    return {"max_rel": float(d.max() / ref.abs().max().clamp_min(1e-30)),
            "mean_rel": float(d.mean() / ref.abs().mean().clamp_min(1e-30)),
            "top1_agreement": float((x.argmax(-1) == ref.argmax(-1)).float().mean())}


def _timed(dev: Device, fn, repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up
    ts = []
    for _ in range(repeats):
        with dev.timer() as t:
            out = fn()
        ts.append(t.s)
    return statistics.median(ts), out


def precision_sweep(kind: str, cfg: dict, dev: Device, *, batch: int = 2, seq: int = 64,
                    modes=PRECISION_MODES, steps: int = 3, repeats: int = 2) -> dict:
    from gpuscope.measure.models.hf_model import build_model, vocab_size

    torch.manual_seed(0)
    base, config = build_model(cfg, dev, torch.float32, use_cache=False)
    V = vocab_size(config)
    batches = [torch.randint(0, V, (batch, seq), device=dev.torch_device) for _ in range(max(1, steps))]
    rows, ref = [], None
    for mode in modes:
        row = {"mode": mode}
        why = fp8_support(dev) if mode == "fp8" else None
        if why:
            rows.append(dict(row, status="unsupported", reason=why))
            continue
        try:
            release(dev)
            if kind == "infer":
                row.update(_infer_mode(base, mode, dev, batches[0], repeats))
            else:
                row.update(_train_mode(base, mode, dev, batches, steps))
            row["status"] = "ok"
        except Exception as e:
            if not is_oom(e) and mode not in ("fp8", "fp16"):
                raise
            row.update(status="oom" if is_oom(e) else "unsupported",
                       reason=f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
        if row.get("status") == "ok":
            out = row.pop("_out")
            if mode == "fp32":
                ref = out
            if ref is not None:
                if kind == "infer":
                    row["deviation"] = deviation(out, ref)
                else:
                    dl = [abs(a - b) / max(abs(b), 1e-30) for a, b in zip(out, ref)]
                    row["deviation"] = {"loss_rel_last": dl[-1], "loss_rel_max": max(dl)}
                    row["losses"] = out
        rows.append(row)
    del base
    release(dev)
    fp32 = next((r for r in rows if r["mode"] == "fp32" and r.get("status") == "ok"), None)
    for r in rows:
        if fp32 and r.get("status") == "ok":
            r["speed_vs_fp32"] = r["tokens_per_s"] / fp32["tokens_per_s"]
            if r.get("peak_bytes") and fp32.get("peak_bytes"):
                r["memory_vs_fp32"] = r["peak_bytes"] / fp32["peak_bytes"]
    notes = []
    if dev.type != "cuda":
        notes.append("tf32 is a tensor-core mode of NVIDIA GPUs (Ampere and newer); off CUDA, 'high' fp32 matmul "
                     "precision may use other reduced-precision kernels or none")
    return {"schema": SCHEMA_PRECISION, "kind": kind, "device": dev.name, "device_name": dev.device_name(),
            "batch": batch, "seq": seq, "steps": steps, "rows": rows, "notes": notes,
            "recommendation": recommend_precision(rows, kind)}


@torch.no_grad()
def _infer_mode(base, mode: str, dev: Device, ids, repeats: int) -> dict:
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode, torch.float32)
    model = base if dt is torch.float32 and mode != "fp8" else copy.deepcopy(base).to(dt if mode != "fp8" else
                                                                                    torch.bfloat16)
    if mode == "fp8":
        model = _to_fp8(model, training=False)
    model.eval()
    dev.reset_peak()
    with _tf32(mode == "tf32"):
        s, out = _timed(dev, lambda: model(input_ids=ids, use_cache=False).logits, repeats)
    res = {"tokens_per_s": ids.numel() / s, "forward_s": s, "peak_bytes": dev.peak_allocated(),
           "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
           "_out": out.float().cpu()}
    if model is not base:
        del model
    return res


def _train_mode(base, mode: str, dev: Device, batches, steps: int) -> dict:
    model = copy.deepcopy(base)  # fp32 master weights in every mode (AMP)
    model.train()
    ac = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}.get(mode)
    if mode == "fp8":
        model = _to_fp8(model, training=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(dev.type, init_scale=8192) if mode == "fp16" else None
    losses, times = [], []
    dev.reset_peak()
    with _tf32(mode == "tf32"):
        for ids in batches:
            with dev.timer() as t:
                ctx = torch.autocast(dev.type, dtype=ac) if ac else contextlib.nullcontext()
                with ctx:
                    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
                (scaler.scale(loss) if scaler else loss).backward()
                optimizer_step(opt, scaler)
            losses.append(float(loss.detach().float()))
            times.append(t.s)
    step = statistics.median(times[1:] or times)
    res = {"tokens_per_s": batches[0].numel() / step, "step_s": step, "peak_bytes": dev.peak_allocated(),
           "loss_scaling": scaler is not None, "_out": losses}
    del model, opt
    return res


def recommend_precision(rows: list[dict], kind: str, max_mean_rel: float = 0.05, min_top1: float = 0.95,
                        max_loss_rel: float = 0.02) -> dict:
    """The fastest mode whose deviation from fp32 is within tolerance, with the trade-off in words. Pure."""
    def ok(r):
        d = r.get("deviation") or {}
        if r.get("status") != "ok" or not d:
            return False
        if kind == "infer":
            return d["mean_rel"] <= max_mean_rel and d["top1_agreement"] >= min_top1
        return d["loss_rel_max"] <= max_loss_rel

    good = [r for r in rows if ok(r)]
    if not good:
        return {"mode": None, "text": "no mode ran within tolerance of fp32"}
    best = max(good, key=lambda r: r["tokens_per_s"])
    fastest = max((r for r in rows if r.get("status") == "ok"), key=lambda r: r["tokens_per_s"])
    d = best["deviation"]
    dev_txt = (f"logits mean rel. error {d['mean_rel']:.2%}, top-1 agreement {d['top1_agreement']:.1%}"
               if kind == "infer" else f"loss within {d['loss_rel_max']:.2%} of fp32")
    mem = f", {best['memory_vs_fp32']:.2f}x the memory" if best.get("memory_vs_fp32") else ""
    text = f"{best['mode']}: {best.get('speed_vs_fp32', 1.0):.2f}x fp32's tokens/s{mem}, {dev_txt}."
    if fastest is not best:
        text += f" {fastest['mode']} is faster but outside the tolerance."
    tol = ({"max_mean_rel": max_mean_rel, "min_top1": min_top1} if kind == "infer"
           else {"max_loss_rel": max_loss_rel})
    return {"mode": best["mode"], "text": text, "tolerance": tol}
