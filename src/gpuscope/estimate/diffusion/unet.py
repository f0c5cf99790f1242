"""The UNet denoisers, walked as diffusers runs them: UNet2DConditionModel (SD 1.x/2.x, SDXL;
models/unets/unet_2d_condition.py, unet_2d_blocks.py) and UNetSpatioTemporalConditionModel (Stable Video Diffusion;
models/unets/unet_spatio_temporal_condition.py, unet_3d_blocks.py).

Channel bookkeeping follows the constructors: down block i has block_out_channels[i] outputs, its resnets take the
previous block's channels; every down resnet (and every downsampler) pushes a skip; up block i (reversed channels)
has layers_per_block + 1 resnets, resnet j concatenates one skip (the down path's channels in reverse) onto its
input. A block's heads and transformer depth come from ``num_attention_heads`` (or the legacy
``attention_head_dim``, which the SD 1.x configs use for the head count) and ``transformer_layers_per_block``.
"""

from __future__ import annotations

from gpuscope.estimate.diffusion import blocks as b
from gpuscope.estimate.diffusion.trace import Trace


def per_block(value, n: int) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value] * n


def _geometry(cfg) -> dict:
    ch = list(cfg.get("block_out_channels", [320, 640, 1280, 1280]))
    nb = len(ch)
    heads = cfg.get("num_attention_heads") or cfg.get("attention_head_dim", 8)
    return {"ch": ch, "nb": nb, "heads": per_block(heads, nb),
            "depth": per_block(cfg.get("transformer_layers_per_block", 1), nb),
            "layers": cfg.get("layers_per_block", 2), "down": cfg.get("down_block_types"),
            "up": cfg.get("up_block_types"), "ctx": cfg.get("cross_attention_dim", 1280)}


def _skip_channels(g: dict) -> list[int]:
    skips = [g["ch"][0]]  # conv_in's output
    for i, c in enumerate(g["ch"]):
        skips += [c] * g["layers"]
        if i < g["nb"] - 1:
            skips.append(c)  # the downsampler's output
    return skips


def unet2d(t: Trace, cfg, n: int, h: int, w: int, ctx_len: int) -> None:
    """UNet2DConditionModel over ``n`` latents of h x w with a ``ctx_len``-token text context."""
    g = _geometry(cfg)
    ch, nb, layers = g["ch"], g["nb"], g["layers"]
    temb = cfg.get("time_embedding_dim") or ch[0] * 4
    linear = bool(cfg.get("use_linear_projection", False))
    b.timesteps(t, "time_proj", n, ch[0])
    b.timestep_embedding(t, "time_embedding", n, ch[0], temb)
    if cfg.get("addition_embed_type") == "text_time":  # SDXL: six micro-conditioning ids + the pooled text
        b.timesteps(t, "add_time_proj", n * 6, cfg.get("addition_time_embed_dim", 256))
        b.timestep_embedding(t, "add_embedding", n, cfg["projection_class_embeddings_input_dim"], temb)
        t.ew("add_emb_sum", n * temb, rw=3)
    pix = h * w
    cin = cfg.get("in_channels", 4)
    t.conv("conv_in", n, cin, ch[0], pix, pix)
    skips = []
    t.hold(n * pix * ch[0])
    skips.append(n * pix * ch[0])
    prev = ch[0]
    for i, c in enumerate(ch):
        cross = "CrossAttn" in g["down"][i]
        for j in range(layers):
            b.resnet2d(t, f"down_blocks.{i}.resnets.{j}", n, pix, prev if j == 0 else c, c, temb, input_held=True)
            if cross:
                b.transformer2d(t, f"down_blocks.{i}.attentions.{j}", n, pix, c, g["heads"][i], g["depth"][i],
                                g["ctx"], ctx_len, linear)
            t.hold(n * pix * c)
            skips.append(n * pix * c)
        if i < nb - 1:
            b.downsample(t, f"down_blocks.{i}.downsamplers.0", n, pix, c)
            pix = max(1, pix // 4)
            t.hold(n * pix * c)
            skips.append(n * pix * c)
        prev = c
    _mid2d(t, cfg, g, n, pix, temb, ctx_len, linear)
    _up2d(t, cfg, g, n, pix, temb, ctx_len, linear, skips)
    t.group_norm("conv_norm_out", n, ch[0], h * w)
    t.ew("conv_act", n * h * w * ch[0])
    t.conv("conv_out", n, ch[0], cfg.get("out_channels", 4), h * w, h * w)


def _mid2d(t: Trace, cfg, g: dict, n: int, pix: int, temb: int, ctx_len: int, linear: bool) -> None:
    c = g["ch"][-1]
    if cfg.get("mid_block_type", "UNetMidBlock2DCrossAttn") is None:
        return
    depth = g["depth"][-1]
    b.resnet2d(t, "mid_block.resnets.0", n, pix, c, c, temb, input_held=True)  # its input is the last skip
    b.transformer2d(t, "mid_block.attentions.0", n, pix, c, g["heads"][-1], depth, g["ctx"], ctx_len, linear)
    b.resnet2d(t, "mid_block.resnets.1", n, pix, c, c, temb)


def _up2d(t: Trace, cfg, g: dict, n: int, pix: int, temb: int, ctx_len: int, linear: bool, skips: list) -> None:
    ch, nb, layers = g["ch"], g["nb"], g["layers"]
    rch = ch[::-1]
    rheads, rdepth = g["heads"][::-1], cfg.get("reverse_transformer_layers_per_block") or g["depth"][::-1]
    skip_ch = _skip_channels(g)
    prev = rch[0]
    for i, c in enumerate(rch):
        cross = "CrossAttn" in g["up"][i]
        t.hold(n * pix * prev)
        held = n * pix * prev + sum(skips[-(layers + 1):])
        del skips[-(layers + 1):]
        for j in range(layers + 1):
            cin = (prev if j == 0 else c) + skip_ch.pop()
            t.ew(f"up_blocks.{i}.cat.{j}", n * pix * cin, rw=2)
            b.resnet2d(t, f"up_blocks.{i}.resnets.{j}", n, pix, cin, c, temb)
            if cross:
                b.transformer2d(t, f"up_blocks.{i}.attentions.{j}", n, pix, c, rheads[i],
                                per_block(rdepth, nb)[i], g["ctx"], ctx_len, linear)
        if i < nb - 1:
            b.upsample(t, f"up_blocks.{i}.upsamplers.0", n, pix, c)
            pix *= 4
        t.release(held)  # see UP_BLOCK_REFERENCES
        prev = c


UP_BLOCK_REFERENCES = """While an up block runs, UNet2DConditionModel.forward still references its input (``sample``)
and all of the block's skips (``res_samples``, the slice of down_block_res_samples it passes in), so none of them
is freed before the block returns, though the block itself consumes them one by one."""


# ---- Stable Video Diffusion ----------------------------------------------------------------------------------

def _temporal_transformer(t: Trace, name: str, batch: int, frames: int, pix: int, ch: int, heads: int,
                          ctx_dim: int, ctx_len: int) -> None:
    """TransformerSpatioTemporalModel: GroupNorm, proj_in (Linear), per layer a BasicTransformerBlock over each
    frame's pixels and a TemporalBasicTransformerBlock over each pixel's frames (ff_in, self-attention,
    cross-attention to the first frame's context broadcast to every pixel, ff), an AlphaBlender between them;
    time_pos_embed (a TimestepEmbedding of the frame index); proj_out and the residual add. Alive while the temporal
    block runs: the spatial block's output (the mixer's other input), the mixed input, and inside the block its
    permuted copy (``residual``), the running stream, the last attention output and norm."""
    n = batch * frames
    rows = n * pix
    head_dim = ch // heads
    ctx_rows = batch * pix * ctx_len * ctx_dim  # time_context: reshape of a broadcast, a copy per pixel
    t.hold(rows * ch + ctx_rows)
    t.ew(f"{name}.time_context", ctx_rows, path="nonvec")
    t.group_norm(f"{name}.norm", n, ch, pix)
    t.ew(f"{name}.to_tokens", rows * ch, path="nonvec")
    t.linear(f"{name}.proj_in", rows, ch, ch)
    b.timesteps(t, f"{name}.time_proj", n, ch)
    b.timestep_embedding(t, f"{name}.time_pos_embed", n, ch, ch * 4, out_dim=ch)
    b.basic_transformer_block(t, f"{name}.transformer_blocks.0", n, pix, ch, heads, head_dim, ctx_dim, ctx_len)
    t.hold(rows * ch)  # the spatial output
    t.ew(f"{name}.add_time_pos", rows * ch, path="nonvec")  # + emb, one row per frame: a broadcast
    t.hold(rows * ch)  # hidden_states_mix
    tb = f"{name}.temporal_transformer_blocks.0"
    t.ew(f"{tb}.to_frames", rows * ch, path="nonvec")
    t.hold(2 * rows * ch)  # residual (the permuted copy) and the running stream
    t.norm(f"{tb}.norm_in", rows * ch, ch)
    b.feed_forward(t, f"{tb}.ff_in", rows, ch)
    t.ew(f"{tb}.ff_in_residual", rows * ch, rw=3)
    t.hold(2 * rows * ch)  # norm_hidden_states and attn_output, referenced until rebound
    t.norm(f"{tb}.norm1", rows * ch, ch)
    b.attention(t, f"{tb}.attn1", batch * pix, frames, ch, heads, head_dim)
    t.ew(f"{tb}.add1", rows * ch, rw=3)
    t.norm(f"{tb}.norm2", rows * ch, ch)
    b.attention(t, f"{tb}.attn2", batch * pix, frames, ch, heads, head_dim, kv_dim=ctx_dim, lk=ctx_len)
    t.ew(f"{tb}.add2", rows * ch, rw=3)
    t.norm(f"{tb}.norm3", rows * ch, ch)
    b.feed_forward(t, f"{tb}.ff", rows, ch)
    t.ew(f"{tb}.add3", rows * ch, rw=3)
    t.release(4 * rows * ch)
    t.ew(f"{tb}.to_pixels", rows * ch, path="nonvec")
    t.weights_only(1)  # time_mixer.mix_factor
    b.time_mixer(t, f"{name}.time_mixer", rows * ch)
    t.release(2 * rows * ch)
    t.linear(f"{name}.proj_out", rows, ch, ch)
    t.ew(f"{name}.to_image", rows * ch, path="nonvec")
    t.ew(f"{name}.residual", rows * ch, rw=3)
    t.release(rows * ch + ctx_rows)


def unet_svd(t: Trace, cfg, batch: int, frames: int, h: int, w: int, ctx_len: int = 1) -> None:
    """UNetSpatioTemporalConditionModel over ``batch`` clips of ``frames`` latents of h x w; the context is the
    CLIP image embedding (one token)."""
    g = _geometry(cfg)
    ch, nb, layers = g["ch"], g["nb"], g["layers"]
    n = batch * frames
    temb = ch[0] * 4
    b.timesteps(t, "time_proj", batch, ch[0])
    b.timestep_embedding(t, "time_embedding", batch, ch[0], temb)
    b.timesteps(t, "add_time_proj", batch * 3, cfg.get("addition_time_embed_dim", 256))
    b.timestep_embedding(t, "add_embedding", batch, cfg["projection_class_embeddings_input_dim"], temb)
    t.ew("emb_repeat", n * temb, kernels=3)
    pix = h * w
    t.conv("conv_in", n, cfg.get("in_channels", 8), ch[0], pix, pix)
    skips = [n * pix * ch[0]]
    t.hold(skips[-1])
    prev = ch[0]
    for i, c in enumerate(ch):
        cross = "CrossAttn" in g["down"][i]
        for j in range(layers):
            b.spatio_temporal_resnet(t, f"down_blocks.{i}.resnets.{j}", n, pix, prev if j == 0 else c, c, temb,
                                     input_held=True, clips=batch)  # every down resnet's input is a skip, held already
            if cross:
                _temporal_transformer(t, f"down_blocks.{i}.attentions.{j}", batch, frames, pix, c, g["heads"][i],
                                      g["ctx"], ctx_len)
            skips.append(n * pix * c)
            t.hold(skips[-1])
        if i < nb - 1:
            b.downsample(t, f"down_blocks.{i}.downsamplers.0", n, pix, c)
            pix = max(1, pix // 4)
            skips.append(n * pix * c)
            t.hold(skips[-1])
        prev = c
    c = ch[-1]
    b.spatio_temporal_resnet(t, "mid_block.resnets.0", n, pix, c, c, temb, input_held=True, clips=batch)
    _temporal_transformer(t, "mid_block.attentions.0", batch, frames, pix, c, g["heads"][-1], g["ctx"], ctx_len)
    b.spatio_temporal_resnet(t, "mid_block.resnets.1", n, pix, c, c, temb, clips=batch)
    _up_svd(t, g, batch, frames, pix, temb, ctx_len, skips)
    t.group_norm("conv_norm_out", n, ch[0], h * w)
    t.ew("conv_act", n * h * w * ch[0])
    t.conv("conv_out", n, ch[0], cfg.get("out_channels", 4), h * w, h * w)


def _up_svd(t: Trace, g: dict, batch: int, frames: int, pix: int, temb: int, ctx_len: int, skips: list) -> None:
    """The spatio-temporal UNet's up path (UpBlockSpatioTemporal / CrossAttnUpBlockSpatioTemporal)."""
    ch, nb, layers = g["ch"], g["nb"], g["layers"]
    n = batch * frames
    skip_ch = _skip_channels(g)
    rch, rheads = ch[::-1], g["heads"][::-1]
    prev = rch[0]
    for i, c in enumerate(rch):
        cross = "CrossAttn" in g["up"][i]
        t.hold(n * pix * prev)
        held = n * pix * prev + sum(skips[-(layers + 1):])  # UP_BLOCK_REFERENCES
        del skips[-(layers + 1):]
        for j in range(layers + 1):
            cin = (prev if j == 0 else c) + skip_ch.pop()
            t.ew(f"up_blocks.{i}.cat.{j}", n * pix * cin)
            b.spatio_temporal_resnet(t, f"up_blocks.{i}.resnets.{j}", n, pix, cin, c, temb, clips=batch)
            if cross:
                _temporal_transformer(t, f"up_blocks.{i}.attentions.{j}", batch, frames, pix, c, rheads[i],
                                      g["ctx"], ctx_len)
        if i < nb - 1:
            b.upsample(t, f"up_blocks.{i}.upsamplers.0", n, pix, c)
            pix *= 4
        t.release(held)
        prev = c
