"""The VAEs, walked as diffusers runs them: AutoencoderKL (SD, SDXL, SD3, FLUX; models/autoencoders/vae.py Encoder
and Decoder), AutoencoderKLTemporalDecoder (SVD: a 2-D encoder, a decoder of SpatioTemporalResBlocks and a final
(3, 1, 1) time convolution) and AutoencoderKLCogVideoX (causal 3-D convolutions, spatially conditioned norms).

Only ``decode`` runs in a text-to-image pipeline; the encoder's parameters are counted (they are loaded) but its ops
are not traced. The decoder's activation peak is at full resolution: the last up block's first resnet reads the
upsampled (2 x block_out_channels[0])-channel image and writes block_out_channels[0] channels.
"""

from __future__ import annotations

from functools import partial

from gpuscope.estimate.diffusion import blocks as b
from gpuscope.estimate.diffusion.trace import Trace


def _channels(cfg) -> tuple[list[int], int, int]:
    return list(cfg.get("block_out_channels", [64])), cfg.get("layers_per_block", 1), cfg.get("latent_channels", 4)


def _encoder_params(cfg, temporal: bool = False) -> tuple[int, int]:
    """(parameters, parameter tensors) of the 2-D Encoder (conv_in, DownEncoderBlock2Ds, mid block, conv_norm_out,
    conv_out to 2L)."""
    ch, layers, lat = _channels(cfg)
    t = Trace()
    t.conv("conv_in", 1, cfg.get("in_channels", 3), ch[0], 1, 1)
    prev = ch[0]
    for i, c in enumerate(ch):
        for j in range(layers):
            b.resnet2d(t, "r", 1, 1, prev if j == 0 else c, c, None)
        if i < len(ch) - 1:
            t.conv("down", 1, c, c, 4, 1)
        prev = c
    _mid(t, "mid", 1, 1, ch[-1], cfg.get("mid_block_add_attention", True))
    t.group_norm("conv_norm_out", 1, ch[-1], 1)
    t.conv("conv_out", 1, ch[-1], 2 * lat, 1, 1)
    return t.params, t.tensors


def _mid(t: Trace, name: str, n: int, pix: int, c: int, attn: bool = True, input_held: bool = False) -> bool:
    """UNetMidBlock2D: resnet, attention, resnet. Returns whether its output is channels-last (after the attention:
    blocks.vae_attention)."""
    b.resnet2d(t, f"{name}.resnets.0", n, pix, c, c, None, input_held=input_held)
    if attn:
        b.vae_attention(t, f"{name}.attentions.0", n, pix, c)
    b.resnet2d(t, f"{name}.resnets.1", n, pix, c, c, None, cl_input=attn)
    return attn


def autoencoder_kl(t: Trace, cfg, n: int, h: int, w: int) -> None:
    """AutoencoderKL.decode over ``n`` latents of h x w (post_quant_conv, Decoder); the encoder's parameters."""
    ch, layers, lat = _channels(cfg)
    t.weights_only(*_encoder_params(cfg), runs=False)
    if cfg.get("use_quant_conv", True):
        t.weights_only(2 * lat * 2 * lat + 2 * lat, 2, runs=False)
    pix = h * w
    if cfg.get("use_post_quant_conv", True):
        t.conv("post_quant_conv", n, lat, lat, pix, pix, k=1)
    rch = ch[::-1]
    t.conv("decoder.conv_in", n, lat, rch[0], pix, pix)
    t.hold(n * pix * rch[0])  # Decoder.forward's `sample` references each block's input until it returns
    cl = _mid(t, "decoder.mid_block", n, pix, rch[0], cfg.get("mid_block_add_attention", True), input_held=True)
    t.release(n * pix * rch[0])
    pix, cl = _up_blocks(t, n, pix, rch, layers, b.resnet2d, cl)
    if cl:  # GroupNorm's contiguous() of the channels-last stream
        t.ew("decoder.conv_norm_out_contiguous", n * pix * ch[0], live=2 * n * pix * ch[0], path="transpose")
    t.group_norm("decoder.conv_norm_out", n, ch[0], pix)
    t.ew("decoder.conv_act", n * pix * ch[0])
    t.conv("decoder.conv_out", n, ch[0], cfg.get("out_channels", 3), pix, pix)


def _up_blocks(t: Trace, n: int, pix: int, rch, layers: int, resnet, cl: bool = False) -> tuple[int, bool]:
    """The decoder's up blocks (``layers + 1`` resnets each, an upsampler but in the last): each block's input is
    held by the decoder's `sample` until the block returns. ``resnet`` is the block kind (2-D, or spatio-temporal
    for the temporal decoder); ``cl``: the stream coming in is channels-last (2-D resnets only; it stays so
    through the resnets, and through an upsampler where the tensor holds more than one image: blocks.upsample).
    Returns the pixels per image after the last block and whether the stream is still channels-last."""
    prev = rch[0]
    for i, c in enumerate(rch):
        held = n * pix * prev
        t.hold(held)
        for j in range(layers + 1):
            kw = {"cl_input": True} if cl else {}
            resnet(t, f"decoder.up_blocks.{i}.resnets.{j}", n, pix, prev if j == 0 else c, c, None, input_held=j == 0,
                   **kw)
        if i < len(rch) - 1:
            cl = b.upsample(t, f"decoder.up_blocks.{i}.upsamplers.0", n, pix, c, cl_input=cl)
            pix *= 4
        t.release(held)
        prev = c
    return pix, cl


def autoencoder_temporal(t: Trace, cfg, n: int, h: int, w: int, clips: int | None = None) -> None:
    """AutoencoderKLTemporalDecoder.decode over ``n`` = clips x frames latents (one chunk of decode_chunk_size)."""
    ch, layers, lat = _channels(cfg)
    st_resnet = partial(b.spatio_temporal_resnet, clips=clips)
    enc, enc_tensors = _encoder_params(cfg)
    t.weights_only(enc + 2 * lat * 2 * lat + 2 * lat, enc_tensors + 2, runs=False)  # encoder + quant_conv
    pix = h * w
    rch = ch[::-1]
    t.conv("decoder.conv_in", n, lat, rch[0], pix, pix)
    t.hold(n * pix * rch[0])  # TemporalDecoder.forward's `sample`: each block's input until it returns
    st_resnet(t, "decoder.mid_block.resnets.0", n, pix, rch[0], rch[0], None, input_held=True)
    for j in range(1, layers):
        b.vae_attention(t, f"decoder.mid_block.attentions.{j - 1}", n, pix, rch[0])
        st_resnet(t, f"decoder.mid_block.resnets.{j}", n, pix, rch[0], rch[0], None)
    t.release(n * pix * rch[0])
    pix, _ = _up_blocks(t, n, pix, rch, layers, st_resnet)
    out = cfg.get("out_channels", 3)
    t.group_norm("decoder.conv_norm_out", n, ch[0], pix)
    t.ew("decoder.conv_act", n * pix * ch[0])
    t.conv("decoder.conv_out", n, ch[0], out, pix, pix)
    t.conv("decoder.time_conv_out", n, out, out, pix, pix, k=1, kt=3)


# ---- CogVideoX ------------------------------------------------------------------------------------------------

def _cog_norm(t: Trace, name: str, n: int, pix: int, c: int, zq: int | None, clips: int | None = None) -> None:
    """GroupNorm, or CogVideoXSpatialNorm3D: GroupNorm(f) * conv_y(zq) + conv_b(zq) (1x1x1 convs of the
    latent interpolated to this resolution). The GroupNorm runs on the 5-D (clips, c, frames, h, w) tensor: one
    moments row per (clip, group)."""
    clips = clips or n
    t.group_norm(f"{name}.norm_layer", clips, c, n * pix / clips)
    if zq:
        t.ew(f"{name}.zq_interpolate", n * pix * zq)
        t.conv(f"{name}.conv_y", n, zq, c, pix, pix, k=1)
        t.conv(f"{name}.conv_b", n, zq, c, pix, pix, k=1)
        t.ew(f"{name}.modulate", n * pix * c, rw=4, kernels=2)


def _cog_resnet(t: Trace, name: str, n: int, pix: int, cin: int, cout: int, zq: int | None,
                clips: int | None = None) -> None:
    """CogVideoXResnetBlock3D (no time embedding): norm, SiLU, causal 3x3x3 conv (after a cat of the cached
    frames), twice; a 1x1x1 shortcut when the widths differ; the residual add."""
    t.hold(n * pix * cin)
    _cog_norm(t, f"{name}.norm1", n, pix, cin, zq, clips)
    t.ew(f"{name}.act1", n * pix * cin)
    t.ew(f"{name}.pad1", n * pix * cin)
    t.conv(f"{name}.conv1", n, cin, cout, pix, pix, k=3, kt=3)
    _cog_norm(t, f"{name}.norm2", n, pix, cout, zq, clips)
    t.ew(f"{name}.act2", n * pix * cout)
    t.ew(f"{name}.pad2", n * pix * cout)
    t.conv(f"{name}.conv2", n, cout, cout, pix, pix, k=3, kt=3)
    if cin != cout:
        t.conv(f"{name}.conv_shortcut", n, cin, cout, pix, pix, k=1)
    t.ew(f"{name}.residual", n * pix * cout, rw=3)
    t.release(n * pix * cin)


def _cog_encoder_params(cfg) -> tuple[int, int]:
    ch, layers, lat = _channels(cfg)
    t = Trace()
    t.conv("conv_in", 1, cfg.get("in_channels", 3), ch[0], 1, 1, k=3, kt=3)
    prev = ch[0]
    for i, c in enumerate(ch):
        for j in range(layers):
            _cog_resnet(t, "r", 1, 1, prev if j == 0 else c, c, None)
        if i < len(ch) - 1:
            t.conv("down", 1, c, c, 4, 1)
        prev = c
    for j in range(2):
        _cog_resnet(t, "mid", 1, 1, ch[-1], ch[-1], None)
    t.group_norm("norm_out", 1, ch[-1], 1)
    t.conv("conv_out", 1, ch[-1], 2 * lat, 1, 1, k=3, kt=3)
    return t.params, t.tensors


def autoencoder_cogvideox(t: Trace, cfg, clips: int, latent_frames: int, h: int, w: int) -> None:
    """AutoencoderKLCogVideoX.decode: the decoder runs over the latent frames two at a time
    (num_latent_frames_batch_size = 2; the first batch takes the odd one out too) with a cache of each causal
    conv's last frames. The traced ops are those of all frames (time); the activation peak is that of one frame
    batch (at most 3 latent frames) plus the decoded frames kept for the final cat."""
    ch, layers, lat = _channels(cfg)
    t.weights_only(*_cog_encoder_params(cfg), runs=False)
    if cfg.get("use_quant_conv", False):
        t.weights_only(4 * lat * lat + 2 * lat, 2, runs=False)
    _cog_decoder(t, cfg, clips, latent_frames, h, w)
    first = min(latent_frames, 2 + latent_frames % 2)
    if first < latent_frames:
        peak = Trace(act_b=t.act_b, w_b=t.w_b, attn_impl=t.attn_impl)
        _cog_decoder(peak, cfg, clips, first, h, w)
        out_frames = 1 + (latent_frames - 1) * int(cfg.get("temporal_compression_ratio", 4))
        kept = clips * out_frames * h * w * 64 * cfg.get("out_channels", 3) * t.act_b
        t.peak, t.seq_peak = peak.peak + kept, peak.seq_peak + kept
        t.peak_op = peak.peak_op


def _cog_decoder(t: Trace, cfg, clips: int, latent_frames: int, h: int, w: int) -> None:
    ch, layers, lat = _channels(cfg)
    if cfg.get("use_post_quant_conv", False):
        t.conv("post_quant_conv", clips * latent_frames, lat, lat, h * w, h * w, k=1)
    levels = {2: 1, 4: 2, 8: 3}.get(int(cfg.get("temporal_compression_ratio", 4)), 2)
    rch = ch[::-1]
    pix, frames = h * w, latent_frames
    n = clips * frames
    t.conv("decoder.conv_in", n, lat, rch[0], pix, pix, k=3, kt=3)
    for j in range(2):
        _cog_resnet(t, f"decoder.mid_block.resnets.{j}", n, pix, rch[0], rch[0], lat, clips)
    prev = rch[0]
    for i, c in enumerate(rch):
        n = clips * frames
        for j in range(layers + 1):
            _cog_resnet(t, f"decoder.up_blocks.{i}.resnets.{j}", n, pix, prev if j == 0 else c, c, lat, clips)
        if i < len(rch) - 1:
            if i < levels:
                frames = 1 + 2 * (frames - 1) if frames > 1 else 1  # compress_time: the first frame is kept apart
            t.ew(f"decoder.up_blocks.{i}.interpolate", clips * frames * pix * 4 * c, rw=1.25)
            pix *= 4
            t.conv(f"decoder.up_blocks.{i}.upsamplers.0.conv", clips * frames, c, c, pix, pix)
        prev = c
    n = clips * frames
    _cog_norm(t, "decoder.norm_out", n, pix, ch[0], lat, clips)
    t.ew("decoder.conv_act", n * pix * ch[0])
    t.conv("decoder.conv_out", n, ch[0], cfg.get("out_channels", 3), pix, pix, k=3, kt=3)
