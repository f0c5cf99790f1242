"""The diffusers building blocks the UNets and VAEs share, walked as their ``forward`` runs (diffusers 0.30-0.42:
models/resnet.py ResnetBlock2D, TemporalResnetBlock, SpatioTemporalResBlock; models/attention.py
BasicTransformerBlock, FeedForward, GEGLU; models/attention_processor.py Attention + AttnProcessor2_0;
models/transformers/transformer_2d.py Transformer2DModel; models/embeddings.py TimestepEmbedding, Timesteps;
models/downsampling.py, upsampling.py).

``n``: images in the tensor (batch, or batch x frames for video); ``pix``: pixels per image at this level.
Kernel counts follow the eager forward (one kernel per aten op that touches memory; views are free).
"""

from __future__ import annotations

from gpuscope.estimate.diffusion.trace import Trace


def timesteps(t: Trace, name: str, n: int, dim: int) -> None:
    """Timesteps / get_timestep_embedding: arange, exp, outer product, sin, cos, cat (no parameters)."""
    t.ew(name, n * dim, kernels=8)


def timestep_embedding(t: Trace, name: str, n: int, fin: int, fout: int, out_dim: int | None = None) -> None:
    """TimestepEmbedding: linear_1, SiLU, linear_2 (out_dim: linear_2's output, default fout)."""
    t.linear(f"{name}.linear_1", n, fin, fout)
    t.ew(f"{name}.act", n * fout)
    t.linear(f"{name}.linear_2", n, fout, out_dim or fout)


def resnet2d(t: Trace, name: str, n: int, pix: int, cin: int, cout: int, temb: int | None, temb_rows: int | None = None,
             input_held: bool = False, cl_input: bool = False) -> None:
    """ResnetBlock2D: norm1, SiLU, conv1, (+ time_emb_proj(SiLU(temb))), norm2, SiLU, conv2, shortcut, add, /scale.
    The input stays alive (held) until the residual add; ``input_held``: a caller already holds it (the same tensor
    is counted once). ``cl_input``: the input is channels-last (a VAE's stream after its attention, vae.py):
    GroupNorm copies it to NCHW first (its CUDA kernel takes ``input.contiguous()``), the shortcut convolution takes
    it as it is, and the residual add mixes the two layouts (non-vectorized); the output stays channels-last."""
    own = 0 if input_held else n * pix * cin
    t.hold(own)
    if cl_input:
        t.ew(f"{name}.norm1_contiguous", n * pix * cin, live=2 * n * pix * cin, path="transpose")
    t.group_norm(f"{name}.norm1", n, cin, pix)
    t.ew(f"{name}.act1", n * pix * cin)
    t.conv(f"{name}.conv1", n, cin, cout, pix, pix)
    if temb:
        rows = temb_rows or n
        t.ew(f"{name}.temb_act", rows * temb)
        t.linear(f"{name}.time_emb_proj", rows, temb, cout)
        t.ew(f"{name}.temb_add", n * pix * cout, path="nonvec")  # h + temb[:, :, None, None]: a broadcast
    t.group_norm(f"{name}.norm2", n, cout, pix)
    t.ew(f"{name}.act2", n * pix * cout)
    t.conv(f"{name}.conv2", n, cout, cout, pix, pix)
    t.hold(n * pix * cout)  # conv2's output
    if cin != cout:
        t.conv(f"{name}.conv_shortcut", n, cin, cout, pix, pix, k=1, nhwc_in=cl_input)
        t.hold(n * pix * cout)
    # (input + h) / output_scale_factor: the sum and the quotient are both alive before the quotient returns
    if cl_input:  # the add mixes layouts; the quotient is dense in its own (channels-last) layout
        t.ew(f"{name}.residual", n * pix * cout, rw=3, live=2 * n * pix * cout, path="nonvec")
        t.ew(f"{name}.rescale", n * pix * cout, live=2 * n * pix * cout)
    else:
        t.ew(f"{name}.residual", n * pix * cout, rw=3, kernels=2, live=2 * n * pix * cout)
    t.release(n * pix * cout * (2 if cin != cout else 1))
    t.release(own)


def temporal_resnet(t: Trace, name: str, n: int, pix: int, ch: int, temb: int | None, clips: int | None = None
                    ) -> None:
    """TemporalResnetBlock: like ResnetBlock2D with (3, 1, 1) Conv3d over frames, on a permuted (b, c, f, h, w)
    tensor; in == out channels (no shortcut). Its GroupNorms see ``clips`` images of frames x pixels each (one
    moments row per (clip, group)); norm1's input is the permuted view, which GroupNorm first makes contiguous
    (the caller's ``permute_in`` copy)."""
    clips = clips or n
    t.hold(n * pix * ch)
    t.group_norm(f"{name}.norm1", clips, ch, n * pix / clips)
    t.ew(f"{name}.act1", n * pix * ch)
    t.conv(f"{name}.conv1", n, ch, ch, pix, pix, k=1, kt=3)
    if temb:
        t.ew(f"{name}.temb_act", n * temb)
        t.linear(f"{name}.time_emb_proj", n, temb, ch)
        t.ew(f"{name}.temb_add", n * pix * ch, path="nonvec")
    t.group_norm(f"{name}.norm2", clips, ch, n * pix / clips)
    t.ew(f"{name}.act2", n * pix * ch)
    t.conv(f"{name}.conv2", n, ch, ch, pix, pix, k=1, kt=3)
    t.ew(f"{name}.residual", n * pix * ch, rw=3)
    t.release(n * pix * ch)


def spatio_temporal_resnet(t: Trace, name: str, n: int, pix: int, cin: int, cout: int, temb: int | None,
                           input_held: bool = False, clips: int | None = None) -> None:
    """SpatioTemporalResBlock: a ResnetBlock2D over every frame, a TemporalResnetBlock over the frames of each of
    ``clips`` clips, and an AlphaBlender (one learned mix factor) that mixes the two. The temporal block's first
    GroupNorm copies its permuted input (strided reads: the non-vectorized path); the mixer reads that permuted view
    and a per-frame alpha (non-vectorized too)."""
    resnet2d(t, f"{name}.spatial_res_block", n, pix, cin, cout, temb, input_held=input_held)
    t.ew(f"{name}.permute_in", n * pix * cout, path="nonvec")
    temporal_resnet(t, f"{name}.temporal_res_block", n, pix, cout, temb, clips)
    t.weights_only(1)  # time_mixer.mix_factor
    time_mixer(t, f"{name}.time_mixer", n * pix * cout)
    # permute_out is a view: the mixer's output takes its first operand's (the permuted view's) layout, so the
    # permute back to (b x f, c, h, w) is contiguous and reshape copies nothing


def time_mixer(t: Trace, name: str, elems: float) -> None:
    """AlphaBlender: alpha * x_spatial + (1 - alpha) * x_temporal with alpha one value per frame: four kernels
    (the alpha's own, tiny, counted as one; two broadcast multiplies, reading and writing each element; the add,
    two reads and a write): 7 elements moved per output element, on the non-vectorized path."""
    t.ew(name, elems, rw=7 / 4, kernels=4, live=4 * elems, path="nonvec")


def attention(t: Trace, name: str, n: int, lq: int, dim: int, heads: int, head_dim: int, kv_dim: int | None = None,
              lk: int | None = None, qkv_bias: bool = False, out_bias: bool = True, out_dim: int | None = None) -> None:
    """diffusers Attention with AttnProcessor2_0: to_q, to_k, to_v, the attention core, the head merge (a copy
    only after the math path's bmm), to_out[0], and the division by rescale_output_factor. ``kv_dim``: cross-attention's context width."""
    inner = heads * head_dim
    lk = lk or lq
    t.linear(f"{name}.to_q", n * lq, dim, inner, qkv_bias)
    t.hold(n * lq * inner)
    t.linear(f"{name}.to_k", n * lk, kv_dim or dim, inner, qkv_bias)
    t.hold(n * lk * inner)
    t.linear(f"{name}.to_v", n * lk, kv_dim or dim, inner, qkv_bias)
    t.release(n * (lq + lk) * inner)  # the core's live set counts q, k, v and its output
    t.attention(f"{name}.core", n, heads, lq, lk, head_dim)
    if t.attn_impl == "math":  # batch_to_head_dim copies bmm's output; SDPA's output is laid out (b, L, h, d)
        t.ew(f"{name}.merge_heads", n * lq * inner)  # already, so its transpose + reshape is a view
    t.linear(f"{name}.to_out", n * lq, inner, out_dim or dim, out_bias)
    t.ew(f"{name}.rescale", n * lq * (out_dim or dim))


def feed_forward(t: Trace, name: str, rows: int, dim: int, act: str = "geglu", mult: int = 4, inner: int | None = None,
                 dim_out: int | None = None, bias: bool = True) -> None:
    """FeedForward: GEGLU (proj to 2 x inner, chunk, gelu(gate) * x) or GELU(tanh) (proj, gelu), then the output
    Linear. The projection's output stays alive until the gating product is done."""
    inner = inner or dim * mult
    if act == "geglu":
        t.linear(f"{name}.proj", rows, dim, 2 * inner, bias)
        t.hold(rows * 2 * inner)
        # both read a strided half of the projection (chunk(2, dim=-1)): non-vectorized kernels (time.py)
        t.ew(f"{name}.gelu", rows * inner, path="geglu_gelu")
        t.ew(f"{name}.gate_mul", rows * inner, rw=3, live=2 * rows * inner, path="geglu_mul")
        t.release(rows * 2 * inner)
    else:
        t.linear(f"{name}.proj", rows, dim, inner, bias)
        t.ew(f"{name}.gelu", rows * inner)
    t.linear(f"{name}.out", rows, inner, dim_out or dim, bias)


def basic_transformer_block(t: Trace, name: str, n: int, tokens: int, dim: int, heads: int, head_dim: int,
                            ctx_dim: int, ctx_len: int) -> None:
    """BasicTransformerBlock (layer_norm): norm1, self-attention, add; norm2, cross-attention, add; norm3, GEGLU
    feed-forward, add."""
    rows = n * tokens
    t.hold(2 * rows * dim)  # the block's input (the caller's reference) and the residual stream after each add
    t.norm(f"{name}.norm1", rows * dim, dim)
    t.hold(rows * dim)  # norm_hidden_states, referenced until the next norm rebinds it
    attention(t, f"{name}.attn1", n, tokens, dim, heads, head_dim)
    t.ew(f"{name}.add1", rows * dim, rw=3)
    t.hold(rows * dim)  # attn_output, referenced until the next attention rebinds it
    t.norm(f"{name}.norm2", rows * dim, dim)
    attention(t, f"{name}.attn2", n, tokens, dim, heads, head_dim, kv_dim=ctx_dim, lk=ctx_len)
    t.ew(f"{name}.add2", rows * dim, rw=3)
    t.norm(f"{name}.norm3", rows * dim, dim)
    feed_forward(t, f"{name}.ff", rows, dim)
    t.ew(f"{name}.add3", rows * dim, rw=3)
    t.release(4 * rows * dim)


def transformer2d(t: Trace, name: str, n: int, pix: int, ch: int, heads: int, layers: int, ctx_dim: int,
                  ctx_len: int, linear_proj: bool) -> None:
    """Transformer2DModel (continuous input): GroupNorm, proj_in (1x1 conv or Linear) around the (b, c, h, w) ->
    (b, hw, c) permute, ``layers`` BasicTransformerBlocks, proj_out and the residual add."""
    head_dim = ch // heads
    t.hold(n * pix * ch)
    t.group_norm(f"{name}.norm", n, ch, pix)
    if linear_proj:
        t.ew(f"{name}.to_tokens", n * pix * ch, path="nonvec")
        t.linear(f"{name}.proj_in", n * pix, ch, ch)
    else:
        t.conv(f"{name}.proj_in", n, ch, ch, pix, pix, k=1)
        t.ew(f"{name}.to_tokens", n * pix * ch, path="nonvec")
    for i in range(layers):
        basic_transformer_block(t, f"{name}.transformer_blocks.{i}", n, pix, ch, heads, head_dim, ctx_dim, ctx_len)
    if linear_proj:
        t.linear(f"{name}.proj_out", n * pix, ch, ch)
        t.ew(f"{name}.to_image", n * pix * ch, path="nonvec")
    else:
        t.ew(f"{name}.to_image", n * pix * ch, path="nonvec")
        t.conv(f"{name}.proj_out", n, ch, ch, pix, pix, k=1)
    t.ew(f"{name}.residual", n * pix * ch, rw=3)
    t.release(n * pix * ch)


def downsample(t: Trace, name: str, n: int, pix_in: int, ch: int, cout: int | None = None) -> None:
    """Downsample2D(use_conv): a stride-2 3x3 convolution."""
    t.conv(f"{name}.conv", n, ch, cout or ch, pix_in, max(1, pix_in // 4))


def upsample(t: Trace, name: str, n: int, pix_in: int, ch: int, cl_input: bool = False) -> bool:
    """Upsample2D(use_conv): nearest 2x interpolation, then a 3x3 convolution. The input stays alive through the
    convolution: the calling up block's ``hidden_states = upsampler(hidden_states)`` rebinds it only on return.
    A channels-last input stays channels-last through the interpolation when the tensor holds more than one image
    (PyTorch's upsample_nearest2d returns NCHW for a single one: found on the H200's kernel tables, reproduced on a
    CPU), and then the convolution takes it in place. Returns whether the output is channels-last."""
    cl = cl_input and n > 1
    t.ew(f"{name}.interpolate", n * pix_in * 4 * ch, rw=1.25, path="upsample_nhwc" if cl else "upsample")
    t.hold(n * pix_in * ch)
    t.conv(f"{name}.conv", n, ch, ch, pix_in * 4, pix_in * 4, nhwc_in=cl)
    t.release(n * pix_in * ch)
    return cl


def vae_attention(t: Trace, name: str, n: int, pix: int, ch: int) -> None:
    """The VAE mid-block's single-head Attention (group_norm inside, biased q/k/v, residual_connection), as
    AttnProcessor2_0 runs it: the (b, c, hw) -> (b, hw, c) transposes around the group norm are views, so q, k and
    v read a transposed tensor (each Linear copies it first where it holds more than one image: the batch cannot
    fold into its rows as a view); the output's transpose + reshape back to (b, c, h, w) is a view too, a
    channels-last one: the residual add (its first operand) and the decoder after it run channels-last."""
    t.hold(n * pix * ch)
    t.group_norm(f"{name}.group_norm", n, ch, pix)
    if n > 1:
        t.ew(f"{name}.qkv_input_copies", n * pix * ch, kernels=3, path="transpose")
    attention(t, name, n, pix, ch, 1, ch, qkv_bias=True)
    t.ew(f"{name}.residual", n * pix * ch, rw=3, path="nonvec")
    t.release(n * pix * ch)
