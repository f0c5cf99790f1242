"""LLM training workload: random-weight Hugging Face model, one optimizer step per micro-batch, time and memory
per phase.

Case keys: ``kind="train"``, ``model`` / ``config`` (as for inference), ``micro_batch``, ``seq``, ``precision``
(amp-bf16 | amp-fp16 | bf16 | bf16-master | fp32), ``optimizer`` (adamw), ``fused`` (true; used on CUDA only),
``recompute`` (none | full), ``steps`` (6 timed), ``min_time_s`` (0: the timed steps go on until this many seconds
have passed, at least ``steps`` of them; the count run is ``timed_steps``), ``warmup`` (2), ``attn`` (sdpa),
``seed`` (0), optional ``device``; LoRA: ``lora_r``, ``lora_alpha``, ``lora_targets``, ``lora_dropout``
(measure/llm/lora.py).

Precision (amp-bf16 | amp-fp16 | bf16 | fp32, as in CONTRACT.md): measure/models/train_step.py's docstring.

One step = forward (loss from the model with ``labels=input_ids``), backward, optimizer step,
``zero_grad(set_to_none=True)``.
After ``warmup`` steps, one instrumented step records memory per phase (synchronize and ``reset_peak_memory_stats``
between phases), then the timed steps (``steps``, or more under ``min_time_s``: ``timed_steps``) run back to back
(device events, no synchronize between steps).
"""

from __future__ import annotations

import itertools
import math
from functools import partial

import torch

from gpuscope.measure.choices import RECOMPUTES, TRAIN_PRECISION_NAMES, check_choice
from gpuscope.measure.device.device import Device, release, run_as_result, summarize
from gpuscope.measure.device.device import repeats as timed_repeats
from gpuscope.measure.device.nvml import PhaseEnergy
from gpuscope.measure.host.load import HostLoad
from gpuscope.measure.host.probe import HostProbe
from gpuscope.measure.llm.lora import apply_lora, lora_base_dtype, wants_lora
from gpuscope.measure.models.hf_model import build_model, case_config, model_bytes, vocab_size
from gpuscope.measure.models.master_weights import make_optimizer
from gpuscope.measure.models.train_step import (PRECISIONS, enable_recompute, grad_scaler, instrumented_step,
                                                matmul_settings, step_functions)
from gpuscope.measure.runner import progress

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


def _state_bytes(opt) -> int:
    return sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
               if isinstance(t, torch.Tensor))


def _grad_bytes(model) -> int:
    return sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)


def run_train(case: dict) -> dict:
    return run_as_result(_run_train, case)


def train_settings(case: dict) -> dict:
    """The case's training settings with their defaults, checked (ValueError names the key and what is allowed)."""
    B, S = int(case["micro_batch"]), int(case["seq"])
    precision = case.get("precision", "amp-bf16")
    check_choice("precision", precision, TRAIN_PRECISION_NAMES)
    if precision == "bf16-master" and wants_lora(case):
        raise ValueError("precision: bf16-master is for full training; LoRA takes amp-bf16, amp-fp16, bf16 or fp32")
    recompute = case.get("recompute", "none")
    check_choice("recompute", recompute, RECOMPUTES)
    if case.get("optimizer", "adamw") != "adamw":
        raise ValueError(f"optimizer: '{case.get('optimizer')}' is not supported (adamw)")
    accum = int(case.get("grad_accum", 1))  # micro-batches (forward + backward) per optimizer step
    if accum < 1:
        raise ValueError(f"grad_accum: {accum} is not a positive integer")
    return {"micro_batch": B, "seq": S, "precision": precision,
            "recompute": recompute, "steps": max(1, int(case.get("steps", 6))), "grad_accum": accum,
            "warmup": max(1, int(case.get("warmup", 2))),  # >= 1 so optimizer states exist before measuring
            "min_time_s": max(0.0, float(case.get("min_time_s", 0.0))),  # timed steps go on this much wall time
            "attn": case.get("attn", "sdpa")}


def _load_model(case: dict, dev: Device, cfg: dict, t: dict):
    """The random-weight model in the precision's parameter dtype, in train mode, recompute switched on; returns
    (model, config, the result's first fields)."""
    param_dtype, ac_dtype = PRECISIONS[t["precision"]]
    lora = wants_lora(case)
    dev.reset_peak()
    model, config = build_model(cfg, dev, lora_base_dtype(t["precision"]) if lora else param_dtype, t["attn"],
                                use_cache=False)
    recompute_api = enable_recompute(model) if t["recompute"] == "full" else None
    lora_fields = {}
    if lora:  # peft on the frozen base (measure/llm/lora.py); checkpointing switched on before, as Trainer does
        model, lora_fields = apply_lora(model, case)
    model.train()
    dev.synchronize()
    res: dict = {"status": "ok", "kind": "train", "model": case.get("model") or cfg.get("model_type"),
                 "model_type": config.model_type, "device": dev.name, "device_name": dev.device_name(),
                 "precision": t["precision"],
                 "autocast_dtype": str(ac_dtype).replace("torch.", "") if ac_dtype else None,
                 "recompute": t["recompute"], "recompute_api": recompute_api, "micro_batch": t["micro_batch"],
                 "seq": t["seq"], "steps": t["steps"], "warmup": t["warmup"], "grad_accum": t["grad_accum"],
                 "attn": t["attn"]}
    res.update(lora_fields)
    res.update(model_bytes(model))
    res["mem_after_load_bytes"] = dev.allocated()
    return model, config, res


def _memory_per_phase(dev: Device, model, opt, accumulate, fns) -> tuple[dict, float]:
    """One instrumented step after the warm-up: optimizer-state bytes, then the last micro-batch's memory per
    phase with the summed gradients held, and the activations (after forward less at rest)."""
    forward, backward, opt_step = fns
    dev.synchronize()
    out = {"optimizer_state_bytes": _state_bytes(opt)}
    accumulate(-1)  # all micro-batches but the last
    dev.synchronize()
    phases, loss = instrumented_step(dev, forward, backward, opt_step, partial(_grad_bytes, model))
    out.update(phases)
    if out["mem_after_forward_bytes"] is not None and out["mem_rest_bytes"] is not None:
        out["activations_bytes"] = out["mem_after_forward_bytes"] - out["mem_rest_bytes"]
    else:
        out["activations_bytes"] = None
    return out, loss


def _timed_steps(dev: Device, t: dict, accumulate, fns):
    """The timed steps, back to back (device events at step boundaries), with the host probe, NVML energy and the
    host's load around them; returns (step times, the step timer, last loss, probe, energy, host load)."""
    forward, backward, opt_step = fns
    dev.reset_peak()
    st = dev.step_timer()
    with HostProbe(dev, "train") as probe, PhaseEnergy(dev) as energy, HostLoad() as host:
        st.start()
        for _ in progress.repeats("timed step", timed_repeats(t["steps"], t["min_time_s"]), t["steps"]):
            accumulate(-1)
            loss = forward()
            backward(loss)
            opt_step()
            st.mark()
        times = st.times_s()
        dev.synchronize()  # the counter is read after the last step's kernels
    loss_last = float(loss.detach().float())
    del loss
    return times, st, loss_last, probe, energy, host


def _run_train(case: dict, dev: Device, state: dict) -> dict:
    t = train_settings(case)
    B, S, accum = t["micro_batch"], t["seq"], t["grad_accum"]
    torch.manual_seed(int(case.get("seed", 0)))

    state["phase"] = "load"
    progress.say("building the model")
    model, config, res = _load_model(case, dev, case_config(case), t)
    _, ac_dtype = PRECISIONS[t["precision"]]
    fused = bool(case.get("fused", True)) and dev.type == "cuda"
    opt, opt_fields = make_optimizer(model.parameters(), t["precision"], fused)  # bf16-master: fp32 masters
    scaler = grad_scaler(dev, ac_dtype)
    res.update({"optimizer": "adamw", "optimizer_fused": fused, "grad_scaler": scaler is not None, **opt_fields})
    res.update(matmul_settings())

    # A fresh random batch for every step (made up front, so no kernel of it falls inside a timed step); steps
    # beyond ``steps`` (``min_time_s``) take them again in turn.
    batches = itertools.cycle([torch.randint(0, vocab_size(config), (B, S), device=dev.torch_device)
                               for _ in range(accum * (t["warmup"] + 1 + t["steps"]))])
    stage = ["warmup"]  # phase names for OOM results: "<warmup|measure|timed>/<forward|backward|optimizer>"
    fns = step_functions(model, opt, scaler, ac_dtype, dev, batches, state, stage)
    forward, backward, opt_step = fns

    def accumulate(n: int) -> None:  # n micro-batches' forward + backward (-1: accum - 1), gradients summed
        for _ in range(accum - 1 if n < 0 else n):
            loss = forward()
            backward(loss)
            del loss

    for i in range(t["warmup"]):
        progress.say("warm-up step", i + 1, t["warmup"])
        accumulate(accum)
        opt_step()
    release(dev)

    stage[0] = "measure"  # one instrumented step: memory per phase
    progress.say("instrumented step (memory per phase)")
    phases, loss_warm = _memory_per_phase(dev, model, opt, accumulate, fns)
    res.update(phases)

    stage[0] = "timed"
    times, st, loss_last, probe, energy, host = _timed_steps(dev, t, accumulate, fns)
    res["peak_bytes"] = dev.peak_allocated()
    res["peak_reserved_bytes"] = dev.peak_reserved()
    res.update(_step_fields(times, st.wall_s, B * S * accum, energy, loss_warm, loss_last, scaler))
    res["host_load_steps"] = host.summary()  # the host during the timed steps (measure/host/load.py)
    res.update(probe.summary())  # the host's speed around them (measure/host/probe.py)
    res["timer"] = dev.timer_kind
    res["metric_formulas"] = METRIC_FORMULAS
    del model, opt
    release(dev)
    return res


def _step_fields(times: list[float], wall_s: float, tokens: int, energy, loss_warm: float, loss_last: float,
                 scaler) -> dict:
    """Step time (median, spread), tokens/s (``tokens`` per optimizer step), energy per step and token, losses."""
    s = summarize(times)
    return {
        "step_s": s["median"], "step_s_min": s["min"], "step_s_max": s["max"],
        "tokens_per_s": tokens / s["median"] if s["median"] else None,
        "timed_steps": len(times),
        "tokens_per_s_wall": tokens * len(times) / wall_s if wall_s else None,
        "step_energy_j": energy.joules / len(times) if energy.joules else None,
        "j_per_token": energy.joules / (len(times) * tokens) if energy.joules else None,
        "energy_source": energy.source,
        "loss_instrumented_step": loss_warm,
        "loss_last": loss_last,
        "loss_finite": math.isfinite(loss_last),
        "grad_scale": float(scaler.get_scale()) if scaler else None,
        "samples_s": {"step": times},
    }
