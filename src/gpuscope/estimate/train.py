"""Training estimate on one GPU (data-parallel replicas behave the same per GPU): memory phases and step time.

Memory model (a walk through one step, as PyTorch's caching allocator sees it; gradients set to None after
each step, which is the default of optimizer.zero_grad since PyTorch 2.0):

- rest: weights (W) + optimizer states (O). amp-*: fp32 weights, fp32 AdamW exp_avg and exp_avg_sq (8 bytes);
  bf16: all in bf16; fp32: all fp32; adamw-8bit: two 8-bit states with one fp32 absmax per 256-element block
  (bitsandbytes blockwise quantization); sgd: one momentum buffer.
- forward: + saved activations (activations.py), + under AMP the 16-bit copies of the weights that autocast makes
  and caches (2 bytes x matmul parameters; embeddings are not autocast), + the head's transient:
  logits (T x V, 16 bit), their fp32 upcast in the loss and log_softmax's fp32 output (saved): 10 T V bytes.
- backward: starts with the loss head (nll grad, log_softmax grad and its input: 12 T V bytes next to the saved
  output), then walks the layers from last to first; at layer l the allocator holds the activations and 16-bit
  weight copies of layers <= l, the gradients of layers > l and the head, and layer l's working set.
  The reported backward peak is the maximum over that walk.
- optimizer step: rest + gradients (+ the temporaries of a foreach, non-fused implementation: one fp32 tensor list
  the size of the parameters). Fused AdamW (torch.optim.AdamW(fused=True)) updates in place.
- full recompute (activation checkpointing of each decoder layer, non-reentrant): only each layer's input is kept;
  its activations come back one layer at a time in backward; autocast's weight cache is dropped when the forward's
  autocast region ends, so the 16-bit copies live only during forward and per layer in backward.
The peak is the maximum over the phases, not their sum.

Time: FLOPs of the forward at the achievable matmul rate per GEMM (wave quantization), backward = 2x forward
matmuls (dgrad + wgrad) and 2.5x attention (flash backward recomputes the scores), elementwise traffic 2x forward
in backward, plus the optimizer's and autocast's passes over the parameters, all at the achievable bandwidth.
MFU (PaLM, Chowdhery et al. 2022, appendix B; the convention of Megatron and torchtitan):
  model FLOPs per token = 6 x (matmul weights a token touches, LM head included) + 12 x layers x s x attention width
  (non-causal attention counted in full); MFU = model FLOPs per second / dense peak of the compute dtype.
HFU adds the recomputed forward (and counts the same attention convention).
"""

from __future__ import annotations

from gpuscope.errors import UserError
from gpuscope.estimate import ops as opsmod
from gpuscope.estimate.activations import hf_layer_saved_bytes
from gpuscope.estimate.params import count_params, layer_params
from gpuscope.estimate.result import Estimate
from gpuscope.estimate.roofline import ENGINES, forward_time, sm_count
from gpuscope.estimate.runtime import TRAIN_WORKSPACE_BYTES, runtime_overheads
from gpuscope.specs.model import ModelSpec

PRECISIONS = ("amp-bf16", "amp-fp16", "bf16", "fp32", "fp8")
OPTIMIZERS = ("adamw", "adam", "sgd", "adamw-8bit")
RECOMPUTE = ("none", "selective", "full")
OFFLOAD = ("none", "optimizer", "params")
TRAIN_ENGINE = ENGINES["eager"]


def _precision_bytes(precision: str) -> tuple[float, float, str]:
    """(weight/grad bytes, activation bytes, compute dtype)."""
    return {
        "amp-bf16": (4.0, 2.0, "bf16"), "amp-fp16": (4.0, 2.0, "fp16"), "bf16": (2.0, 2.0, "bf16"),
        "fp32": (4.0, 4.0, "fp32"), "fp8": (4.0, 2.0, "fp8"),
    }[precision]


def optimizer_state_bytes(params: int, optimizer: str, weight_b: float) -> float:
    if optimizer in ("adamw", "adam"):
        return 2 * params * weight_b
    if optimizer == "sgd":
        return params * weight_b
    return params * (2.0 + 2 * 4.0 / 256)  # adamw-8bit, bitsandbytes blockwise (block 256)


def _check(name: str, value, allowed) -> str:
    if value not in allowed:
        raise UserError(f"--{name} must be one of {', '.join(allowed)}, got '{value}'.")
    return value


def estimate_train(m: ModelSpec, hw, *, micro_batch: int, seq: int, precision: str = "amp-bf16",
                   optimizer: str = "adamw", recompute: str = "none", grad_accum: int = 1, offload: str = "none",
                   fused: bool = True, num_gpus: int = 1, with_ops: bool = False) -> Estimate:
    for name, v in (("micro-batch", micro_batch), ("seq", seq), ("grad-accum", grad_accum), ("num-gpus", num_gpus)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise UserError(f"--{name} must be a positive integer, got {v!r}.")
    _check("precision", precision, PRECISIONS)
    _check("optimizer", optimizer, OPTIMIZERS)
    _check("recompute", recompute, RECOMPUTE)
    _check("offload", offload, OFFLOAD)
    w_b, act_b, cdt = _precision_bytes(precision)
    if not hw.supports(cdt):
        raise UserError(f"--precision {precision} needs {cdt} compute, which {hw.name} does not support.")
    amp = precision.startswith("amp") or precision == "fp8"
    pc = count_params(m)
    P = pc.total
    T = micro_batch * seq
    V, h = m.vocab_size, m.hidden_size

    # ---- memory ------------------------------------------------------------------------------------------------
    weights = P * w_b if offload != "params" else 0.0
    opt_states = optimizer_state_bytes(P, optimizer, w_b) if offload == "none" else 0.0
    rest = weights + opt_states + TRAIN_WORKSPACE_BYTES
    grads_total = P * w_b
    layer_p = [layer_params(m, i) for i in range(m.num_layers)]
    # 16-bit weight copies autocast makes (matmul weights: all but norms; embedding lookups are not autocast)
    copy_b = 2.0 if amp else 0.0
    copies = [(lp.attention + lp.mlp) * copy_b for lp in layer_p]
    head_copy = V * h * copy_b
    grads = [lp.total * w_b for lp in layer_p]
    moe_set = set(m.moe_layers)
    saved_parts = [hf_layer_saved_bytes(m, micro_batch, seq, precision, i in moe_set) for i in range(m.num_layers)]
    saved = [sum(p.values()) for p in saved_parts]
    stream_b = 4.0 if (amp or precision == "fp32") else 2.0
    layer_input = T * h * stream_b
    # Working set while one layer runs backward: grad of the residual stream (fp32 under AMP) in and out, and the
    # largest intermediate's gradient pair (MLP: 3 x T x I), plus the 16-bit weight-grad before its fp32 cast.
    width = max(m.intermediate_size, (m.moe.expert_intermediate_size * m.moe.experts_per_token) if m.moe else 0)
    bwd_work = 2 * T * h * stream_b + 3 * T * width * act_b + max(lp.mlp for lp in layer_p) / 3 * copy_b
    # The LM head and loss (transformers ForCausalLMLoss): logits in the activation dtype, upcast to fp32 for the
    # loss (a copy unless they already are fp32), cross_entropy = log_softmax (saves its fp32 output) + nll_loss.
    # Forward peak at log_softmax: logits + fp32 copy + log_softmax output; only the output outlives the forward.
    # Backward peak at log_softmax's backward: its saved output, the nll gradient and its own result (3 x 4TV).
    head_saved = T * h * (8.0 if stream_b == 4 else 6.0) + (T * h * 2.0 if amp else 0.0) + 4.0 * T * V
    head_fwd_transient = (act_b + (4.0 if act_b != 4.0 else 0.0)) * T * V
    head_bwd_transient = 8.0 * T * V

    full = recompute == "full"
    kept = [layer_input if full else s for s in saved]
    fwd_extra_layer = max(saved) if full else 0.0
    forward_peak = rest + sum(kept) + sum(copies) + head_copy + head_saved + head_fwd_transient + fwd_extra_layer
    # Backward walk.
    copies_alive = [0.0 if full else c for c in copies]
    bwd_start = rest + sum(kept) + sum(copies_alive) + head_copy + head_saved + head_bwd_transient
    walk = []
    g_done = V * h * w_b  # the LM head's weight gradient (the shared embedding's, when tied) exists from here on
    for l in range(m.num_layers - 1, -1, -1):
        below_kept = sum(kept[: l + 1])
        below_copies = sum(copies_alive[: l + 1])
        recomputed = (saved[l] + copies[l]) if full else 0.0
        walk.append(rest + below_kept + below_copies + recomputed + g_done + bwd_work)
        g_done += grads[l]
    emb_grad = pc.embedding * w_b
    bwd_end = rest + grads_total + T * h * stream_b + (emb_grad if pc.lm_head == 0 else 0.0)
    backward_peak = max([bwd_start, bwd_end] + walk)
    foreach_tmp = 0.0 if fused or optimizer == "sgd" else P * w_b
    optimizer_peak = rest + grads_total + foreach_tmp
    if grad_accum > 1:  # gradients persist across micro-batches: every micro-step's forward sees them
        forward_peak += grads_total
    phases = {"forward": forward_peak, "backward": backward_peak, "optimizer": optimizer_peak}
    peak = max(phases.values())
    at = max(phases, key=phases.get)
    breakdown = {
        "weights": weights,
        "optimizer_states": opt_states,
        "gradients": grads_total if (at == "optimizer" or grad_accum > 1) else 0.0,
        "activations": sum(kept) + (fwd_extra_layer if at == "forward" else 0.0),
        "weight_copies_16bit": (sum(copies) + head_copy) if at == "forward" else 0.0,
        "logits_and_loss": (head_saved + head_fwd_transient) if at == "forward" else 0.0,
        "optimizer_temporaries": foreach_tmp if at == "optimizer" else 0.0,
        "workspace": TRAIN_WORKSPACE_BYTES,
    }
    if at == "backward":
        breakdown["backward_working_set"] = peak - sum(breakdown.values())
    overheads = runtime_overheads(peak)
    fits = peak + sum(overheads.values()) <= hw.device_total_bytes

    # ---- time --------------------------------------------------------------------------------------------------
    tflops = hw.achievable_tflops(cdt)
    bw = hw.achievable_bw_gbs()
    sms = sm_count(hw.key)
    fwd_ops = opsmod.forward_ops(m, micro_batch, seq, 0, act_b, act_b, stream_b, head_tokens=T, hf_cache_cat=False)
    fwd_ops.append(opsmod.Op("loss_log_softmax", "elementwise", 0.0, 20.0 * T * V, 6))
    f_wall, f_gpu, f_host, f_times = forward_time(fwd_ops, tflops, bw, TRAIN_ENGINE, sms, graph=False, head_dim=m.head_dim)
    bwd_ops = [opsmod.Op(o.name + "_bwd", o.kind, o.flops * (2.5 if o.kind == "attention" else 2.0),
                         o.bytes * 2.0, o.kernels * 2, o.count, o.matmul_shape) for o in fwd_ops]
    b_wall, b_gpu, b_host, b_times = forward_time(bwd_ops, tflops, bw, TRAIN_ENGINE, sms, graph=False, head_dim=m.head_dim)
    micro_gpu = f_gpu + b_gpu + (f_gpu if full else 0.0)
    micro_host = f_host + b_host + (f_host if full else 0.0)
    micro_s = max(micro_gpu, micro_host)
    # Per optimizer step: AdamW reads p, g, m, v and writes p, m, v; autocast re-casts weights every forward
    # (read fp32, write 16 bit) and casts 16-bit weight grads back (read 2, write 4).
    if optimizer == "adamw-8bit":
        opt_bytes = P * (3 * w_b + 4)  # p, g read, p written; two 8-bit states read and written
    else:
        opt_bytes = {"adamw": 7, "adam": 7, "sgd": 5}[optimizer] * P * w_b
    cast_bytes = 12.0 * (P - pc.embedding) * (1 if amp else 0)
    opt_s = opt_bytes / (bw * 1e9) + (0 if fused else 3 * 4 * len(layer_p) * 12 * TRAIN_ENGINE.launch_s)
    step_s = grad_accum * (micro_s + cast_bytes / (bw * 1e9)) + opt_s
    tokens_per_step = grad_accum * T
    attn_width = (m.num_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim) / 2
                  if m.mla else m.q_dim)
    model_flops_token = 6.0 * pc.matmul_active + 12.0 * m.num_layers * seq * attn_width
    hw_flops_token = model_flops_token + (2.0 * pc.matmul_active + 4.0 * m.num_layers * seq * attn_width if full else 0)
    peak_tf = hw.peak(cdt) * 1e12
    mfu = model_flops_token * tokens_per_step / step_s / peak_tf
    hfu = hw_flops_token * tokens_per_step / step_s / peak_tf
    time = {"step_s": step_s, "forward_s": f_wall * grad_accum, "backward_s": b_wall * grad_accum,
            "recompute_s": (f_gpu if full else 0.0) * grad_accum, "optimizer_s": opt_s}
    throughput = {"tokens_per_s": tokens_per_step * num_gpus / step_s, "tokens_per_s_per_gpu": tokens_per_step / step_s}
    est = Estimate(
        kind="train", model=m.name, hardware=hw.key,
        inputs=dict(micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer, fused=fused,
                    recompute=recompute, grad_accum=grad_accum, offload=offload, num_gpus=num_gpus),
        fits=fits, peak_bytes_per_gpu=peak, breakdown_bytes=breakdown, device_total_bytes=hw.device_total_bytes,
        runtime_overhead_bytes=overheads, phases_bytes=phases, time=time, throughput=throughput,
        mfu=mfu, hfu=hfu,
        flops={"model_per_token": model_flops_token, "hardware_per_token": hw_flops_token,
               "per_step": model_flops_token * tokens_per_step},
        params={"total": P, "active": pc.active, "matmul_active": pc.matmul_active},
        calibrated=bool(getattr(hw, "is_calibrated", False)),
    )
    est.assumptions = [
        "activations as saved by Hugging Face transformers in eager mode with SDPA attention",
        f"achievable {tflops:.0f} TFLOP/s ({cdt}) and {bw:.0f} GB/s",
        "MFU: 6N + 12 L s d per token (PaLM convention) against the dense peak",
        "selective recompute has no s^2 attention term to drop with SDPA/flash, so it saves what 'none' saves"
        if recompute == "selective" else "",
    ]
    est.assumptions = [a for a in est.assumptions if a]
    est.verdict, est.suggestions = _verdict(est, m, hw, precision, recompute, micro_batch, num_gpus)
    if with_ops:
        est.ops = [dict(phase="forward", **t.__dict__) for t in f_times] + \
                  [dict(phase="backward", **t.__dict__) for t in b_times]
    return est


def _verdict(est: Estimate, m: ModelSpec, hw, precision: str, recompute: str, micro_batch: int,
             num_gpus: int) -> tuple[str, list[str]]:
    gib = 2**30
    need, have = est.required_bytes / gib, est.device_total_bytes / gib
    if est.fits:
        return (f"Fits on {hw.name}: {need:.1f} of {have:.1f} GiB; {est.throughput['tokens_per_s_per_gpu']:.0f} tok/s"
                f" per GPU, MFU {est.mfu:.0%}."), []
    tips = []
    if recompute != "full":
        tips.append("activation recomputation (--recompute full)")
    if micro_batch > 1:
        tips.append("a smaller --micro-batch with --grad-accum to keep the global batch")
    if precision.startswith("amp"):
        tips.append("8-bit AdamW (--optimizer adamw-8bit) or pure bf16 (--precision bf16)")
    tips.append("ZeRO-3/FSDP over more GPUs, or CPU offload of the optimizer (--offload optimizer)")
    return f"Does not fit on {hw.name}: needs {need:.1f} GiB of {have:.1f} GiB.", tips
