"""The conditioning encoders, walked as transformers runs them: CLIPTextModel(WithProjection) and
CLIPVisionModelWithProjection (models/clip/modeling_clip.py) and T5EncoderModel (models/t5/modeling_t5.py).

- CLIP text: token + position embeddings, pre-LN encoder layers (q/k/v/out with bias, fc1/fc2 with bias,
  quick_gelu or gelu), final LayerNorm; WithProjection adds text_projection (no bias) on the pooled token.
  SD/SDXL pipelines pad every prompt to max_position_embeddings (77) tokens.
- CLIP vision: a patch convolution (no bias), a class token, position embeddings, pre_layrnorm, encoder layers,
  post_layernorm on the class token and visual_projection (no bias).
- T5 encoder: shared embedding, RMS-style T5LayerNorm (weight only), attention without biases whose position
  bias (relative_attention_bias: buckets x heads, block 0 only) is added to the scores, so the scores are
  materialised whatever the attention setting; gated-gelu feed-forward (wi_0, wi_1, wo, no biases).
"""

from __future__ import annotations

from gpuscope.estimate.diffusion.trace import Trace


def _clip_layers(t: Trace, name: str, n: int, tokens: int, h: int, inter: int, heads: int, layers: int,
                 quick_gelu: bool) -> None:
    rows = n * tokens
    for i in range(layers):
        p = f"{name}.layers.{i}"
        t.hold(rows * h)
        t.norm(f"{p}.layer_norm1", rows * h, h)
        for proj in ("q_proj", "k_proj", "v_proj"):
            t.linear(f"{p}.self_attn.{proj}", rows, h, h)
        t.attention(f"{p}.self_attn.core", n, heads, tokens, tokens, h // heads)
        t.ew(f"{p}.self_attn.merge", rows * h)
        t.linear(f"{p}.self_attn.out_proj", rows, h, h)
        t.ew(f"{p}.add1", rows * h, rw=3)
        t.norm(f"{p}.layer_norm2", rows * h, h)
        t.linear(f"{p}.mlp.fc1", rows, h, inter)
        t.ew(f"{p}.mlp.act", rows * inter, kernels=3 if quick_gelu else 1)
        t.linear(f"{p}.mlp.fc2", rows, inter, h)
        t.ew(f"{p}.add2", rows * h, rw=3)
        t.release(rows * h)


def clip_text(t: Trace, cfg, n: int, projection: bool) -> None:
    """CLIPTextModel(WithProjection) over ``n`` prompts of max_position_embeddings tokens."""
    h, inter = cfg.get("hidden_size", 512), cfg.get("intermediate_size", 2048)
    tokens = cfg.get("max_position_embeddings", 77)
    t.weights_only(cfg.get("vocab_size", 49408) * h + tokens * h, tensors=2)  # token and position embeddings
    t.ew("embeddings", n * tokens * h, rw=3, kernels=3)
    t.ew("causal_mask", n * tokens * tokens, kernels=4)
    _clip_layers(t, "text_model.encoder", n, tokens, h, inter, cfg.get("num_attention_heads", 8),
                 cfg.get("num_hidden_layers", 12), cfg.get("hidden_act", "quick_gelu") == "quick_gelu")
    t.norm("text_model.final_layer_norm", n * tokens * h, h)
    t.ew("pooled_gather", n * h, kernels=2)
    if projection:
        t.linear("text_projection", n, h, cfg.get("projection_dim", 512), bias=False)


def clip_vision(t: Trace, cfg, n: int) -> None:
    """CLIPVisionModelWithProjection over ``n`` images of image_size (SVD's image conditioning)."""
    h, inter = cfg.get("hidden_size", 768), cfg.get("intermediate_size", 3072)
    size, patch = cfg.get("image_size", 224), cfg.get("patch_size", 32)
    tokens = (size // patch) ** 2 + 1
    t.conv("embeddings.patch_embedding", n, cfg.get("num_channels", 3), h, size * size, tokens - 1, k=patch,
           bias=False)
    t.weights_only(h + tokens * h, tensors=2)  # class_embedding, position_embedding
    t.ew("embeddings.cat_add", n * tokens * h, rw=3, kernels=3)
    t.norm("pre_layrnorm", n * tokens * h, h)
    _clip_layers(t, "vision_model.encoder", n, tokens, h, inter, cfg.get("num_attention_heads", 12),
                 cfg.get("num_hidden_layers", 12), cfg.get("hidden_act", "quick_gelu") == "quick_gelu")
    t.norm("post_layernorm", n * h, h)
    t.linear("visual_projection", n, h, cfg.get("projection_dim", 512), bias=False)


def t5_encoder(t: Trace, cfg, n: int, tokens: int) -> None:
    """T5EncoderModel over ``n`` prompts of ``tokens`` tokens (the pipeline's max_sequence_length)."""
    d, dff, dkv = cfg.get("d_model", 512), cfg.get("d_ff", 2048), cfg.get("d_kv", 64)
    heads, layers = cfg.get("num_heads", 8), cfg.get("num_layers", 6)
    inner = heads * dkv
    gated = "gated" in cfg.get("feed_forward_proj", "relu")
    rows = n * tokens
    t.weights_only(cfg.get("vocab_size", 32128) * d + cfg.get("relative_attention_num_buckets", 32) * heads,
                   tensors=2)
    t.ew("embed_tokens", rows * d)
    t.ew("position_bias", heads * tokens * tokens, kernels=12)  # bucketing + the embedding lookup, once
    impl, t.attn_impl = t.attn_impl, "math"
    for i in range(layers):
        p = f"encoder.block.{i}"
        t.hold(rows * d)
        t.norm(f"{p}.layer.0.layer_norm", rows * d, d, params_per_channel=1, kernels=5)
        for proj in ("q", "k", "v"):
            t.linear(f"{p}.layer.0.SelfAttention.{proj}", rows, d, inner, bias=False)
        t.attention(f"{p}.layer.0.SelfAttention.core", n, heads, tokens, tokens, dkv)
        t.ew(f"{p}.layer.0.SelfAttention.merge", rows * inner)
        t.linear(f"{p}.layer.0.SelfAttention.o", rows, inner, d, bias=False)
        t.ew(f"{p}.add1", rows * d, rw=3)
        t.norm(f"{p}.layer.1.layer_norm", rows * d, d, params_per_channel=1, kernels=5)
        if gated:
            t.linear(f"{p}.layer.1.DenseReluDense.wi_0", rows, d, dff, bias=False)
            t.ew(f"{p}.layer.1.DenseReluDense.act", rows * dff, kernels=8)
            t.linear(f"{p}.layer.1.DenseReluDense.wi_1", rows, d, dff, bias=False)
            t.ew(f"{p}.layer.1.DenseReluDense.mul", rows * dff, rw=3)
        else:
            t.linear(f"{p}.layer.1.DenseReluDense.wi", rows, d, dff, bias=False)
            t.ew(f"{p}.layer.1.DenseReluDense.act", rows * dff)
        t.linear(f"{p}.layer.1.DenseReluDense.wo", rows, dff, d, bias=False)
        t.ew(f"{p}.add2", rows * d, rw=3)
        t.release(rows * d)
    t.attn_impl = impl
    t.norm("encoder.final_layer_norm", rows * d, d, params_per_channel=1, kernels=5)


def t5_fp32_params(cfg) -> int:
    """T5's ``wo`` weights, which transformers keeps in fp32 when a T5 is loaded in fp16
    (T5PreTrainedModel._keep_in_fp32_modules = ["wo"])."""
    return cfg.get("num_layers", 6) * cfg.get("d_ff", 2048) * cfg.get("d_model", 512)
