"""What each denoiser, VAE and text encoder is fed, as its diffusers pipeline feeds it, with random values in place
of encoded prompts (no tokenizer is read: token ids are random integers below the vocabulary size).

Denoiser inputs at the batch ``n`` it sees (B, or 2B with classifier-free guidance), for an H x W image (F frames):
- UNet2DConditionModel (SD 1.5, SDXL): ``sample`` [n, C, H/f, W/f], prompt embeddings [n, 77, cross_attention_dim];
  SDXL's ``text_time`` conditioning adds pooled text [n, proj - 6 * addition_time_embed_dim] and 6 time ids
  (StableDiffusionXLPipeline._get_add_time_ids).
- UNetSpatioTemporalConditionModel (SVD): ``sample`` [n, F, C_in, H/f, W/f] (noise concatenated with the image's
  latents along channels, as StableVideoDiffusionPipeline does each step), one image embedding [n, 1, d] and
  3 added time ids (fps, motion bucket, noise augmentation).
- SD3Transformer2DModel: latents [n, C, H/f, W/f], 77 CLIP + T5 tokens (the pipeline's max_sequence_length:
  estimate/diffusion/request.py's defaults, 256) of joint_attention_dim, pooled projections.
- FluxTransformer2DModel: 2x2 latent patches packed into a sequence [n, (H/2f)(W/2f), 4C] with their position ids,
  the T5 tokens (512, FLUX.1-schnell's preset 256), pooled CLIP [n, pooled_projection_dim], the timestep / 1000,
  and the guidance scale where the model embeds it.
- CogVideoXTransformer3DModel: latents [n, (F-1)/4 + 1, C, H/f, W/f], max_text_seq_length T5 tokens (226), and the
  3-D rotary embeddings computed by CogVideoXPipeline's own method.
f is the VAE's spatial factor 2**(len(block_out_channels) - 1); video VAEs compress frames by 4.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

CLIP_TOKENS = 77
GUIDANCE = 5.0  # any guidance scale: the timing does not depend on it


def vae_factors(vae_cfg: dict) -> tuple[int, int]:
    """(spatial, temporal) compression of a VAE config."""
    spatial = 2 ** (len(vae_cfg.get("block_out_channels") or [0, 0, 0, 0]) - 1)
    return spatial, int(vae_cfg.get("temporal_compression_ratio") or 1)


def device_of(model) -> torch.device:
    """Where ``model`` runs: its parameters' device, or under CPU offload its accelerate hook's execution device
    (as DiffusionPipeline._execution_device reads it)."""
    for m in model.modules():
        dev = getattr(getattr(m, "_hf_hook", None), "execution_device", None)
        if dev is not None:
            return torch.device(dev)
    return model.device


class Denoiser:
    """A denoiser with its fixed conditioning at batch ``n`` (random embeddings), the scheduler's latent shape at
    batch ``b``, and one forward from latents at batch ``n``."""

    def __init__(self, model, vae_cfg: dict, batch: int, n: int, height: int, width: int, frames: int | None,
                 t5_tokens: int, gen: torch.Generator):
        self.model, self.cls, self.t5_tokens = model, type(model).__name__, t5_tokens
        self.cfg = model.config
        self.f, self.ft = vae_factors(vae_cfg)
        self.h, self.w = height // self.f, width // self.f
        self.frames = frames
        self.batch, self.n = batch, n
        self.dev, self.dtype = device_of(model), model.dtype
        self.gen = gen
        self.cond = self._conditioning()

    def rand(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen, device=self.dev, dtype=self.dtype)

    # --- shapes ---------------------------------------------------------------------------------------------
    @property
    def latent_frames(self) -> int:
        return (int(self.frames) - 1) // self.ft + 1 if self.ft > 1 else int(self.frames or 1)

    def latent_shape(self, b: int) -> tuple[int, ...]:
        c = self.cfg
        if self.cls == "UNetSpatioTemporalConditionModel":
            return (b, int(self.frames), c.out_channels, self.h, self.w)
        if self.cls == "FluxTransformer2DModel":
            return (b, (self.h // 2) * (self.w // 2), c.in_channels)
        if self.cls == "CogVideoXTransformer3DModel":
            return (b, self.latent_frames, c.in_channels, self.h, self.w)
        return (b, c.in_channels, self.h, self.w)

    def latents(self, b: int | None = None) -> torch.Tensor:
        return self.rand(*self.latent_shape(self.batch if b is None else b))

    # --- conditioning ---------------------------------------------------------------------------------------
    def _conditioning(self) -> dict:
        c, n = self.cfg, self.n
        if self.cls == "UNet2DConditionModel":
            cross = c.cross_attention_dim
            out: dict = {"encoder_hidden_states": self.rand(n, CLIP_TOKENS, cross[0] if isinstance(cross, (list, tuple))
                                                            else cross)}
            if c.addition_embed_type == "text_time":
                pooled = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim
                out["added_cond_kwargs"] = {"text_embeds": self.rand(n, pooled), "time_ids": self.rand(n, 6)}
            return out
        if self.cls == "UNetSpatioTemporalConditionModel":
            k = c.in_channels - c.out_channels
            ids = c.projection_class_embeddings_input_dim // c.addition_time_embed_dim  # fps, motion, noise aug
            return {"encoder_hidden_states": self.rand(n, 1, c.cross_attention_dim),
                    "added_time_ids": self.rand(n, ids),
                    "image_latents": self.rand(n, int(self.frames), k, self.h, self.w)}
        if self.cls == "SD3Transformer2DModel":
            seq = CLIP_TOKENS + self.t5_tokens
            return {"encoder_hidden_states": self.rand(n, seq, c.joint_attention_dim),
                    "pooled_projections": self.rand(n, c.pooled_projection_dim)}
        if self.cls == "FluxTransformer2DModel":
            return self._flux(n)
        if self.cls == "CogVideoXTransformer3DModel":
            return self._cogvideox(n)
        raise ValueError(f"gpuscope does not know how to feed a {self.cls}")

    def _flux(self, n: int) -> dict:
        from diffusers import FluxPipeline

        c, seq = self.cfg, self.t5_tokens
        ids = FluxPipeline._prepare_latent_image_ids(n, self.h // 2, self.w // 2, self.dev, self.dtype)
        out = {"encoder_hidden_states": self.rand(n, seq, c.joint_attention_dim),
               "pooled_projections": self.rand(n, c.pooled_projection_dim),
               "txt_ids": torch.zeros(seq, 3, device=self.dev, dtype=self.dtype), "img_ids": ids}
        if c.guidance_embeds:
            out["guidance"] = torch.full((n,), 3.5, device=self.dev, dtype=torch.float32)
        return out

    def _cogvideox(self, n: int) -> dict:
        from diffusers import CogVideoXPipeline

        c = self.cfg
        out = {"encoder_hidden_states": self.rand(n, c.max_text_seq_length, c.text_embed_dim)}
        if c.use_rotary_positional_embeddings:
            host = SimpleNamespace(vae_scale_factor_spatial=self.f, transformer=self.model)
            out["image_rotary_emb"] = CogVideoXPipeline._prepare_rotary_positional_embeddings(
                host, self.h * self.f, self.w * self.f, self.latent_frames, self.dev)
        return out

    # --- one forward ----------------------------------------------------------------------------------------
    def timestep(self, t) -> torch.Tensor:
        t = torch.as_tensor(t, device=self.dev)
        if self.cls == "FluxTransformer2DModel":
            return (t.to(self.dtype) / 1000).expand(self.n)
        if self.cls in ("SD3Transformer2DModel", "CogVideoXTransformer3DModel"):
            return t.expand(self.n)
        return t

    def __call__(self, x: torch.Tensor, t=999) -> torch.Tensor:
        """The noise prediction for latents ``x`` at batch n (the model's own output tensor)."""
        kw = {k: v for k, v in self.cond.items() if k != "image_latents"}
        if self.cls == "UNetSpatioTemporalConditionModel":
            x = torch.cat([x, self.cond["image_latents"]], dim=2)
        arg = "sample" if self.cls.startswith("UNet") else "hidden_states"
        return self.model(**{arg: x}, timestep=self.timestep(t), **kw, return_dict=False)[0]

    def expand(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents at batch B as the denoiser sees them: twice over with classifier-free guidance."""
        return torch.cat([latents] * (self.n // latents.shape[0])) if self.n != latents.shape[0] else latents

    def guide(self, pred: torch.Tensor) -> torch.Tensor:
        if self.n == self.batch:
            return pred
        uncond, text = pred.chunk(2)
        return uncond + GUIDANCE * (text - uncond)


def vae_latents(vae, batch: int, height: int, width: int, frames: int | None, gen) -> torch.Tensor:
    """The latents the VAE decodes at the end of a pipeline (batch B), in the VAE's layout."""
    f, ft = vae_factors(dict(vae.config))
    c, h, w = vae.config.latent_channels, height // f, width // f
    dev, dt = device_of(vae), vae.dtype
    if type(vae).__name__ == "AutoencoderKLTemporalDecoder":
        return torch.randn(batch * int(frames), c, h, w, generator=gen, device=dev, dtype=dt)
    if ft > 1:
        return torch.randn(batch, c, (int(frames) - 1) // ft + 1, h, w, generator=gen, device=dev, dtype=dt)
    return torch.randn(batch, c, h, w, generator=gen, device=dev, dtype=dt)


def decode(vae, z: torch.Tensor, frames: int | None, chunk: int | None = None) -> torch.Tensor:
    """Decode latents as the pipeline does: scaled by 1/scaling_factor (and shifted); SVD's temporal decoder in
    chunks of ``chunk`` frames (StableVideoDiffusionPipeline.decode_latents, default all frames at once)."""
    cfg = vae.config
    z = z / cfg.scaling_factor + (getattr(cfg, "shift_factor", None) or 0.0)
    if type(vae).__name__ != "AutoencoderKLTemporalDecoder":
        return vae.decode(z, return_dict=False)[0]
    step = chunk or int(frames)
    return torch.cat([vae.decode(z[i:i + step], num_frames=z[i:i + step].shape[0], return_dict=False)[0]
                      for i in range(0, z.shape[0], step)])


def unpack_flux(latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """FluxPipeline._unpack_latents: [B, (h/2)(w/2), 4C] -> [B, C, h, w]."""
    b, _, c4 = latents.shape
    x = latents.view(b, h // 2, w // 2, c4 // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c4 // 4, h, w)


def encoder_inputs(model, t5_tokens: int, batch: int, gen: torch.Generator) -> dict:
    """A text (or image) encoder's inputs: random token ids of the length the pipeline pads to (CLIP its 77
    positions, T5 the pipeline's max_sequence_length ``t5_tokens``), or one 224 x 224 image for an image encoder."""
    cfg, dev = model.config, device_of(model)
    name = type(model).__name__
    if "Vision" in name:
        s = cfg.image_size
        return {"pixel_values": torch.randn(batch, cfg.num_channels, s, s, generator=gen, device=dev,
                                            dtype=model.dtype)}
    if name.startswith("T5") or name.startswith("UMT5"):
        seq = t5_tokens
    else:
        seq = getattr(cfg, "max_position_embeddings", CLIP_TOKENS)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen, device=dev)
    return {"input_ids": ids}
