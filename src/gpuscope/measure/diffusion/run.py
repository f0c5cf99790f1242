"""`bench diffusion`'s measurement: the components a case asks for, built once, then each point of the sweep (batch,
resolution, frames) timed with its peak memory and energy; an out-of-memory point is a result (status ``oom``, the
phase it ran out in), and the next point runs.

Components (``component``):
- ``denoiser``: one forward of the UNet or transformer at the batch it sees (B, or 2B with CFG): ``denoiser_step_s``.
- ``vae-decode``: the VAE decoding B images (B clips of F frames): ``vae_decode_s``; ``vae_slicing`` decodes one
  image at a time, ``vae_tiling`` in overlapping tiles (diffusers' enable_slicing / enable_tiling).
- ``text-encoders``: every text (and image) encoder on random token ids: ``text_encode_s``.
- ``pipeline``: all of them resident, N denoising steps through the scheduler (measure/diffusion/loop.py).
Peaks are ``max_memory_allocated`` after ``reset_peak_memory_stats`` over the timed repeats (None on a CPU),
weights included: what the component holds and runs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gpuscope.measure.device.device import Device, is_oom, oom_result, pick_device, release
from gpuscope.measure.diffusion.components import (Loaded, denoiser_for, encode_all, encoder_passes, load,
                                                   set_vae_modes, settings, vae_upcast)
from gpuscope.measure.diffusion.inputs import decode, encoder_inputs, vae_latents
from gpuscope.measure.diffusion.loop import measure_pipeline
from gpuscope.measure.diffusion.timing import profiled, timed

METRIC_FORMULAS = {
    "denoiser_step_s": "median over repeats of one denoiser forward at denoiser_batch (B, 2B with CFG), "
                       "device events (perf_counter around a synchronize on a CPU)",
    "denoiser_enqueue_s": "median host time from the forward's call to its return (before the synchronize): "
                          "close to denoiser_step_s, the device waits on kernel launches",
    "vae_decode_s": "median of decoding B latents (diffusers' decode after 1/scaling_factor)",
    "text_encode_s": "sum over the text/image encoders of each one's median time at batch B, a text encoder run "
                     "twice where the pipeline encodes the negative prompt too (encoder_passes)",
    "total_s": "pipeline: text_encode_s + steps x (denoiser at denoiser_batch, CFG combine, scheduler.step) + "
               "vae_decode_s, timed as one call (median over repeats)",
    "text_encode_together_s": "median of all encoders called one after another with no synchronize between them, "
                              "as the pipeline's encode_prompt runs them",
    "kernel_table": "--profile: one more call under torch.profiler, kernels grouped by name, top 25 by device time",
    "peak_bytes": "torch.cuda.max_memory_allocated after reset_peak_memory_stats, over the timed repeats",
    "j_per_image": "NVML energy over the timed repeats / (repeats x batch) (pipeline; per clip for video)",
}


def measure_denoiser(case: dict, dev: Device, mods: Loaded, t: dict, gen) -> dict:
    den = denoiser_for(mods, t, gen)
    x = den.expand(den.latents())
    r = timed(dev, lambda: den(x), t["repeats"], t["warmup"], t["min_time_s"], probe=True)
    out = {"denoiser_step_s": r["s"], "denoiser_enqueue_s": r["enqueue_s"], "denoiser_spread": r["spread"],
           "denoiser_repeats": r["n"], "peak_bytes": r["peak_bytes"], "energy_j": r["energy_j"],
           "energy_source": r["energy_source"], "power_w": r["power_w"],
           "j_per_step": r["energy_j"] / r["n"] if r["energy_j"] else None,
           **{k: v for k, v in r.items() if k.startswith("host_probe")}}
    if case.get("profile"):
        out.update(profiled(dev, lambda: den(x)))
    return out


def measure_vae(case: dict, dev: Device, mods: Loaded, t: dict, gen) -> dict:
    modes = set_vae_modes(mods.vae, case)
    z = vae_latents(mods.vae, t["batch"], t["height"], t["width"], t["frames"], gen)
    chunk = 1 if case.get("vae_slicing") else None
    r = timed(dev, lambda: decode(mods.vae, z, t["frames"], chunk), t["repeats"], t["warmup"], t["min_time_s"])
    out = {"vae_decode_s": r["s"], "vae_enqueue_s": r["enqueue_s"], "vae_spread": r["spread"], "vae_repeats": r["n"],
           "peak_bytes": r["peak_bytes"], "energy_j": r["energy_j"], "energy_source": r["energy_source"],
           "power_w": r["power_w"], **modes}
    if case.get("profile"):
        out.update(profiled(dev, lambda: decode(mods.vae, z, t["frames"], chunk)))
    return out


def measure_text(case: dict, dev: Device, mods: Loaded, t: dict, gen) -> dict:
    each, issue, peak, passes, prof = {}, {}, 0, {}, {}
    inputs = {name: encoder_inputs(enc, t["t5_tokens"], t["batch"], gen) for name, enc in mods.encoders.items()}
    for name, enc in mods.encoders.items():
        passes[name] = encoder_passes(name, t)
        call = lambda enc=enc, inp=inputs[name], k=passes[name]: [enc(**inp) for _ in range(k)]  # noqa: E731
        r = timed(dev, call, t["repeats"], t["warmup"], t["min_time_s"])
        each[name], issue[name] = r["s"], r["enqueue_s"]
        peak = max(peak, r["peak_bytes"] or 0)
        if case.get("profile"):
            prof[name] = profiled(dev, call)
    # all encoders as the pipeline's encode_prompt runs them: one after another, no synchronize between them
    both = timed(dev, lambda: encode_all(mods, inputs, t), t["repeats"], t["warmup"], t["min_time_s"])
    out = {"text_encode_s": sum(each.values()), "text_encode_each_s": each, "text_enqueue_each_s": issue,
           "text_encode_together_s": both["s"], "text_enqueue_together_s": both["enqueue_s"],
           "encoder_passes": passes, "peak_bytes": peak if dev.type in ("cuda", "xpu") else None,
           "text_inputs": "random token ids (no tokenizer read), padded to the pipeline's length"}
    if prof:
        out["text_profile"] = prof
    return out


def measure_point(case: dict, dev: Device, mods: Loaded) -> dict:
    """One point's result (an out-of-memory error becomes status oom with the phase it happened in)."""
    t = settings(case)
    comp = case.get("component", "pipeline")
    gen = torch.Generator(device=dev.torch_device).manual_seed(int(case.get("seed", 0)))
    head = {"kind": "diffusion", "component": comp, **{k: t[k] for k in ("batch", "height", "width", "frames",
                                                                         "cfg", "denoiser_batch")}}
    if comp == "pipeline":
        head["steps"] = t["steps"]
    fn = {"denoiser": measure_denoiser, "vae-decode": measure_vae, "text-encoders": measure_text,
          "pipeline": measure_pipeline}[comp]
    try:
        with torch.inference_mode():
            res = {"status": "ok", **head, **fn(case, dev, mods, t, gen)}
    except Exception as e:
        if not is_oom(e):
            raise
        res = {**head, **oom_result(dev, comp, e)}
    release(dev)
    return res


def run_points(cases: list[dict], folder: Path, emit, on_error=None) -> None:
    """Build once for ``cases`` (one model, dtype, component, device), then ``emit(case, result)`` per point;
    ``on_error(exc) -> dict``: a point that fails otherwise than out of memory is that result and the next point
    runs (without it the error propagates)."""
    dev = Device(pick_device(cases[0].get("device")))
    torch.manual_seed(0)
    try:
        mods = load(cases[0], folder, dev)
    except Exception as e:
        if not is_oom(e):
            raise
        for c in cases:
            emit(c, {"kind": "diffusion", "component": c.get("component"), **oom_result(dev, "build", e)})
        return
    common = {"device": dev.name, "device_name": dev.device_name(), "timer": dev.timer_kind,
              "pipeline_class": mods.pipe, "dtype": cases[0].get("dtype", "fp16"),
              "weights": "pretrained" if cases[0].get("weights") else "random",
              "metric_formulas": METRIC_FORMULAS, **mods.info}
    if mods.vae is not None:
        common["vae_upcast"] = vae_upcast(cases[0], mods)
    if mods.denoiser is not None:
        common["denoiser_class"] = type(mods.denoiser).__name__
    for c in cases:
        try:
            res = measure_point(c, dev, mods)
        except Exception as e:
            if on_error is None:
                raise
            res = {"kind": "diffusion", "component": c.get("component"), **on_error(e)}
            release(dev)
        emit(c, {**res, **common})
