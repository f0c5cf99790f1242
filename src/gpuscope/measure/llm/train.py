"""LLM training workload: random-weight Hugging Face model, one optimizer step per micro-batch, time and memory
per phase.

Case keys: ``kind="train"``, ``model`` / ``config`` (as for inference), ``micro_batch``, ``seq``, ``precision``
(amp-bf16 | amp-fp16 | bf16 | fp32), ``optimizer`` (adamw), ``fused`` (true; used on CUDA only), ``recompute``
(none | full), ``steps`` (6 timed), ``min_time_s`` (0: the timed steps go on until this many seconds have passed,
at least ``steps`` of them; the count run is ``timed_steps``), ``warmup`` (2), ``attn`` (sdpa), ``seed`` (0),
optional ``device``.

Precision, as in CONTRACT.md:
- ``amp-bf16`` / ``amp-fp16``: fp32 parameters, gradients and AdamW states; forward under
  ``torch.autocast(device_type, dtype)``; amp-fp16 scales the loss with ``GradScaler(init_scale=8192)``.
- ``bf16``: parameters, gradients and optimizer states all bf16, no autocast.
- ``fp32``: everything fp32, no autocast (TF32 matmul setting recorded: torch's default is off).

One step = forward (loss from the model with ``labels=input_ids``), backward, optimizer step,
``zero_grad(set_to_none=True)``.
After ``warmup`` steps, one instrumented step records memory per phase (synchronize and ``reset_peak_memory_stats``
between phases), then the timed steps (``steps``, or more under ``min_time_s``: ``timed_steps``) run back to back
(device events, no synchronize between steps).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import warnings
from functools import partial

import torch

from gpuscope.measure.device.device import Device, summarize
from gpuscope.measure.device.device import repeats as timed_repeats
from gpuscope.measure.host.load import HostLoad
from gpuscope.measure.host.probe import HostProbe
from gpuscope.measure.device.nvml import PhaseEnergy
from gpuscope.measure.models.hf_model import build_model, case_config, model_bytes, vocab_size
from gpuscope.measure.llm.infer import _release, run_as_result

PRECISIONS = {  # name -> (parameter dtype, autocast dtype or None)
    "amp-bf16": (torch.float32, torch.bfloat16),
    "amp-fp16": (torch.float32, torch.float16),
    "bf16": (torch.bfloat16, None),
    "fp32": (torch.float32, None),
}

METRIC_FORMULAS = {
    "step_s": "median over `timed_steps` back-to-back timed steps (device events at step boundaries) of "
              "forward + backward + optimizer.step + zero_grad(set_to_none=True)",
    "tokens_per_s": "micro_batch * seq * grad_accum / step_s (one step = grad_accum forward+backward passes, then "
                    "the optimizer)",
    "mem_rest_bytes": "memory_allocated before the (last micro-batch's) forward: weights + optimizer states, and "
                      "the summed gradients when grad_accum > 1 (set to None after each optimizer step)",
    "peak_forward_bytes": "max_memory_allocated during forward (reset before)",
    "mem_after_forward_bytes": "memory_allocated right after forward (rest + saved activations + loss)",
    "activations_bytes": "mem_after_forward_bytes - mem_rest_bytes",
    "peak_backward_bytes": "max_memory_allocated during backward (reset before)",
    "peak_optimizer_bytes": "max_memory_allocated during optimizer step + zero_grad (reset before)",
    "peak_bytes": "max_memory_allocated over the timed steps (reset before the first)",
    "optimizer_state_bytes": "sum of bytes of all tensors in optimizer.state",
    "step_energy_j": "NVML energy over the timed steps (total-energy counter, else the power integral) / "
                     "timed_steps",
    "j_per_token": "that energy / (timed_steps * micro_batch * seq * grad_accum)",
    "host_probe_train_s": "mean of host_probe_train_before_s and _after_s: measure/host/probe.py's training probe (a "
                          "tiny forward + backward, median of 15) just before and just after the timed steps",
}


def _enable_recompute(model) -> str:
    kw = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # newer transformers 5.x name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
        return "activation_checkpointing_enable"
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
    return "gradient_checkpointing_enable"


def _state_bytes(opt) -> int:
    return sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
               if isinstance(t, torch.Tensor))


def _grad_bytes(model) -> int:
    return sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)


def _quiet(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    except Exception:
        return None


def matmul_settings() -> dict:
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": _quiet(lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        "cudnn_allow_tf32": _quiet(lambda: bool(torch.backends.cudnn.allow_tf32)),
        "cuda_matmul_fp32_precision": _quiet(lambda: str(torch.backends.cuda.matmul.fp32_precision)),
    }


class _Autocast:
    """torch.autocast for the device, or nothing for full-precision runs."""

    def __init__(self, dev: Device, dtype):
        self.dev, self.dtype = dev, dtype

    def __call__(self):
        return torch.autocast(device_type=self.dev.type, dtype=self.dtype) if self.dtype else contextlib.nullcontext()


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
    autocast = _Autocast(dev, ac_dtype)

    def forward():
        state["phase"] = f"{stage[0]}/forward"
        ids = next(batches)
        with autocast():
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


def run_train(case: dict) -> dict:
    return run_as_result(_run_train, case)


def _run_train(case: dict, dev: Device, state: dict) -> dict:
    B, S = int(case["micro_batch"]), int(case["seq"])
    precision = case.get("precision", "amp-bf16")
    if precision not in PRECISIONS:
        raise ValueError(f"precision: '{precision}' is not one of {', '.join(PRECISIONS)}")
    param_dtype, ac_dtype = PRECISIONS[precision]
    recompute = case.get("recompute", "none")
    if recompute not in ("none", "full"):
        raise ValueError(f"recompute: '{recompute}' is not one of none, full")
    if case.get("optimizer", "adamw") != "adamw":
        raise ValueError(f"optimizer: '{case.get('optimizer')}' is not supported (adamw)")
    steps = max(1, int(case.get("steps", 6)))
    accum = int(case.get("grad_accum", 1))  # micro-batches (forward + backward) per optimizer step
    if accum < 1:
        raise ValueError(f"grad_accum: {accum} is not a positive integer")
    warmup = max(1, int(case.get("warmup", 2)))  # >= 1 so optimizer states exist before measuring
    min_time_s = max(0.0, float(case.get("min_time_s", 0.0)))  # timed steps go on until this much wall time
    attn = case.get("attn", "sdpa")
    torch.manual_seed(int(case.get("seed", 0)))

    state["phase"] = "load"
    cfg = case_config(case)
    dev.reset_peak()
    model, config = build_model(cfg, dev, param_dtype, attn, use_cache=False)
    model.train()
    recompute_api = _enable_recompute(model) if recompute == "full" else None
    dev.synchronize()
    res: dict = {"status": "ok", "kind": "train", "model": case.get("model") or cfg.get("model_type"),
                 "model_type": config.model_type, "device": dev.name, "device_name": dev.device_name(),
                 "precision": precision, "autocast_dtype": str(ac_dtype).replace("torch.", "") if ac_dtype else None,
                 "recompute": recompute, "recompute_api": recompute_api, "micro_batch": B, "seq": S,
                 "steps": steps, "warmup": warmup, "grad_accum": accum, "attn": attn}
    res.update(model_bytes(model))
    res["mem_after_load_bytes"] = dev.allocated()

    fused = bool(case.get("fused", True)) and dev.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    scaler = torch.amp.GradScaler(dev.type, init_scale=8192) if ac_dtype is torch.float16 else None
    res.update({"optimizer": "adamw", "optimizer_fused": fused, "grad_scaler": scaler is not None})
    res.update(matmul_settings())

    # A fresh random batch for every step (made up front, so no kernel of it falls inside a timed step); steps
    # beyond ``steps`` (``min_time_s``) take them again in turn.
    batches = itertools.cycle([torch.randint(0, vocab_size(config), (B, S), device=dev.torch_device)
                               for _ in range(accum * (warmup + 1 + steps))])

    stage = ["warmup"]  # phase names for OOM results: "<warmup|measure|timed>/<forward|backward|optimizer>"
    forward, backward, opt_step = step_functions(model, opt, scaler, ac_dtype, dev, batches, state, stage)

    def accumulate(n: int) -> None:  # n micro-batches' forward + backward, gradients summed in place
        for _ in range(n):
            loss = forward()
            backward(loss)
            del loss

    for _ in range(warmup):
        accumulate(accum)
        opt_step()
    _release(dev)

    # One instrumented step: memory per phase.
    stage[0] = "measure"
    dev.synchronize()
    res["optimizer_state_bytes"] = _state_bytes(opt)
    accumulate(accum - 1)  # the phases measured are the last micro-batch's, with the summed gradients held
    dev.synchronize()
    phases, loss_warm = instrumented_step(dev, forward, backward, opt_step, partial(_grad_bytes, model))
    res.update(phases)
    if res["mem_after_forward_bytes"] is not None and res["mem_rest_bytes"] is not None:
        res["activations_bytes"] = res["mem_after_forward_bytes"] - res["mem_rest_bytes"]
    else:
        res["activations_bytes"] = None

    # Timed steps, back to back.
    stage[0] = "timed"
    dev.reset_peak()
    st = dev.step_timer()
    with HostProbe(dev, "train") as probe, PhaseEnergy(dev) as energy, HostLoad() as host:
        st.start()
        for _ in timed_repeats(steps, min_time_s):
            accumulate(accum - 1)
            loss = forward()
            backward(loss)
            opt_step()
            st.mark()
        times = st.times_s()
        dev.synchronize()  # the counter is read after the last step's kernels
    res["peak_bytes"] = dev.peak_allocated()
    res["peak_reserved_bytes"] = dev.peak_reserved()
    loss_last = float(loss.detach().float())
    del loss

    s = summarize(times)
    res.update({
        "step_s": s["median"], "step_s_min": s["min"], "step_s_max": s["max"],
        "tokens_per_s": B * S * accum / s["median"] if s["median"] else None,
        "timed_steps": len(times),
        "tokens_per_s_wall": B * S * accum * len(times) / st.wall_s if st.wall_s else None,
        "step_energy_j": energy.joules / len(times) if energy.joules else None,
        "j_per_token": energy.joules / (len(times) * B * S * accum) if energy.joules else None,
        "energy_source": energy.source,
        "loss_instrumented_step": loss_warm,
        "loss_last": loss_last,
        "loss_finite": math.isfinite(loss_last),
        "grad_scale": float(scaler.get_scale()) if scaler else None,
        "samples_s": {"step": times},
        "host_load_steps": host.summary(),  # the host during the timed steps (measure/host/load.py)
        **probe.summary(),  # the host's speed around them (measure/host/probe.py)
        "timer": "device_event" if dev._events_ok() else "perf_counter+synchronize",
        "metric_formulas": METRIC_FORMULAS,
    })
    del model, opt
    _release(dev)
    return res
