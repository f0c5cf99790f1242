"""What one build of `bench diffusion` holds and the settings of a point: the modules a component needs (built once
for a sweep's points), the point's sizes with the pipeline's defaults as the planner fills them, and the switches
diffusers offers for the VAE. No measurement here (run.py, loop.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from gpuscope.measure.device.device import Device
from gpuscope.measure.diffusion import build as b
from gpuscope.measure.diffusion import offload
from gpuscope.measure.diffusion.inputs import Denoiser
from gpuscope.measure.models.hf_model import DTYPES

NEEDS = {"denoiser": ("denoiser",), "vae-decode": ("vae",), "text-encoders": ("encoders",),
         "pipeline": ("encoders", "denoiser", "vae")}

def pipeline_spec(model: str):
    from gpuscope.specs.diffusion import load_pipeline

    return load_pipeline(model)


def folder_of(spec) -> Path:
    """The folder a PipelineSpec was read from (a preset's under specs/data/diffusion)."""
    from gpuscope.specs.diffusion import PRESET_DIR

    return PRESET_DIR / spec.name if spec.source.startswith("preset:") else Path(spec.source)


@dataclass
class Loaded:
    """The modules of one build (a folder, a dtype, a component)."""

    folder: Path
    pipe: str
    index: dict
    denoiser: torch.nn.Module | None = None
    vae: torch.nn.Module | None = None
    vae_cfg: dict = field(default_factory=dict)
    encoders: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    hooks: list = field(default_factory=list)  # model offload's hooks (measure/diffusion/offload.py)


def vae_upcast(case: dict, mods: "Loaded") -> bool:
    """StableDiffusionXLPipeline decodes an fp16 run's latents with the VAE cast to fp32 where the VAE's config says
    force_upcast (its upcast_vae), then casts it back; SVD's pipeline upcasts only to encode its input image."""
    return (case.get("component") == "pipeline" and case.get("dtype") == "fp16" and mods.pipe ==
            "StableDiffusionXLPipeline" and bool(mods.vae_cfg.get("force_upcast")))


def _add(mods: Loaded, name: str, model) -> None:
    mods.info.setdefault("params", {})[name] = b.param_count(model)
    mods.info.setdefault("weights_bytes", {})[name] = b.param_bytes(model)
    procs = b.attention_processors(model)
    if procs:
        mods.info.setdefault("attention_processors", {})[name] = procs


def load(case: dict, folder: Path, dev: Device) -> Loaded:
    """Build what ``case["component"]`` needs on ``dev`` (random weights, or the folder's own with ``weights``)."""
    import json

    idx = json.loads((folder / "model_index.json").read_text())
    index = b.read_index(folder)
    mods = Loaded(folder, idx.get("_class_name", "?"), index)
    dt, w = DTYPES[case.get("dtype", "fp16")], bool(case.get("weights"))
    need = NEEDS[case.get("component", "pipeline")]
    if "vae" in index:
        mods.vae_cfg = b.component_config(folder, "vae")
    if "encoders" in need:
        for name in (n for n in b.TEXT_ENCODERS if n in index):
            mods.encoders[name] = b.build(folder, name, dev.torch_device, dt, w)
            _add(mods, name, mods.encoders[name])
    if "denoiser" in need:
        name = next(n for n in b.DENOISERS if n in index)
        mods.denoiser = b.build(folder, name, dev.torch_device, dt, w)
        if case.get("attn") == "math" and not b.set_math_attention(mods.denoiser):
            raise ValueError(f"--attn math: {type(mods.denoiser).__name__} has no score-materialising processor")
        _add(mods, name, mods.denoiser)
    if "vae" in need:
        mods.vae = b.build(folder, "vae", dev.torch_device, dt, w)
        _add(mods, "vae", mods.vae)
    mods.hooks = offload.apply(mods, case.get("offload", "none"), dev.torch_device)
    dev.synchronize()
    dev.empty_cache()
    mods.info["mem_after_load_bytes"] = dev.allocated()
    return mods


def settings(case: dict) -> dict:
    """The point's sizes with the pipeline's defaults filled in as the planner fills them
    (estimate/diffusion/request.resolve: steps, CFG, frames, T5 tokens, whether the negative prompt is encoded)."""
    from gpuscope.estimate.diffusion.request import DiffusionRequest, resolve

    r = resolve(DiffusionRequest(model=case["model"], batch=int(case["batch"]), height=case.get("height"),
                                 width=case.get("width"), frames=case.get("frames"), steps=case.get("steps"),
                                 cfg=case.get("cfg"), dtype=case.get("dtype", "fp16"),
                                 component=case.get("component", "pipeline")), pipeline_spec(case["model"]))
    return {"batch": r.batch, "height": r.height, "width": r.width, "frames": r.frames if r.video else None,
            "steps": r.steps, "cfg": r.cfg, "denoiser_batch": r.batch * (2 if r.cfg else 1),
            "t5_tokens": r.t5_tokens, "encode_negative": r.encode_negative,
            "repeats": int(case.get("repeats", 5)), "warmup": int(case.get("warmup", 2)),
            "min_time_s": float(case.get("min_time_s", 0.0))}


def encoder_passes(name: str, t: dict) -> int:
    """Calls of an encoder per pipeline call: a text encoder twice where the pipeline encodes the negative prompt
    too (StableDiffusionPipeline.encode_prompt: the prompt, then the negative prompt, each at batch B), else once."""
    return 2 if t["encode_negative"] and name.startswith("text_encoder") else 1


def encode_all(mods: "Loaded", inputs: dict, t: dict) -> None:
    for name, enc in mods.encoders.items():
        for _ in range(encoder_passes(name, t)):
            enc(**inputs[name])


def denoiser_for(mods: Loaded, t: dict, gen) -> Denoiser:
    return Denoiser(mods.denoiser, mods.vae_cfg, t["batch"], t["denoiser_batch"], t["height"], t["width"],
                    t["frames"], t["t5_tokens"], gen)


def set_vae_modes(vae, case: dict) -> dict:
    """diffusers' slicing and tiling switched as the case asks; what applies (SVD's temporal decoder has the switch
    but no tiled decode: tiling does not apply to it; its slicing is the decode in one-frame chunks, inputs.decode)."""
    out = {}
    for mode in ("slicing", "tiling"):
        on = bool(case.get(f"vae_{mode}"))
        fn = getattr(vae, f"{'enable' if on else 'disable'}_{mode}", None)
        if fn is not None:
            fn()
        out[f"vae_{mode}"] = on and fn is not None and (mode != "tiling" or hasattr(vae, "tiled_decode"))
    return out
