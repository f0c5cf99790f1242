"""Activation memory saved for the backward pass.

Two models:

1. ``korthikanti_layer_bytes``: Megatron-LM's fused implementation, Korthikanti et al. 2022 (arXiv 2205.05198),
   Table 2, 16-bit activations: sbh(34 + 5as/h) per layer without parallelism, and the TP/SP/recompute variants.
   Used for Megatron-style plans and reproduced by tests/test_validation_published.py.

2. ``hf_layer_saved_bytes``: what PyTorch autograd saves for one Hugging Face transformers decoder layer in eager
   mode, derived op by op from modeling_llama.py (and the families that copy it):
   - RMSNorm computes in fp32: pow(2) saves its fp32 input, the normalised fp32 tensor is saved by the weight
     multiply; under AMP the residual stream is already fp32 (the embedding and residual adds are not autocast),
     so a norm saves 2 x 4 bytes per element; in pure 16-bit training it saves the fp32 copy (4), the 16-bit
     normalised tensor (2) and its output (2, shared by the projections).
   - Under AMP, autocast casts the fp32 norm output to 16 bit separately for each projection that reads it
     (q, k, v: three copies; gate, up: two), and each linear saves its own copy.
   - Attention (SDPA flash / memory-efficient): saves q and k after rotary, v, and its output; o_proj saves the
     contiguous transposed output. No s^2 term. fp32 runs take SDPA's math path: the s^2 probabilities are saved.
   - SwiGLU MLP: gate output (saved by SiLU), SiLU output and up output (saved by the multiply), their product
     (saved by down_proj): 4 x T x I x 2 bytes. GELU MLP: up output and GELU output (2 x T x I), plus the
     tanh-approximation temporaries of GPT-2's python GELU (4 more).
   Checked against torch.cuda.max_memory_allocated on an H200 (results/).
"""

from __future__ import annotations

from gpuscope.specs.model import ModelSpec


# Tensors one Megatron GPT layer saves for backward, 16-bit activations, Korthikanti et al. 2022 section 4.1:
# (name, bytes per s*b*h [or per a*s^2*b when attention_scores], split by TP, split by SP, kept by selective recompute)
MEGATRON_SAVED = (
    ("layernorm_1_input", 2, False, True, True),
    ("qkv_input", 2, False, True, True),
    ("q_and_k", 4, True, True, True),
    ("softmax_output", 2, True, True, False),  # x a s^2 b
    ("softmax_dropout_mask", 1, True, True, False),  # x a s^2 b
    ("softmax_dropout_output", 2, True, True, False),  # x a s^2 b
    ("v", 2, True, True, True),
    ("out_proj_input", 2, True, True, True),
    ("attn_dropout_mask", 1, False, True, True),
    ("layernorm_2_input", 2, False, True, True),
    ("mlp_input", 2, False, True, True),
    ("gelu_input", 8, True, True, True),
    ("gelu_output", 8, True, True, True),
    ("mlp_dropout_mask", 1, False, True, True),
)
_SCORES = {"softmax_output", "softmax_dropout_mask", "softmax_dropout_output"}


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
                            recompute: str = "none") -> float:
    """Activation bytes of one Megatron layer, summed tensor by tensor (MEGATRON_SAVED).

    tests/test_validation_published.py checks the sum against the paper's Table 2 closed forms.
    Full recompute keeps only the layer input (2sbh, split by t under sequence parallelism).
    """
    if recompute == "full":
        return 2.0 * s * b * h / (t if sp else 1)
    total = 0.0
    for name, per, tp_split, sp_split, kept_selective in MEGATRON_SAVED:
        if recompute == "selective" and not kept_selective:
            continue
        unit = a * s * s * b if name in _SCORES else s * b * h
        div = t if (tp_split or (sp and sp_split)) else 1
        total += per * unit / div
    return total


def _norm_saved(m: ModelSpec, tokens: int, stream_b: float, act_b: float) -> float:
    n = tokens * m.hidden_size
    if m.norm == "layernorm":  # native_layer_norm saves its input (+ tiny mean/rstd); output read by the linears
        return n * stream_b + (0 if stream_b != act_b else n * act_b)
    if stream_b == 4 and act_b == 4:  # fp32: input, normalised, output (saved by the projections)
        return 12.0 * n
    if stream_b == 4:  # AMP: fp32 input and fp32 normalised; the output is re-cast per projection
        return 8.0 * n
    return n * (4 + act_b + act_b)  # 16-bit: fp32 copy, normalised 16-bit, output


def hf_layer_saved_bytes(m: ModelSpec, batch: int, seq: int, precision: str, moe: bool = False) -> dict[str, float]:
    """Bytes autograd keeps for one decoder layer until its backward, by part."""
    tokens = batch * seq
    amp = precision.startswith("amp") or precision == "fp8"
    act_b = 4.0 if precision == "fp32" else 2.0
    stream_b = 4.0 if (amp or precision == "fp32") else 2.0
    h = m.hidden_size
    norms = 2 * _norm_saved(m, tokens, stream_b, act_b)
    if m.norms_per_layer == 4:  # Gemma-2 post-norms on the 16-bit branch outputs
        norms += 2 * tokens * h * (4 + 2 * act_b)
    casts = 0.0
    if amp:
        n_attn_in = 1 if m.family in ("gpt2", "gpt_neox", "phi3") else (2 if m.mla else 3)
        n_mlp_in = (1 if m.family == "phi3" else 2) if m.gated_mlp else 1
        casts = (n_attn_in + n_mlp_in) * tokens * h * 2.0
    if m.mla:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q_dim, k_dim, v_dim = m.num_heads * qk, m.num_heads * qk, m.num_heads * a.v_head_dim
        lora = (a.q_lora_rank or 0) + a.kv_lora_rank
        kv_up = m.num_heads * (a.qk_nope_head_dim + a.v_head_dim)  # kv_b_proj output, split into k_nope and v
        # q, k, v into SDPA, its output and the transposed copy; the LoRA latents and their norms; kv_b's output
        attn = tokens * (q_dim + k_dim + v_dim + 2 * v_dim + 3 * lora + kv_up) * act_b
    else:
        q_dim, kv = m.q_dim, m.kv_dim
        attn = tokens * (q_dim + 2 * kv + 2 * q_dim) * act_b
        if m.family == "gpt2":
            attn += tokens * 3 * q_dim * act_b  # c_attn output, split into strided views copied by SDPA
    if precision == "fp32":  # SDPA math path: softmax probabilities saved (b x heads x s x s fp32)
        attn += batch * m.num_heads * seq * seq * 4.0
    elif m.eager_attention:  # eager attention: tanh soft-cap output (16 bit), fp32 softmax output, 16-bit probs
        attn += batch * m.num_heads * seq * seq * (2.0 + 4.0 + 2.0)
    if moe and m.moe:
        e = m.moe
        routed = tokens * e.experts_per_token
        width = e.expert_intermediate_size
        mlp = routed * (h + (4 if m.gated_mlp else 2) * width + h) * act_b + tokens * e.num_experts * 4.0 * 2
        if e.shared_intermediate_size:
            mlp += tokens * 4 * e.shared_intermediate_size * act_b
    elif m.gated_mlp:
        mlp = 4.0 * tokens * m.intermediate_size * act_b
    else:
        extra = 4 if (m.family == "gpt2" and m.activation == "gelu_new") else 0
        mlp = (2.0 + extra) * tokens * m.intermediate_size * act_b
    return {"norms": norms, "casts": casts, "attention": attn, "mlp": mlp}
