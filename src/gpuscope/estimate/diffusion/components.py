"""One trace per component class: which walker describes it and what shapes it runs on.

``Shapes`` is what a pipeline call gives every component: the denoiser's batch (B, or 2B with classifier-free
guidance), the latent size, the latent frames of a video, the text tokens. ``trace_component`` walks the
component's module at those shapes (trace.py) and returns the Trace: parameters, ops and activation peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.estimate.diffusion import dit, text, unet, vae
from gpuscope.estimate.diffusion.trace import Trace
from gpuscope.specs.diffusion import ComponentSpec


@dataclass(frozen=True)
class Shapes:
    rows: int  # the denoiser's batch: B, or 2B with CFG
    prompts: int  # text encoder batch: B, or 2B when the negative prompt is encoded too
    images: int  # images (or clips) the VAE decodes at once
    latent_h: int
    latent_w: int
    frames: int = 1  # video: frames the denoiser sees (SVD: frames; CogVideoX: latent frames)
    out_frames: int = 1  # video: frames the VAE writes
    clip_tokens: int = 77
    t5_tokens: int = 256
    ctx_tokens: int = 77  # the denoiser's context length


def trace_component(comp: ComponentSpec, s: Shapes, act_b: float, w_b: float, attn_impl: str,
                    nchw_copies: bool = False) -> Trace:
    """``nchw_copies``: count a GPU's layout copies around each convolution (trace.py's docstring)."""
    t = Trace(act_b=act_b, w_b=w_b, attn_impl=attn_impl, nchw_copies=nchw_copies)
    cfg, cls = comp.config, comp.class_name
    if cls == "UNet2DConditionModel":
        unet.unet2d(t, cfg, s.rows, s.latent_h, s.latent_w, s.ctx_tokens)
    elif cls == "UNetSpatioTemporalConditionModel":
        unet.unet_svd(t, cfg, s.rows, s.frames, s.latent_h, s.latent_w)
    elif cls == "SD3Transformer2DModel":
        dit.sd3(t, cfg, s.rows, s.latent_h, s.latent_w, s.ctx_tokens)
    elif cls == "FluxTransformer2DModel":
        dit.flux(t, cfg, s.rows, s.latent_h, s.latent_w, s.ctx_tokens)
    elif cls == "CogVideoXTransformer3DModel":
        dit.cogvideox(t, cfg, s.rows, s.frames, s.latent_h, s.latent_w, s.ctx_tokens)
    elif cls == "AutoencoderKL":
        vae.autoencoder_kl(t, cfg, s.images, s.latent_h, s.latent_w)
    elif cls == "AutoencoderKLTemporalDecoder":
        vae.autoencoder_temporal(t, cfg, s.images * s.frames, s.latent_h, s.latent_w, clips=s.images)
    elif cls == "AutoencoderKLCogVideoX":
        vae.autoencoder_cogvideox(t, cfg, s.images, s.frames, s.latent_h, s.latent_w)
    elif cls in ("CLIPTextModel", "CLIPTextModelWithProjection"):
        text.clip_text(t, cfg, s.prompts, cls.endswith("WithProjection"))
    elif cls == "CLIPVisionModelWithProjection":
        text.clip_vision(t, cfg, s.prompts)
    elif cls == "T5EncoderModel":
        text.t5_encoder(t, cfg, s.prompts, s.t5_tokens)
    else:  # specs/diffusion.py admits only the classes above
        raise AssertionError(f"no walker for {cls}")
    return t


def parameter_count(comp: ComponentSpec) -> int:
    """The component's parameters (the same at every shape): a walk at a tiny shape."""
    tiny = Shapes(rows=1, prompts=1, images=1, latent_h=16, latent_w=16, frames=2, t5_tokens=4, ctx_tokens=4)
    return trace_component(comp, tiny, 2.0, 2.0, "sdpa").params
