"""The transformer denoisers, walked as diffusers runs them: SD3Transformer2DModel (MMDiT, SD3/SD3.5;
models/transformers/transformer_sd3.py, attention.py JointTransformerBlock), FluxTransformer2DModel
(transformer_flux.py: double-stream then single-stream blocks) and CogVideoXTransformer3DModel
(cogvideox_transformer_3d.py).

Tokens: SD3 patchifies the latent (p x p patches of the 8x-downsampled image); FLUX packs 2x2 latent pixels into
one token before the transformer (in_channels 64 = 16 x 4, patch_size 1); CogVideoX patchifies every latent frame.
All three run joint attention over the image tokens and the text tokens together; adaLN modulations come from the
timestep (and pooled text) embedding, one linear per block (rows = batch). Applying them (x * (1 + scale) + shift,
gate * out + residual) broadcasts a (batch, 1, dim) row over the tokens: TensorIterator's non-vectorized kernels
(path "nonvec", priced in time.py; SD3.5-medium's H200 kernel table: 17.8 ms of them in a 79 ms forward,
research/results/2026-12-02-h200-c/diffusion.md).
"""

from __future__ import annotations

from gpuscope.estimate.diffusion import blocks as b
from gpuscope.estimate.diffusion.trace import Trace

RMS_KERNELS = 6  # diffusers RMSNorm in eager mode: to(fp32), pow, mean, rsqrt(+eps), mul, mul(weight) and cast


def _modulated_norm(t: Trace, name: str, n: int, rows: int, dim: int, temb: int, chunks: int,
                    affine: bool = False) -> None:
    """AdaLayerNormZero(-X/-Single/Continuous): SiLU(temb), a Linear to chunks x dim, LayerNorm, x*(1+s)+shift."""
    t.ew(f"{name}.silu", n * temb)
    t.linear(f"{name}.linear", n, temb, chunks * dim)
    t.norm(f"{name}.norm", rows * dim, dim, affine=affine)
    t.ew(f"{name}.modulate", rows * dim, rw=3, kernels=2, path="nonvec")


def _qk_norm(t: Trace, name: str, rows: int, heads: int, head_dim: int, kind: str | None) -> None:
    if kind == "rms_norm":
        t.norm(name, rows * heads * head_dim, head_dim, params_per_channel=1, kernels=RMS_KERNELS)
    elif kind == "layer_norm":
        t.norm(name, rows * heads * head_dim, head_dim)


def _joint_attention(t: Trace, name: str, n: int, li: int, lc: int, dim: int, heads: int, head_dim: int,
                     qk_norm: str | None, ctx_out: bool, rope: bool) -> None:
    """Attention with added_kv_proj_dim (JointAttnProcessor2_0 / FluxAttnProcessor): q/k/v of the image and of
    the context, per-head q/k norms, cat, (rotary), one SDPA over li + lc tokens, split, to_out and to_add_out."""
    inner = heads * head_dim
    for stream, rows, pre in (("", n * li, "to_"), ("add_", n * lc, "add_")):
        for p in ("q", "k", "v"):
            t.linear(f"{name}.{pre}{p}" + ("_proj" if stream else ""), rows, dim, inner)
        for p in ("q", "k"):
            _qk_norm(t, f"{name}.norm_{'added_' if stream else ''}{p}", rows, heads, head_dim, qk_norm)
    L = li + lc
    t.ew(f"{name}.cat_qkv", 3 * n * L * inner, kernels=3)
    if rope:
        t.ew(f"{name}.rotary", 2 * n * L * inner, rw=4, kernels=8)
    t.attention(f"{name}.core", n, heads, L, L, head_dim)
    t.ew(f"{name}.merge_split", n * L * inner, kernels=2)
    t.linear(f"{name}.to_out.0", n * li, inner, dim)
    if ctx_out:
        t.linear(f"{name}.to_add_out", n * lc, inner, dim)


def _gated_ff(t: Trace, name: str, rows: int, dim: int) -> None:
    """norm2 + modulation, GELU(tanh) FeedForward (4 x dim), the gate multiply and the residual add."""
    t.norm(f"{name}.norm", rows * dim, dim, affine=False)
    t.ew(f"{name}.modulate", rows * dim, rw=3, kernels=2, path="nonvec")
    b.feed_forward(t, f"{name}.ff", rows, dim, act="gelu")
    t.ew(f"{name}.gate_residual", rows * dim, rw=3, kernels=2, path="nonvec")


def _joint_block(t: Trace, name: str, n: int, li: int, lc: int, dim: int, heads: int, hd: int, qk: str | None,
                 dual: bool, last: bool, rope: bool) -> None:
    """JointTransformerBlock (SD3) / FluxTransformerBlock: adaLN-Zero norms of both streams, joint attention,
    gated residuals, (SD3.5's second, image-only attention), gated feed-forwards. Alive through the image
    feed-forward, as the forward's variables keep them: both streams' block inputs (the caller's references), the
    current image stream, its norm output, the gated attention output(s), the second norm output (dual), and the
    context's norm and attention output."""
    img, ctx = n * li * dim, n * lc * dim
    t.hold(img + ctx)
    _modulated_norm(t, f"{name}.norm1", n, n * li, dim, dim, 9 if dual else 6)
    t.hold(img * (2 if dual else 1))  # norm_hidden_states (and norm_hidden_states2)
    _modulated_norm(t, f"{name}.norm1_context", n, n * lc, dim, dim, 2 if last else 6)
    t.hold(ctx)
    _joint_attention(t, f"{name}.attn", n, li, lc, dim, heads, hd, qk, not last, rope=rope)
    t.hold(img + ctx)  # attn_output, context_attn_output
    t.ew(f"{name}.attn_gate_residual", img, rw=3, kernels=2, path="nonvec")
    t.hold(img)  # the image stream after the residual add
    if dual:
        b.attention(t, f"{name}.attn2", n, li, dim, heads, hd, qkv_bias=True)
        _qk_norm(t, f"{name}.attn2.norm_q", n * li, heads, hd, qk)
        _qk_norm(t, f"{name}.attn2.norm_k", n * li, heads, hd, qk)
        t.hold(img)  # attn_output2
        t.ew(f"{name}.attn2_gate_residual", img, rw=3, kernels=2, path="nonvec")
    _gated_ff(t, f"{name}.ff_block", n * li, dim)
    if not last:
        t.ew(f"{name}.context_attn_gate_residual", ctx, rw=3, kernels=2, path="nonvec")
        _gated_ff(t, f"{name}.ff_context_block", n * lc, dim)
    t.release(img * (4 + (2 if dual else 0)) + 3 * ctx)


def sd3(t: Trace, cfg, n: int, h: int, w: int, ctx_len: int) -> None:
    """SD3Transformer2DModel over ``n`` latents of h x w with ``ctx_len`` context tokens (77 CLIP + T5's)."""
    p = cfg.get("patch_size", 2)
    heads, hd = cfg.get("num_attention_heads", 18), cfg.get("attention_head_dim", 64)
    dim = heads * hd
    li = (h // p) * (w // p)
    dual = set(cfg.get("dual_attention_layers") or ())
    qk = cfg.get("qk_norm")
    t.conv("pos_embed.proj", n, cfg.get("in_channels", 16), dim, h * w, li, k=p)
    # PatchEmbed's sin-cos table, a persistent buffer of pos_embed_max_size^2 rows (cast with the module; 0.45 GB
    # for SD3.5's 384 at 1,536 wide in fp16: the H200 run's memory after load less the parameters,
    # research/results/2026-12-02-h200-c/diffusion.md); each forward crops it (the add's copy)
    side = cfg.get("pos_embed_max_size") or cfg.get("sample_size", 128) // p
    t.buffer_elems += side * side * dim
    t.ew("pos_embed.add", n * li * dim, rw=3)
    b.timesteps(t, "time_proj", n, 256)
    b.timestep_embedding(t, "time_text_embed.timestep_embedder", n, 256, dim)
    b.timestep_embedding(t, "time_text_embed.text_embedder", n, cfg.get("pooled_projection_dim", 2048), dim)
    t.ew("time_text_embed.add", n * dim, rw=3)
    cdim = cfg.get("caption_projection_dim", 1152)
    t.linear("context_embedder", n * ctx_len, cfg.get("joint_attention_dim", 4096), cdim)
    layers = cfg.get("num_layers", 18)
    for i in range(layers):
        _joint_block(t, f"transformer_blocks.{i}", n, li, ctx_len, dim, heads, hd, qk, dual=i in dual,
                     last=i == layers - 1, rope=False)
    _modulated_norm(t, "norm_out", n, n * li, dim, dim, 2)
    t.linear("proj_out", n * li, dim, p * p * cfg.get("out_channels", 16))
    t.ew("unpatchify", n * li * p * p * cfg.get("out_channels", 16))


def flux(t: Trace, cfg, n: int, h: int, w: int, ctx_len: int) -> None:
    """FluxTransformer2DModel over ``n`` latents of h x w (packed 2x2 into h/2 x w/2 tokens), ``ctx_len`` T5
    tokens."""
    heads, hd = cfg.get("num_attention_heads", 24), cfg.get("attention_head_dim", 128)
    dim = heads * hd
    li = (h // 2) * (w // 2)
    cin = cfg.get("in_channels", 64)
    b.timesteps(t, "time_proj", n, 256)
    b.timestep_embedding(t, "time_text_embed.timestep_embedder", n, 256, dim)
    if cfg.get("guidance_embeds", False):
        b.timesteps(t, "guidance_proj", n, 256)
        b.timestep_embedding(t, "time_text_embed.guidance_embedder", n, 256, dim)
    b.timestep_embedding(t, "time_text_embed.text_embedder", n, cfg.get("pooled_projection_dim", 768), dim)
    t.linear("context_embedder", n * ctx_len, cfg.get("joint_attention_dim", 4096), dim)
    t.linear("x_embedder", n * li, cin, dim)
    t.ew("pos_embed", (li + ctx_len) * hd, kernels=12)
    L = li + ctx_len
    for i in range(cfg.get("num_layers", 19)):
        _joint_block(t, f"transformer_blocks.{i}", n, li, ctx_len, dim, heads, hd, "rms_norm", dual=False,
                     last=False, rope=True)
    t.ew("cat_streams", n * L * dim)
    for i in range(cfg.get("num_single_layers", 38)):
        _flux_single(t, f"single_transformer_blocks.{i}", n, L, dim, heads, hd)
    _modulated_norm(t, "norm_out", n, n * li, dim, dim, 2)
    t.linear("proj_out", n * li, dim, cfg.get("patch_size", 1) ** 2 * (cfg.get("out_channels") or cin))


def _flux_single(t: Trace, name: str, n: int, L: int, dim: int, heads: int, hd: int) -> None:
    """FluxSingleTransformerBlock: AdaLayerNormZeroSingle, proj_mlp (4 x dim) + GELU(tanh) beside a pre_only
    attention (q/k/v, RMS q/k norms, rotary, SDPA), cat, proj_out (5 x dim -> dim), gate, residual."""
    rows = n * L
    t.hold(rows * dim)  # residual (the caller's reference)
    _modulated_norm(t, f"{name}.norm", n, rows, dim, dim, 3)
    t.hold(rows * dim)  # norm_hidden_states, read by both branches
    t.linear(f"{name}.proj_mlp", rows, dim, 4 * dim)
    t.ew(f"{name}.act_mlp", rows * 4 * dim)
    t.hold(rows * 4 * dim)
    t.linear(f"{name}.attn.to_q", rows, dim, dim)
    t.hold(rows * dim)
    t.linear(f"{name}.attn.to_k", rows, dim, dim)
    t.hold(rows * dim)
    t.linear(f"{name}.attn.to_v", rows, dim, dim)
    t.release(2 * rows * dim)
    for p in ("q", "k"):
        _qk_norm(t, f"{name}.attn.norm_{p}", rows, heads, hd, "rms_norm")
    t.ew(f"{name}.attn.rotary", 2 * rows * dim, rw=4, kernels=8)
    t.attention(f"{name}.attn.core", n, heads, L, L, hd)
    t.ew(f"{name}.attn.merge", rows * dim)
    t.ew(f"{name}.cat", rows * 5 * dim, live=rows * 6 * dim)  # attn_output + the cat (mlp is held)
    t.release(rows * 5 * dim)
    t.linear(f"{name}.proj_out", rows, 5 * dim, dim)
    t.ew(f"{name}.gate_residual", rows * dim, rw=3, kernels=2, path="nonvec")
    t.release(rows * dim)


def cogvideox(t: Trace, cfg, n: int, latent_frames: int, h: int, w: int, ctx_len: int) -> None:
    """CogVideoXTransformer3DModel over ``n`` clips of ``latent_frames`` latents of h x w and ``ctx_len`` text
    tokens (max_text_seq_length)."""
    p = cfg.get("patch_size", 2)
    heads, hd = cfg.get("num_attention_heads", 30), cfg.get("attention_head_dim", 64)
    dim, temb = heads * hd, cfg.get("time_embed_dim", 512)
    li = latent_frames * (h // p) * (w // p)
    L = li + ctx_len
    t.conv("patch_embed.proj", n * latent_frames, cfg.get("in_channels", 16), dim, h * w, li // latent_frames, k=p)
    t.linear("patch_embed.text_proj", n * ctx_len, cfg.get("text_embed_dim", 4096), dim)
    t.ew("patch_embed.cat", n * L * dim)
    b.timesteps(t, "time_proj", n, dim)
    b.timestep_embedding(t, "time_embedding", n, dim, temb)
    rope = bool(cfg.get("use_rotary_positional_embeddings", False))
    if not rope:
        t.ew("pos_embedding.add", n * li * dim, rw=3)
    for i in range(cfg.get("num_layers", 30)):
        name = f"transformer_blocks.{i}"
        t.hold(n * L * dim)
        for norm in ("norm1", "norm2"):
            t.ew(f"{name}.{norm}.silu", n * temb)
            t.linear(f"{name}.{norm}.linear", n, temb, 6 * dim)
            t.norm(f"{name}.{norm}.norm", n * L * dim, dim)
            t.ew(f"{name}.{norm}.modulate", n * L * dim, rw=3, kernels=4, path="nonvec")
            if norm == "norm1":
                b.attention(t, f"{name}.attn1", n, L, dim, heads, hd, qkv_bias=cfg.get("attention_bias", True))
                _qk_norm(t, f"{name}.attn1.norm_q", n * L, heads, hd, "layer_norm")
                _qk_norm(t, f"{name}.attn1.norm_k", n * L, heads, hd, "layer_norm")
                if rope:
                    t.ew(f"{name}.attn1.rotary", 2 * n * li * dim, rw=4, kernels=8)
            else:
                b.feed_forward(t, f"{name}.ff", n * L, dim, act="gelu")
            t.ew(f"{name}.{norm}.gate_residual", n * L * dim, rw=3, kernels=4, path="nonvec")
        t.release(n * L * dim)
    t.norm("norm_final", n * L * dim, dim)
    t.ew("norm_out.silu", n * temb)
    t.linear("norm_out.linear", n, temb, 2 * dim)
    t.norm("norm_out.norm", n * li * dim, dim)
    t.ew("norm_out.modulate", n * li * dim, rw=3, kernels=2, path="nonvec")
    t.linear("proj_out", n * li, dim, p * p * cfg.get("out_channels", 16))
    t.ew("unpatchify", n * li * p * p * cfg.get("out_channels", 16))
