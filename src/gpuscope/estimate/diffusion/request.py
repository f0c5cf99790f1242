"""What a diffusion plan is asked for, with diffusers' own defaults and the checks that turn bad input into one
sentence.

Defaults per pipeline class (each pipeline's ``__call__`` signature in diffusers 0.30-0.42):
- StableDiffusionPipeline: 50 steps, guidance 7.5 (CFG), the negative prompt ("") encoded too;
- StableDiffusionXLPipeline: 50 steps, guidance 5.0; force_zeros_for_empty_prompt: the negative embeddings are
  zeros, not encoded;
- StableDiffusion3Pipeline: 28 steps, guidance 7.0, negative prompt encoded; T5 max_sequence_length 256, the
  context is 77 CLIP tokens + the T5 tokens;
- FluxPipeline: 28 steps, guidance distilled into the model (no CFG), T5 max_sequence_length 512;
- StableVideoDiffusionPipeline: 25 steps, CFG (max_guidance_scale 3 > 1), unet.config.num_frames frames,
  decode_chunk_size = all frames; the context is one CLIP image embedding;
- CogVideoXPipeline: 50 steps, guidance 6 (CFG), negative prompt encoded, 49 frames, T5 226 tokens.
A preset may override them (model_index.json "_gpuscope": {"defaults": {...}}), e.g. FLUX.1-schnell's 4 steps
and 256 T5 tokens. Default height/width: the denoiser's sample size x the VAE's factor (SVD: 576 x 1024).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.specs.diffusion import PipelineSpec
from gpuscope.specs.numbers import count

COMPONENTS = ("pipeline", "denoiser", "vae-decode", "text-encoders")
OFFLOADS = ("none", "model", "sequential")
ATTENTIONS = ("sdpa", "math")
DTYPES = ("fp16", "bf16", "fp32", "fp8")  # fp8: planner only (the denoiser's GEMMs and convs, as TensorRT's fp8 UNet)

PIPELINE_DEFAULTS = {
    "StableDiffusionPipeline": {"steps": 50, "cfg": True, "encode_negative": True},
    "StableDiffusionXLPipeline": {"steps": 50, "cfg": True, "encode_negative": False},
    "StableDiffusion3Pipeline": {"steps": 28, "cfg": True, "encode_negative": True, "t5_tokens": 256},
    "FluxPipeline": {"steps": 28, "cfg": False, "encode_negative": False, "t5_tokens": 512},
    "StableVideoDiffusionPipeline": {"steps": 25, "cfg": True, "encode_negative": False, "height": 576,
                                     "width": 1024},
    "CogVideoXPipeline": {"steps": 50, "cfg": True, "encode_negative": True, "t5_tokens": 226, "frames": 49},
}
GENERIC = {"steps": 50, "cfg": True, "encode_negative": True, "t5_tokens": 256}
VIDEO_DENOISERS = ("UNetSpatioTemporalConditionModel", "CogVideoXTransformer3DModel")


@dataclass(frozen=True)
class DiffusionRequest:
    """A plan's inputs; None means the pipeline's default."""

    model: str
    batch: int = 1
    height: int | None = None
    width: int | None = None
    frames: int | None = None
    steps: int | None = None
    cfg: bool | None = None
    dtype: str = "fp16"
    component: str = "pipeline"
    offload: str = "none"
    attention: str = "sdpa"
    vae_tiling: bool = False
    vae_slicing: bool = False


@dataclass(frozen=True)
class Resolved:
    """A request with every default filled in and checked against the pipeline."""

    batch: int
    height: int
    width: int
    frames: int
    steps: int
    cfg: bool
    encode_negative: bool
    t5_tokens: int
    video: bool
    vae_factor: int
    patch: int


def _choice(value: str, allowed: tuple, flag: str) -> str:
    if value not in allowed:
        raise UserError(f"--{flag} '{value}' is not one of {', '.join(allowed)}.")
    return value


def vae_factor(spec: PipelineSpec) -> int:
    """2^(len(block_out_channels) - 1): 8 for every VAE here (diffusers pipelines' vae_scale_factor)."""
    vae = spec.vae
    n = len(vae.get("block_out_channels", [0, 0, 0, 0])) if vae else 4
    return 2 ** (n - 1)


def patch_factor(spec: PipelineSpec) -> int:
    """Latent pixels per token side: SD3/CogVideoX patch_size, FLUX's 2x2 packing, 1 for UNets."""
    d = spec.denoiser
    if d is None or d.class_name.startswith("UNet"):
        return 1
    if d.class_name == "FluxTransformer2DModel":
        return 2 * d.get("patch_size", 1)
    return d.get("patch_size", 2)


def _default_size(spec: PipelineSpec, defaults: dict, factor: int) -> tuple[int, int]:
    d = spec.denoiser
    if "height" in defaults:
        return defaults["height"], defaults["width"]
    if d is not None and d.class_name == "CogVideoXTransformer3DModel":
        return d.get("sample_height", 60) * factor, d.get("sample_width", 90) * factor
    size = (d.get("sample_size") if d is not None else None) or 128
    return size * factor, size * factor


def resolve(req: DiffusionRequest, spec: PipelineSpec) -> Resolved:
    _choice(req.component, COMPONENTS, "component")
    _choice(req.offload, OFFLOADS, "offload")
    _choice(req.attention, ATTENTIONS, "attention")
    _choice(req.dtype, DTYPES, "dtype")
    spec.require(req.component)
    defaults = {**GENERIC, **PIPELINE_DEFAULTS.get(spec.pipeline_class, {}), **spec.meta.get("defaults", {})}
    factor, patch = vae_factor(spec), patch_factor(spec)
    dh, dw = _default_size(spec, defaults, factor)
    batch = count(req.batch, "--batch")
    height = count(req.height if req.height is not None else dh, "--height")
    width = count(req.width if req.width is not None else dw, "--width")
    step = factor * patch
    for flag, v in (("--height", height), ("--width", width)):
        if v % step:
            raise UserError(f"{flag} {v} is not divisible by {step} (the VAE's factor {factor} x the denoiser's "
                            f"patch {patch}).")
    d = spec.denoiser
    video = d is not None and d.class_name in VIDEO_DENOISERS
    default_frames = defaults.get("frames") or (d.get("num_frames", 14) if video else 1)
    frames = count(req.frames if req.frames is not None else default_frames, "--frames")
    if frames > 1 and not video and req.frames is not None:
        raise UserError(f"--frames {frames}: {spec.name} makes images (its denoiser is a "
                        f"{d.class_name if d else 'missing'}); video takes a video denoiser.")
    steps = count(req.steps if req.steps is not None else defaults["steps"], "--steps")
    cfg = defaults["cfg"] if req.cfg is None else bool(req.cfg)
    return Resolved(batch, height, width, frames, steps, cfg, bool(defaults["encode_negative"]) and cfg,
                    int(defaults.get("t5_tokens", 256)), video, factor, patch)
