"""The training step every training workload runs (single-GPU, distributed, compression, host fits, tuning,
profiling): the precision table, activation recompute, the fp16 loss scaler, the (forward, backward, optimizer)
phase functions and the instrumented step that reads memory between them, and the TF32 settings a result records.

Precision, as in CONTRACT.md (the names are gpuscope.specs.axes' measured precisions):
- ``amp-bf16`` / ``amp-fp16``: fp32 parameters, gradients and AdamW states; forward under
  ``torch.autocast(device_type, dtype)``; amp-fp16 scales the loss with ``GradScaler(init_scale=8192)``.
- ``bf16``: parameters, gradients and optimizer states all bf16, no autocast.
- ``bf16-master``: bf16 parameters and gradients, no autocast; the optimizer holds fp32 masters and fp32 AdamW
  states (measure/models/master_weights.py).
- ``fp32``: everything fp32, no autocast (TF32 matmul setting recorded: torch's default is off).
"""

from __future__ import annotations

import contextlib

import torch

from gpuscope.measure.device.device import Device
from gpuscope.measure.device.provenance import quiet
from gpuscope.measure.models.hf_model import DTYPES
from gpuscope.specs.axes import TRAIN_PRECISIONS

# name -> (parameter dtype, autocast dtype or None), derived from the axis: parameters are stored in 2 bytes only
# for bf16 and bf16-master; amp-* autocasts to its compute dtype
PRECISIONS = {p.value: (torch.bfloat16 if p.weight_bytes == 2 else torch.float32,
                        DTYPES[p.compute_dtype] if p.amp else None) for p in TRAIN_PRECISIONS}


def enable_recompute(model) -> str:
    """Full activation recompute (every decoder layer re-run in the backward), non-reentrant; returns the
    transformers API that switched it on."""
    kw = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # newer transformers 5.x name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
        return "activation_checkpointing_enable"
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
    return "gradient_checkpointing_enable"


def grad_scaler(dev: Device, ac_dtype):
    """The fp16 loss scaler (``init_scale=8192``) for an amp-fp16 run, None otherwise."""
    return torch.amp.GradScaler(dev.type, init_scale=8192) if ac_dtype is torch.float16 else None


def matmul_settings() -> dict:
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": quiet(lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        "cudnn_allow_tf32": quiet(lambda: bool(torch.backends.cudnn.allow_tf32)),
        "cuda_matmul_fp32_precision": quiet(lambda: str(torch.backends.cuda.matmul.fp32_precision)),
    }


def autocast(dev: Device, dtype):
    """torch.autocast for the device, or nothing for full-precision runs (``dtype`` None)."""
    return torch.autocast(device_type=dev.type, dtype=dtype) if dtype else contextlib.nullcontext()


def optimizer_step(opt, scaler) -> None:
    """The optimizer step of every training loop here: through the fp16 loss scaler when there is one (unscale,
    skip on inf/nan, adjust the scale), then gradients dropped (``set_to_none``: no zeroing kernels, memory freed)."""
    if scaler:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    opt.zero_grad(set_to_none=True)


def step_functions(model, opt, scaler, ac_dtype, dev: Device, batches, state: dict, stage: list):
    """(forward, backward, optimizer step) of one training step, shared by the single-GPU and distributed
    workloads. Each records its phase in ``state`` (for OOM results) as "<stage>/<phase>"; the forward drops the
    model output (its logits) and returns only the loss."""

    def forward():
        state["phase"] = f"{stage[0]}/forward"
        ids = next(batches)
        with autocast(dev, ac_dtype):
            return model(input_ids=ids, labels=ids, use_cache=False).loss

    def backward(loss):
        state["phase"] = f"{stage[0]}/backward"
        (scaler.scale(loss) if scaler else loss).backward()

    def opt_step():
        state["phase"] = f"{stage[0]}/optimizer"
        optimizer_step(opt, scaler)

    return forward, backward, opt_step


def instrumented_step(dev: Device, forward, backward, opt_step, grad_bytes) -> tuple[dict, float]:
    """One training step with a synchronize and a peak reset between its phases (the single-GPU and the
    distributed workloads share it): memory at rest, peak and end of forward, of backward, of the optimizer step,
    and ``grad_bytes()`` after backward. Returns (those figures, the step's loss)."""
    out: dict = {"mem_rest_bytes": dev.allocated()}
    dev.reset_peak()
    loss = forward()
    dev.synchronize()
    out["peak_forward_bytes"] = dev.peak_allocated()
    out["mem_after_forward_bytes"] = dev.allocated()
    dev.reset_peak()
    backward(loss)
    dev.synchronize()
    value = float(loss.detach().float())
    del loss
    out["peak_backward_bytes"] = dev.peak_allocated()
    out["mem_after_backward_bytes"] = dev.allocated()
    out["grad_bytes"] = grad_bytes()
    dev.reset_peak()
    opt_step()
    dev.synchronize()
    out["peak_optimizer_bytes"] = dev.peak_allocated()
    out["mem_after_step_bytes"] = dev.allocated()
    return out, value
