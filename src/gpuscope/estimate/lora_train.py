"""LoRA / QLoRA fine-tuning on one GPU: step time, MFU and the Estimate (memory: lora_memory.py).

Time, per micro-batch, at the roofline of roofline.py (each phase max(GPU, host), as estimate/train.py):
- forward: full training's forward ops (train.train_forward_ops, in the base's dtype) plus, per targeted module,
  lora_A (a T x r x d_in GEMM), lora_B (T x d_out x r), the scaling multiply (read and write T x d_out) and the add
  into the base output (read two T x d_out, write one), under autocast the casts of x to fp32 and back (12 bytes an
  element of T x d_in) and the kernels casting A and B (8 kernels a target beside the base GEMM: the list above
  _adapter_ops) and, with dropout, its pass over x; under QLoRA bitsandbytes' dequantisation of every 4-bit Linear
  weight before its GEMM (3 kernels a Linear, BNB_DEQUANT_BYTES_PER_WEIGHT: memory bound; the block above
  BNB_DEQUANT_KERNELS).
- backward: through a frozen Linear only dX = dY W^T is computed (no dW): its GEMM FLOPs and bytes once, not
  twice; attention 2.5x its forward (flash backward recomputes the scores); elementwise traffic 2x; each adapter
  GEMM twice (dX and dW), the scaling multiply's backward once, x's gradient cast back twice and summed with the
  base path's (18 bytes an element of T x d_in), 10 kernels a target; QLoRA dequantises every weight again
  (bitsandbytes' MatMul4Bit saves the packed weight, not the dequantised one); bitsandbytes' Python, forward and
  backward, is host time traced per Linear (BNB_FORWARD_HOST_UNITS, BNB_BACKWARD_HOST_UNITS).
- recompute (gradient checkpointing): each decoder layer's forward again, adapters and dequantisation included.
- optimizer step over the fp32 adapters only (AdamW reads p, g, m, v and writes p, m, v: 28 bytes a parameter),
  and under autocast the adapters' fp32 -> 16-bit casts each forward and 16-bit -> fp32 gradient casts (12 bytes).
MFU: model FLOPs per token = 4 N (the frozen base's forward 2N and its backward dX 2N; N = matmul weights a token
touches, LM head included) + 6 A (adapters: forward and both gradients) + 12 L s d (attention as in full
training, non-causal counted in full), against the dense peak of the compute dtype. HFU adds the recompute:
2 (N - head) + 2 A + 4 L s d. A full fine-tune's convention is 6N: the same run counts as less work here.
"""

from __future__ import annotations

from gpuscope.errors import UserError
from gpuscope.estimate import ops as opsmod
from gpuscope.estimate.lora import LoraShape
from gpuscope.estimate.lora_memory import LoraDtypes, lora_train_memory
from gpuscope.estimate.params import count_params
from gpuscope.estimate.result import Estimate
from gpuscope.estimate.roofline import forward_time, sm_count
from gpuscope.estimate.runtime import runtime_overheads
# the engine and host models as train.py imports them
from gpuscope.estimate.loss import LOSS_OP, loss_backward_op
from gpuscope.estimate.train import engine_for, train_forward_ops, train_host_for, train_host_s
from gpuscope.specs.axes import Optimizer, Precision, Recompute
from gpuscope.specs.model import ModelSpec

LORA_PRECISIONS = ("amp-bf16", "amp-fp16", "bf16", "fp32")


def _groups(shape: LoraShape) -> dict[tuple, int]:
    """(module, d_in, d_out) -> how many layers hold that target."""
    groups: dict[tuple, int] = {}
    for layer in shape.sites_per_layer:
        for s in layer:
            groups[(s.name, s.n_in, s.n_out)] = groups.get((s.name, s.n_in, s.n_out), 0) + 1
    return groups


# peft's LoRA Linear forward, per target (peft 0.21 lora/layer.py Linear.forward, counted with torch.profiler on a
# tiny Llama, bf16 base, fp32 adapters, bf16 autocast, lora_dropout 0): base GEMM; x.to(fp32) (_cast_input_dtype);
# autocast's cast of A (fp32 -> bf16) and of x back to bf16; lora_A GEMM; the cast of B; lora_B GEMM; "* scaling";
# "result +": 8 kernels beside the base GEMM. Its backward: the scaling multiply's; lora_B dW and dX; B's gradient
# cast to fp32; lora_A dW and dX; A's gradient cast; the two casts of x's gradient (bf16 -> fp32 -> bf16); the sum
# of x's gradient with the base path's: 10 kernels ("result +" passes its gradient through). The adapters' weight
# casts move 12 bytes a parameter, priced in lora_step_time's cast_s; their kernels here. A/B gradients that already
# exist (micro-batches after the first under --grad-accum) add one accumulation kernel each, not priced (a few KB).
# Without autocast (bf16, fp32) x's and the output's casts differ and are not priced here. 16-bit base under
# autocast:
CAST_X_FWD_B = (2.0 + 4.0) + (4.0 + 2.0)  # x: read bf16 write fp32; autocast: read fp32 write bf16
CAST_X_BWD_B = (2.0 + 4.0) + (4.0 + 2.0) + 3 * 2.0  # both casts of dx back, then dx += the base path's (2 in 1 out)


def _out_b(dt: LoraDtypes) -> float:
    """Bytes of lora_B's output: autocast's 16-bit dtype, else the fp32 adapters'."""
    return 2.0 if dt.autocast else 4.0


def _adapter_ops(shape: LoraShape, T: int, dt: LoraDtypes, qlora: bool = False) -> list:
    """The adapters' forward ops, one group per (module, shape), counted over the layers holding it. Under QLoRA
    with autocast peft's bnb layer does not cast x (lora_memory.py) but clones the base output first
    ("defensively", peft lora/bnb.py): a copy of T x d_out in the base dtype, its backward a pass-through; x's
    gradient is then summed with the base path's without casts (QLORA_DX_SUM_B, priced in the backward)."""
    ab = 2.0 if dt.autocast else dt.adapter_in_b
    ob = _out_b(dt)
    r, out = shape.r, []
    for (name, n_in, n_out), c in _groups(shape).items():
        out += [opsmod.Op(f"lora_A_{name}", "matmul", 2.0 * T * r * n_in, (T * n_in + T * r) * ab + n_in * r * ab,
                          1, c, (T, r, n_in)),
                opsmod.Op(f"lora_B_{name}", "matmul", 2.0 * T * n_out * r, (T * r + T * n_out) * ab + r * n_out * ab,
                          1, c, (T, n_out, r)),
                # "* scaling" reads and writes lora_B's output; "result +" reads two T x d_out, writes one
                opsmod.Op(f"lora_add_{name}", "elementwise", 2.0 * T * n_out,
                          T * n_out * (2.0 * ob + 3.0 * dt.base_b), 2, c)]
        if dt.autocast and qlora:
            out += [opsmod.Op(f"lora_clone_{name}", "elementwise", 0.0, 2 * T * n_out * dt.base_b, 1, c),
                    opsmod.Op(f"lora_cast_w_{name}", "elementwise", 0.0, 0.0, 2, c)]
        elif dt.autocast:
            out += [opsmod.Op(f"lora_cast_x_{name}", "elementwise", 0.0, T * n_in * CAST_X_FWD_B, 2, c),
                    opsmod.Op(f"lora_cast_w_{name}", "elementwise", 0.0, 0.0, 2, c)]
        if shape.dropout > 0:
            out.append(opsmod.Op(f"lora_dropout_{name}", "elementwise", 0.0, T * n_in * (2 * ab + 1), 1, c))
    return out


def _adapter_backward(o: opsmod.Op, T: int, ob: float) -> opsmod.Op:
    """One adapter op's backward (the kernel list above): GEMMs dX and dW; the scaling multiply's backward only
    (read and write T x d_out in lora_B's output dtype ``ob``); x's casts and sum as CAST_X_BWD_B; the weights'
    gradient casts (their bytes in cast_s); dropout twice its forward."""
    if o.kind == "matmul":
        return opsmod.Op(o.name + "_bwd", o.kind, o.flops * 2, o.bytes * 2, 2, o.count, o.matmul_shape)
    if o.name.startswith("lora_add_"):
        n_out = o.flops / (2.0 * T)
        return opsmod.Op(o.name + "_bwd", o.kind, o.flops / 2, 2.0 * ob * T * n_out, 1, o.count)
    if o.name.startswith("lora_cast_x_"):
        return opsmod.Op(o.name + "_bwd", o.kind, 0.0, o.bytes * CAST_X_BWD_B / CAST_X_FWD_B, 3, o.count)
    return opsmod.Op(o.name + "_bwd", o.kind, o.flops * 2, o.bytes * 2, o.kernels * 2 if "dropout" in o.name
                     else o.kernels, o.count)


def _qlora_dx_sums(shape: LoraShape, T: int, dt: LoraDtypes) -> list:
    """QLoRA under autocast: x's gradient from lora_A summed with the base path's, uncast (read two, write one)."""
    return [opsmod.Op(f"lora_dxsum_{name}", "elementwise", T * n_in, 3 * T * n_in * dt.base_b, 1, c)
            for (name, n_in, _), c in _groups(shape).items()]


# bitsandbytes 0.50.2 on CUDA, a frozen Linear4bit (NF4, double quantization, bf16 compute) at more than 1536
# tokens a micro-batch (backends/cuda/ops.py: past _gemm_4bit_custom_max_m gemm_4bit takes _dequant_linear_fallback;
# below it a per-architecture table may pick its fused 4-bit GEMM instead, which is not priced: the fallback is):
# - forward (MatMul4Bit.forward -> gemm_4bit): the 8-bit absmax dequantised to fp32 (kDequantizeBlockwise), the
#   offset added (a torch add, out of place), the NF4 weight dequantised to a fresh bf16 tensor (kDequantizeBlockwise),
#   then F.linear: BNB_DEQUANT_KERNELS beside the GEMM (priced on the host like every forward kernel: TrainHost's
#   fwd, its bwd, and its recompute under checkpointing).
# - backward (dX only; autograd/_functions.py MatMul4Bit.backward, Python): F.dequantize_4bit -> dequantize_blockwise
#   (a torch.library op with a Python kernel), `absmax += offset`, the dequantize_4bit op (Python kernel): the same 3
#   kernels again, then torch.matmul(dY, W). Nothing dequantised is saved; a recompute dequantises a third time.
# - bytes a weight each time (all memory bound): NF4 codes 0.5 read, 8-bit absmax 1/64 read and its second-level
#   fp32 constant 4/(64 x 256), the fp32 absmax written 4/64, the offset add's read and write 8/64, its read by the
#   NF4 kernel 4/64, the bf16 weight written 2: BNB_DEQUANT_BYTES_PER_WEIGHT = 2.77 (bitsandbytes' GEMM then reads
#   the 2 bf16 bytes as any bf16 base does: train_forward_ops).
# - host, traced on the H200 (research/results/2026-12-02-h200-b/qlora.md: one and three Llama-3.1-8B decoder layers
#   at 2048 tokens, un-profiled medians, NF4 against bf16 frozen Linears; torch.profiler for the composition).
#   Forward: gemm_4bit is a torch.library op with a Python kernel (_dequant_linear_fallback: the absmax and NF4
#   dequant kernels launched through ctypes, the offset add, F.linear): 217.7 us a Linear above a bf16 frozen
#   Linear's forward. Backward: MatMul4Bit.backward in Python (222 us a call timed in place, F.dequantize_4bit
#   162 us of it: two more Python-kernel ops and the add, then torch.matmul): 169.0 us above a bf16 Linear's
#   MmBackward. In launch_s of the catalog H200 (17.2 us): BNB_FORWARD_HOST_UNITS and BNB_BACKWARD_HOST_UNITS,
#   each the whole of that cost, its 3 kernels included: each phase adds what its TrainHost rate (forward,
#   recompute, backward) does not already price for those 3 kernels (_bnb_host_s). The recompute re-runs the
#   forward's path. The backward runs where the Linear's input needs a gradient: not the first layer's q, k, v
#   (they read the frozen embedding's output; bnb_backward_linears). A calibrated, faster or slower host scales it.
BNB_DEQUANT_KERNELS = 3
BNB_DEQUANT_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256) + 4 / 64 + 8 / 64 + 4 / 64 + 2.0
BNB_FORWARD_HOST_UNITS = 217.7 / 17.2  # 12.66 launch_s a quantized Linear
BNB_BACKWARD_HOST_UNITS = 169.0 / 17.2  # 9.83


def _dequant_op(m: ModelSpec) -> opsmod.Op:
    from gpuscope.estimate.lora_memory import quantized_params

    per_layer = quantized_params(m) / m.num_layers
    return opsmod.Op("nf4_dequant", "elementwise", 0.0, per_layer * BNB_DEQUANT_BYTES_PER_WEIGHT,
                     BNB_DEQUANT_KERNELS * quantized_linears(m) // m.num_layers, m.num_layers)


def quantized_linears(m: ModelSpec) -> int:
    """The decoder's Linear modules bitsandbytes quantizes (lora_memory.quantized_params' modules)."""
    from gpuscope.estimate.lora import linear_sites

    return sum(s.count for s in linear_sites(m))


def bnb_backward_linears(m: ModelSpec) -> int:
    """Quantized Linears whose MatMul4Bit backward runs: all but the first layer's readers of its input (q, k, v),
    whose input is the frozen embedding's output (no gradient asked of it)."""
    from gpuscope.estimate.lora import linear_sites
    from gpuscope.estimate.lora_memory import _READS_LAYER_INPUT

    return quantized_linears(m) - sum(1 for s in linear_sites(m) if s.name in _READS_LAYER_INPUT)


def _bnb_host_s(m: ModelSpec, th, launch_s: float, full: bool) -> dict[str, float]:
    """bitsandbytes' host beyond what TrainHost prices for its 3 kernels, per phase (the block above)."""
    k = BNB_DEQUANT_KERNELS
    def extra(units, rate):
        return max(0.0, units - k * rate) * launch_s
    q = quantized_linears(m)
    return {"forward": extra(BNB_FORWARD_HOST_UNITS, th.fwd) * q,
            "recompute": extra(BNB_FORWARD_HOST_UNITS, th.recompute) * q if full else 0.0,
            "backward": extra(BNB_BACKWARD_HOST_UNITS, th.bwd) * bnb_backward_linears(m)}


def _backward_ops(fwd_ops, T: int, dt: LoraDtypes) -> list:
    """Frozen matmuls: dX only (1x); adapters as _adapter_backward; attention 2.5x; elementwise bytes 2x;
    the NF4 dequantisation once again."""
    out = []
    for o in fwd_ops:
        if o.name.startswith("lora_clone_"):  # the clone's backward passes the gradient through
            continue
        if o.name.startswith("lora_"):
            out.append(_adapter_backward(o, T, _out_b(dt)))
            continue
        if o.name == LOSS_OP:
            out.append(loss_backward_op(o))
            continue
        if o.name == "nf4_dequant":  # the same kernels and bytes again
            out.append(opsmod.Op(o.name + "_bwd", o.kind, o.flops, o.bytes, o.kernels, o.count))
            continue
        if o.kind == "matmul":
            f = b = 1.0
        elif o.kind == "attention":
            f, b = 2.5, 2.0
        else:
            f, b = 2.0, 2.0
        out.append(opsmod.Op(o.name + "_bwd", o.kind, o.flops * f, o.bytes * b, o.kernels * 2, o.count,
                             o.matmul_shape))
    return out


def lora_step_time(m, hw, shape: LoraShape, *, micro_batch, seq, precision, optimizer, recompute, grad_accum,
                   fused, qlora) -> dict:
    """Seconds of one optimizer step and its parts (module docstring)."""
    dt = LoraDtypes.of(precision)
    cdt = Precision(precision).compute_dtype
    T, full, A = micro_batch * seq, recompute == "full", shape.trainable
    tflops, bw = hw.achievable_tflops(cdt), hw.achievable_bw_gbs()
    eng, sms = engine_for("eager", hw), sm_count(hw)
    fwd_ops = train_forward_ops(m, micro_batch, seq, dt.base_b, dt.base_b)
    fwd_ops += _adapter_ops(shape, T, dt, qlora) + ([_dequant_op(m)] if qlora else [])
    _, f_gpu, _, f_times = forward_time(fwd_ops, tflops, bw, eng, sms, False, m.head_dim)
    bwd_ops = _backward_ops(fwd_ops, T, dt) + (_qlora_dx_sums(shape, T, dt) if (qlora and dt.autocast) else [])
    _, b_gpu, _, b_times = forward_time(bwd_ops, tflops, bw, eng, sms, False, m.head_dim)
    r_gpu = sum(t.gpu_s for o, t in zip(fwd_ops, f_times) if opsmod.in_layers(o)) if full else 0.0
    th = train_host_for(hw)
    host = train_host_s(fwd_ops, m, eng.launch_s, full, th)
    if qlora:
        for phase, extra_s in _bnb_host_s(m, th, eng.launch_s, full).items():
            host[phase] += extra_s
    micro_gpu = f_gpu + b_gpu + r_gpu
    host_micro = host["forward"] + host["backward"] + host["recompute"]
    micro_s = max(micro_gpu, host_micro)
    per_param = {"adamw": 28.0, "adam": 28.0, "sgd": 20.0}.get(optimizer, 16.0)  # adamw-8bit: p, g, p + 2 states
    opt_s = max(per_param * A / (bw * 1e9), host["optimizer"])
    cast_s = (12.0 * A if dt.autocast else 0.0) / (bw * 1e9)
    step_s = grad_accum * (micro_s + cast_s) + opt_s
    return {"step_s": step_s, "forward_s": max(f_gpu, host["forward"]) * grad_accum,
            "backward_s": max(b_gpu + r_gpu, host["backward"] + host["recompute"]) * grad_accum,
            "recompute_s": r_gpu * grad_accum, "optimizer_s": opt_s, "offload_s": 0.0, "exposed_comm_s": 0.0,
            "host_s_per_micro_batch": host_micro, "gpu_s_per_micro_batch": micro_gpu,
            "_ops": (f_times, b_times), "_rates": (tflops, bw)}


def lora_flops_per_token(m: ModelSpec, pc, trainable: int, seq: int, full: bool) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) per token: 4N + 6A + 12 L s d; recompute adds 2(N - head) + 2A + 4 L s d."""
    attn_width = (m.num_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim) / 2
                  if m.mla else m.q_dim)
    model = 4.0 * pc.matmul_active + 6.0 * trainable + 12.0 * m.num_layers * seq * attn_width
    extra = (2.0 * (pc.matmul_active - pc.lm_head_matmul) + 2.0 * trainable + 4.0 * m.num_layers * seq * attn_width
             if full else 0.0)
    return model, model + extra


def check_lora_inputs(precision: str, optimizer: str, recompute: str, qlora: bool, num_gpus: int,
                      offload: str) -> tuple[str, str, str]:
    p = Precision.parse(precision, "precision").value
    if p not in LORA_PRECISIONS:
        raise UserError(f"--precision {p} is not planned with LoRA; use one of {', '.join(LORA_PRECISIONS)}.")
    if qlora and p == "fp32":
        raise UserError("--qlora computes in bf16 or fp16; use --precision amp-bf16, amp-fp16 or bf16, not fp32.")
    if num_gpus != 1 or offload != "none":
        raise UserError("--lora-r plans one GPU without offload; drop --num-gpus, the parallel layout and --offload.")
    return p, Optimizer.parse(optimizer, "optimizer").value, Recompute.parse(recompute, "recompute").value


def estimate_lora_train(m: ModelSpec, hw, shape: LoraShape, *, micro_batch: int, seq: int,
                        precision: str = "amp-bf16", optimizer: str = "adamw", recompute: str = "none",
                        grad_accum: int = 1, fused: bool = True, qlora: bool = False, alpha: float | None = None,
                        with_ops: bool = False, loss: str = "hf", offload_activations: bool = False,
                        adapter_b: float = 4.0, kbit_prep: bool = False) -> Estimate:
    """LoRA (or QLoRA) fine-tuning of ``m`` on one GPU of ``hw`` (module docstrings of this file and lora_memory);
    ``loss``: "hf" (transformers' loss over full fp32 logits), "hf-shift" (transformers <= 4.47's) or "chunked"
    (torchtune's compiled chunked loss); ``offload_activations``: checkpointed layer inputs on the host
    (lora_memory.py; memory only, the copies are taken to overlap); ``adapter_b``: bytes of an adapter parameter
    (4: peft's fp32; 2: torchtune's bf16; memory only); ``kbit_prep``: peft's prepare_model_for_kbit_training
    before get_peft_model (lora_memory.py; memory only)."""
    for name, v in (("micro-batch", micro_batch), ("seq", seq), ("grad-accum", grad_accum)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise UserError(f"--{name} must be a positive integer, got {v!r}.")
    precision, optimizer, recompute = check_lora_inputs(precision, optimizer, recompute, qlora, 1, "none")
    cdt = Precision(precision).compute_dtype
    if not hw.supports(cdt):
        raise UserError(f"--precision {precision} needs {cdt} compute, which {hw.name} does not support.")
    alpha = float(shape.r if alpha is None else alpha)
    if alpha <= 0:
        raise UserError(f"--lora-alpha must be positive, got {alpha:g}.")
    pc = count_params(m)
    mem = lora_train_memory(m, pc, shape, micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer,
                            recompute=recompute, grad_accum=grad_accum, fused=fused, qlora=qlora, loss=loss,
                            offload_activations=offload_activations, adapter_b=adapter_b, kbit_prep=kbit_prep)
    peak = max(mem.phases.values())
    t = lora_step_time(m, hw, shape, micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer,
                       recompute=recompute, grad_accum=grad_accum, fused=fused, qlora=qlora)
    (f_times, b_times), (tflops, bw) = t.pop("_ops"), t.pop("_rates")
    tokens = grad_accum * micro_batch * seq
    model_f, hw_f = lora_flops_per_token(m, pc, shape.trainable, seq, recompute == "full")
    peak_tf = hw.peak(cdt) * 1e12
    est = Estimate(
        kind="train", model=m.name, hardware=hw.key,
        inputs=dict(micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer, fused=fused,
                    recompute=recompute, grad_accum=grad_accum, offload="none", num_gpus=1, strategy="single",
                    lora_r=shape.r, lora_alpha=alpha, lora_targets=",".join(shape.targets),
                    lora_dropout=shape.dropout, qlora=qlora, kbit_prep=kbit_prep),
        fits=peak + sum(runtime_overheads(peak).values()) <= hw.device_total_bytes, peak_bytes_per_gpu=peak,
        breakdown_bytes=mem.breakdown, device_total_bytes=hw.device_total_bytes,
        runtime_overhead_bytes=runtime_overheads(peak), phases_bytes=mem.phases, time=t,
        throughput={"tokens_per_s": tokens / t["step_s"], "tokens_per_s_per_gpu": tokens / t["step_s"]},
        mfu=model_f * tokens / t["step_s"] / peak_tf, hfu=hw_f * tokens / t["step_s"] / peak_tf,
        flops={"model_per_token": model_f, "hardware_per_token": hw_f, "per_step": model_f * tokens},
        params={"total": pc.total + shape.trainable, "trainable": shape.trainable, "frozen": pc.total,
                "matmul_active": pc.matmul_active},
        calibrated=bool(getattr(hw, "is_calibrated", False)),
        lora={"trainable_params": shape.trainable, "r": shape.r, "alpha": alpha, "scaling": alpha / shape.r,
              "targets": list(shape.targets), "dropout": shape.dropout, "qlora": qlora,
              "base_weights_bytes": round(mem.breakdown["base_weights"])},
    )
    est.assumptions = _assumptions(precision, qlora, tflops, bw, cdt, recompute) + [KBIT_PREP_NOTE] * kbit_prep
    est.verdict, est.suggestions = _verdict(est, hw, recompute, micro_batch, qlora, optimizer)
    if with_ops:
        est.ops = [dict(phase="forward", **x.__dict__) for x in f_times] + \
                  [dict(phase="backward", **x.__dict__) for x in b_times]
    return est


_PRECISION_NOTE = {
    "amp-bf16": "get_peft_model + Trainer(bf16=True): base weights bf16 and frozen, adapters fp32, bf16 autocast",
    "amp-fp16": "get_peft_model + Trainer(fp16=True): base weights fp16 and frozen, adapters fp32, fp16 autocast",
    "bf16": "bf16 base, fp32 adapters (peft's default), no autocast: adapter GEMMs in fp32",
    "fp32": "fp32 base and adapters, no autocast",
}


# measured on an H200: research/results/2026-12-02-h200-c/lora.md (call 3, gpu_kbit_prep.py)
KBIT_PREP_NOTE = ("prepare_model_for_kbit_training: embeddings, norms and lm_head in fp32, the residual stream fp32 "
                  "(priced in memory); its extra time is not priced (an H200 step ran 27% longer with it at 8192 tokens)")


def _assumptions(precision, qlora, tflops, bw, cdt, recompute) -> list[str]:
    out = [_PRECISION_NOTE[precision],
           "QLoRA: decoder Linear weights NF4 with double quantization (4.127 bits a weight), embeddings, norms and "
           "lm_head in the compute dtype; each weight dequantised in the forward, again in the backward (and the recompute), "
           "3 bitsandbytes kernels each time, launched from its Python (traced host time a Linear)" if qlora
           else "",
           "activations as Hugging Face transformers + peft save them in eager mode with SDPA attention; frozen "
           "layers save no inputs for weight gradients",
           f"achievable {tflops:.0f} TFLOP/s ({cdt}) and {bw:.0f} GB/s",
           "MFU: 4N (frozen forward + dX) + 6 x adapter params + 12 L s d per token against the dense peak",
           "gradient checkpointing: each decoder layer re-run in backward" if recompute == "full" else ""]
    return [a for a in out if a]


def _verdict(est: Estimate, hw, recompute, micro_batch, qlora, optimizer) -> tuple[str, list[str]]:
    gib = 2**30
    need, have = est.required_bytes / gib, est.device_total_bytes / gib
    if est.fits:
        return (f"Fits on {hw.name}: {need:.1f} of {have:.1f} GiB; {est.throughput['tokens_per_s']:.0f} tok/s, "
                f"MFU {est.mfu:.0%} (LoRA convention); {est.lora['trainable_params'] / 1e6:.1f}M trainable "
                "parameters."), []
    tips = []
    if recompute != "full":
        tips.append("gradient checkpointing (--recompute full)")
    if micro_batch > 1:
        tips.append("a smaller --micro-batch with --grad-accum to keep the batch")
    if not qlora:
        tips.append("QLoRA (--qlora): the frozen base in 4-bit NF4")
    if optimizer in ("adamw", "adam"):
        tips.append("8-bit AdamW on the adapters (--optimizer adamw-8bit), or a smaller --lora-r / fewer targets")
    return f"Does not fit on {hw.name}: needs {need:.1f} GiB of {have:.1f} GiB.", tips
