"""The whole pipeline as its diffusers pipeline runs it, over random-weight modules: the text (or image) encoders,
then N denoising steps through the folder's scheduler (diffusers' own class, default config where the folder has no
scheduler_config.json), then the VAE decode. Each step: the latents doubled for CFG, the scheduler's input scaling,
the denoiser, the guidance combine, ``scheduler.step``: what StableDiffusionXLPipeline.__call__ and its siblings do
per step. Under CPU offload (``offload``, measure/diffusion/offload.py) each phase's time includes the moves its
hooks make (model offload: the module before it out, its own in; the VAE phase also every module out at the end). Not run: tokenizers (random token ids instead), safety checkers, image post-processing to PIL.

Phases are timed separately (device events, a synchronize between them) and summed into ``total_s``; each phase's
peak is read after its own ``reset_peak_memory_stats``. Each phase also counts the process's minor page faults
(getrusage; ``host_page_faults``, medians): under model offload a move out into host pages the process has not
touched faults once a page, ~1 GB/s of copy on an H200 VM (estimate/diffusion/offload.FAULT_S), so faults in a
timed call say it had not reached the steady state the planner prices.
"""

from __future__ import annotations

import json
import statistics
import time

try:
    import resource
except ImportError:  # Windows: no getrusage
    resource = None

import torch

from gpuscope.measure.device.device import Device, repeats
from gpuscope.measure.device.nvml import PhaseEnergy
from gpuscope.measure.diffusion import offload
from gpuscope.measure.diffusion.build import module_class
from gpuscope.measure.diffusion.components import denoiser_for, encode_all, set_vae_modes, vae_upcast
from gpuscope.measure.diffusion.inputs import decode, encoder_inputs, unpack_flux
from gpuscope.measure.host.probe import HostProbe

PHASES = ("text", "denoise", "vae")
# where a folder has no scheduler_config.json: the settings its published pipelines ship that change the number of
# denoiser calls (SD 1.5's PNDM skips the Runge-Kutta warm-up steps, runwayml/stable-diffusion-v1-5's config)
SCHEDULER_DEFAULTS = {"PNDMScheduler": {"skip_prk_steps": True}}


def scheduler(mods):
    lib, cls = mods.index.get("scheduler", ("diffusers", "EulerDiscreteScheduler"))
    path = mods.folder / "scheduler" / "scheduler_config.json"
    cfg = json.loads(path.read_text()) if path.is_file() else dict(SCHEDULER_DEFAULTS.get(cls, {}))
    return module_class(lib, cls).from_config(cfg)


def decode_as_pipeline(vae, z: torch.Tensor, frames, chunk, upcast: bool) -> torch.Tensor:
    """The VAE decode, cast to fp32 around it where the pipeline upcasts (StableDiffusionXLPipeline.upcast_vae,
    then ``vae.to(float16)`` after: both casts are part of the decode's time)."""
    if not upcast:
        return decode(vae, z, frames, chunk)
    vae.to(dtype=torch.float32)
    try:
        return decode(vae, z, frames, chunk)
    finally:  # also after an out-of-memory decode: the next point starts from the fp16 VAE
        vae.to(dtype=torch.float16)


def vae_input(den, latents: torch.Tensor, upcast: bool) -> torch.Tensor:
    """The denoised latents in the VAE's layout and dtype (Flux unpacked, CogVideoX frames second, SVD's frames
    folded into the batch; fp32 for an upcast VAE)."""
    if den.cls == "FluxTransformer2DModel":
        latents = unpack_flux(latents, den.h, den.w)
    elif den.cls == "CogVideoXTransformer3DModel":
        latents = latents.permute(0, 2, 1, 3, 4)
    elif den.cls == "UNetSpatioTemporalConditionModel":
        latents = latents.flatten(0, 1)
    return latents.float() if upcast else latents


def denoise(den, sched, steps: int) -> torch.Tensor:
    kw = {"mu": 1.0} if sched.config.get("use_dynamic_shifting") else {}
    sched.set_timesteps(steps, device=den.dev, **kw)
    latents = den.latents() * getattr(sched, "init_noise_sigma", 1.0)
    scale = getattr(sched, "scale_model_input", None)
    for t in sched.timesteps:
        x = den.expand(latents)
        x = scale(x, t) if scale is not None else x
        pred = den.guide(den(x, t))
        latents = sched.step(pred, t, latents, return_dict=False)[0]
    return latents


def finish(mods, out):
    """The call's end: under model offload every module back on the CPU (maybe_free_model_hooks, inside the
    pipeline's __call__: timed with the decode)."""
    offload.free(mods.hooks)
    return out


def _minflt() -> int | None:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource else None


def _phase(dev: Device, fn, times: list, peaks: list, faults: list):
    dev.reset_peak()
    f0 = _minflt()
    with dev.timer() as t:
        out = fn()
    times.append(t.s)
    peaks.append(dev.peak_allocated())
    faults.append(None if f0 is None else _minflt() - f0)
    return out


def measure_pipeline(case: dict, dev: Device, mods, t: dict, gen) -> dict:
    sched, den = scheduler(mods), denoiser_for(mods, t, gen)
    modes = set_vae_modes(mods.vae, case)
    chunk = 1 if case.get("vae_slicing") else None
    upcast = vae_upcast(case, mods)
    inputs = {name: encoder_inputs(enc, t["t5_tokens"], t["batch"], gen) for name, enc in mods.encoders.items()}
    times: dict = {p: [] for p in PHASES}
    peaks: dict = {p: [] for p in PHASES}
    faults: dict = {p: [] for p in PHASES}

    def once():
        _phase(dev, lambda: encode_all(mods, inputs, t), times["text"], peaks["text"], faults["text"])
        lat = _phase(dev, lambda: denoise(den, sched, t["steps"]), times["denoise"], peaks["denoise"],
                     faults["denoise"])
        _phase(dev, lambda: finish(mods, decode_as_pipeline(mods.vae, vae_input(den, lat, upcast), t["frames"],
                                                            chunk, upcast)), times["vae"], peaks["vae"], faults["vae"])

    for _ in range(t["warmup"]):
        once()
    for d in (times, peaks, faults):
        for p in PHASES:
            d[p].clear()
    with HostProbe(dev) as hp:  # the host speed the loop met (measure/host/probe.py)
        t0 = time.perf_counter()
        with PhaseEnergy(dev) as energy:
            for _ in repeats(t["repeats"], t["min_time_s"]):
                once()
        wall = time.perf_counter() - t0
    return {**_result(t, times, peaks, energy, wall, modes), **_faults(faults), **hp.summary(),
            **offload.link_probe(mods, dev)}


def _faults(faults: dict) -> dict:
    """Median minor page faults per phase of the timed calls, and the bytes they stand for (a page each)."""
    if any(None in v or not v for v in faults.values()):
        return {}
    med = {p: statistics.median(v) for p, v in faults.items()}
    return {"host_page_faults": med, "host_fault_bytes": sum(med.values()) * resource.getpagesize()}


def _result(t: dict, times: dict, peaks: dict, energy, wall: float, modes: dict) -> dict:
    n = len(times["denoise"])
    totals = [sum(times[p][i] for p in PHASES) for i in range(n)]
    med = {p: statistics.median(times[p]) for p in PHASES}
    total = statistics.median(totals)
    peak = {p: max(peaks[p]) if None not in peaks[p] else None for p in PHASES}
    out = {"total_s": total, "total_spread": (max(totals) - min(totals)) / total if total else None,
           "pipeline_repeats": n, "text_encode_s": med["text"], "denoise_s": med["denoise"],
           "loop_step_s": med["denoise"] / t["steps"], "vae_decode_s": med["vae"],
           "peak_text_bytes": peak["text"], "peak_denoise_bytes": peak["denoise"], "peak_vae_bytes": peak["vae"],
           "peak_bytes": max(peak.values()) if None not in peak.values() else None,
           "images_per_s": t["batch"] / total if total else None,
           "energy_j": energy.joules, "energy_source": energy.source,
           "power_w": energy.joules / wall if energy.joules and wall > 0 else None,
           "j_per_image": energy.joules / (n * t["batch"]) if energy.joules else None,
           "pipeline_driver": "gpuscope loop over the diffusers scheduler and modules", **modes}
    if t["frames"]:
        out["s_per_clip"] = total / t["batch"]
    return out
