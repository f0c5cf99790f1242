"""Training estimate on one GPU (data-parallel replicas behave the same per GPU): step time and assembly.

Memory: memory_train.py.

Time: FLOPs of the forward at the achievable matmul rate per GEMM (wave quantization), backward = 2x forward
matmuls (dgrad + wgrad), 2.5x attention (flash backward recomputes the scores), 2x elementwise traffic (the loss's
own: loss.py), plus the optimizer's and autocast's passes over the parameters, all at the achievable bandwidth.
MFU (PaLM, Chowdhery et al. 2022, appendix B; the convention of Megatron and torchtitan):
  model FLOPs per token = 6 x (matmul weights a token touches, LM head included) + 12 x layers x s x attention width
  (non-causal attention counted in full); MFU = model FLOPs per second / dense peak of the compute dtype.
Full recompute runs each decoder layer's forward again (not the embeddings, head or loss); HFU adds those FLOPs
(and counts the same attention convention).

Data parallel (``strategy``): ``ddp`` (DistributedDataParallel, full replicas + gradient buckets, bucketed
all-reduce overlapped with backward), ``fsdp`` (FSDP2 full shard with a bf16 mixed-precision policy, or pure bf16;
memory_train.fsdp_train_memory) or ``hsdp`` (FSDP2 hybrid shard: sharded over the GPUs of a node, replicated
across nodes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuscope.errors import UserError
from gpuscope.estimate import ops as opsmod
from gpuscope.estimate.comm import collective_time
from gpuscope.estimate.cpu import for_model as cpu_for_model
from gpuscope.estimate.cpu import step_s as cpu_step_s
from gpuscope.estimate.engines import TrainHost, engine_for, train_host_for
from gpuscope.estimate.loss import LOSS_OP, loss_backward_op, loss_op
from gpuscope.estimate.adamw import IMPL_NOTES, bw_fraction, optimizer_bytes, resolve_impl
from gpuscope.estimate.adamw import launch_s as adamw_launch_s
from gpuscope.estimate.fsdp_time import fsdp_micro_batch
from gpuscope.estimate.memory_train import ddp_bucket_bytes, fsdp_train_memory, precision_bytes, train_memory
from gpuscope.estimate.params import count_params
from gpuscope.estimate.platform import platform_for
from gpuscope.estimate.result import Estimate
from gpuscope.estimate.roofline import forward_time, sm_count
from gpuscope.estimate.runtime import runtime_overheads
from gpuscope.estimate.topology import topology_for
from gpuscope.specs.axes import Offload, Optimizer, Precision, Recompute, Strategy
from gpuscope.specs.hardware_template import typical_h2d_gbs
from gpuscope.specs.model import ModelSpec

# DeepSpeed's CPU-Adam updates about 4 billion parameters per second on a two-socket server (ZeRO-Offload,
# Ren et al. 2021: 0.2-0.3 s per step for 1B parameters). Rough: host CPUs differ widely.
CPU_ADAM_PARAMS_PER_S = 4e9


def train_forward_ops(m: ModelSpec, micro_batch: int, seq: int, act_b: float, stream_b: float) -> list:
    """The ops of one training forward as the planner counts them: the model's forward (no KV cache) and the loss."""
    T = micro_batch * seq
    ops = opsmod.forward_ops(m, micro_batch, seq, 0, act_b, act_b, stream_b, head_tokens=T, hf_cache_cat=False)
    ops.append(loss_op(T, m.vocab_size))
    return ops


def layer_kernels(ops, num_layers: int) -> tuple[int, int]:
    """(kernels of all decoder layers, kernels of the rest) of a forward's ops: an op repeated once per layer
    belongs to the layers."""
    layers = sum(o.kernels * o.count for o in ops if o.count == num_layers)
    return layers, sum(o.kernels * o.count for o in ops) - layers


def train_host_s(fwd_ops, m: ModelSpec, launch_s: float, full: bool, th: TrainHost) -> dict[str, float]:
    """Host seconds of one micro-batch's forward, backward and (full) recompute, and of the optimizer step:
    engines.TrainHost's per-kernel and per-call costs, in units of ``launch_s``. Only a small or host-bound model
    feels it: each phase takes max(GPU, host)."""
    in_layers, _ = layer_kernels(fwd_ops, m.num_layers)
    # the per-call costs were measured whole (TrainHost: a model's kernels outside its layers did not move them)
    kernels = in_layers + th.other_kernels
    # parameter tensors: ~9 a layer (q, k, v, o, 3 MLP matrices or 2 plus biases, 2 norms) and embeddings/head
    tensors = m.num_layers * (9 if m.gated_mlp else 12) + 4
    return {"forward": launch_s * (th.fwd_fixed + th.fwd * kernels),
            "backward": launch_s * (th.bwd_fixed + th.bwd * kernels),
            "recompute": launch_s * (th.recompute * in_layers + th.ckpt_layer * m.num_layers) if full else 0.0,
            "optimizer": launch_s * (th.opt_fixed + th.opt_tensor * tensors)}


def host_link_gbs(hw) -> float:
    """Measured host-to-device bandwidth if the hardware TOML has one, else the PCIe generation's typical rate
    (specs/hardware_template.typical_h2d_gbs: Gen5 x16 ~55 GB/s, Gen4 ~25, Gen3 ~12)."""
    measured = (getattr(hw, "measured", None) or {}).get("h2d_gbs")
    if measured:
        return float(measured)
    return typical_h2d_gbs(getattr(hw, "host_interface", "") or "")


DDP_BUCKET_BYTES = 25 * 2**20  # DistributedDataParallel's default bucket_cap_mb


# Data-parallel communication on two NVLink-joined H200s (research/results/2026-11-29-h200-x2): gradient and
# parameter collectives were NOT free behind backward. Step time above the same job on one GPU: DDP Llama-3.2-1B
# +15.5 ms for ~20 ms of bucketed all-reduce (AMP, fp32 grads), DDP Llama-2-7B +52.5 ms for ~110 ms, FSDP2 1B
# +21.6 ms for ~16 ms of all-gather + reduce-scatter. NCCL's kernels take SMs and HBM bandwidth from the
# backward they overlap. We hide DP_OVERLAP_FRACTION of the traffic that fits under the compute it overlaps
# (0.4: DDP 1B -> +2%, DDP 7B -5%, FSDP 1B -1%, FSDP 7B -11% against the measured steps), and charge every
# collective call a fixed cost: DP_CALL_OVERHEAD_S, the 1 KiB-1 MiB times measured there (23-36 us per call with
# its launch; NCCL's own tuning model has a 6.6 us base per call).
DP_OVERLAP_FRACTION = 0.4
DP_CALL_OVERHEAD_S = 20e-6


def _data_parallel_comm_s(pc, hw, n: int, strategy: str, precision: str, backward_s: float, compute_s: float,
                          gpus_per_node: int | None, layers: int = 1) -> float:
    """Communication the step waits for.

    DDP: gradients (parameter dtype) all-reduced bucket by bucket (25 MiB) while backward runs. FSDP2: bf16
    parameters all-gathered before each layer's forward and backward and gradients reduce-scattered (fp32 under
    the amp-bf16 policy, bf16 for pure bf16), prefetched one layer ahead. Exposed = traffic - DP_OVERLAP_FRACTION
    x the part of it that fits under the overlapped compute, + the last bucket (DDP) or the root's gather (FSDP)."""
    topo = topology_for(hw, n, gpus_per_node=gpus_per_node)
    P = pc.total
    if strategy in ("fsdp", "hsdp"):
        # HSDP (FSDP2 with a 2-D device mesh, shard inside a node, replicate across nodes): the gathers and the
        # reduce-scatter stay inside the node's shard group; each rank's gradient shard is then all-reduced
        # across the replicas (one rank per node) over the network.
        g = _shard_group(n, topo) if strategy == "hsdp" else n
        grad_b = 4.0 if precision == "amp-bf16" else 2.0
        gathers = 2 * collective_time("all_gather", 2.0 * P, g, topo)
        scatter = collective_time("reduce_scatter", grad_b * P, g, topo)
        traffic = gathers + scatter + 3 * layers * DP_CALL_OVERHEAD_S
        if g < n:
            traffic += collective_time("all_reduce", grad_b * P / g, n // g, topo, gpus_per_node_in_group=1)
        hidden = DP_OVERLAP_FRACTION * min(traffic, compute_s)
        return traffic - hidden + collective_time("all_gather", 2.0 * P / 32, g, topo)
    grad_bytes = P * precision_bytes(precision)[0]
    buckets = max(1, math.ceil(grad_bytes / DDP_BUCKET_BYTES))
    total = collective_time("all_reduce", grad_bytes, n, topo) + buckets * DP_CALL_OVERHEAD_S
    last = collective_time("all_reduce", min(DDP_BUCKET_BYTES, grad_bytes), n, topo)
    return total - DP_OVERLAP_FRACTION * min(total, backward_s) + last


def _shard_group(n: int, topo) -> int:
    """HSDP's shard group: the GPUs of one node (all of them when the job fits in a node)."""
    g = min(n, topo.gpus_per_node)
    if n % g:
        raise UserError(f"--strategy hsdp needs --num-gpus ({n}) to be a multiple of the GPUs per node ({g}).")
    return g


def estimate_train(m: ModelSpec, hw, *, micro_batch: int, seq: int, precision: str = "amp-bf16",
                   optimizer: str = "adamw", recompute: str = "none", grad_accum: int = 1, offload: str = "none",
                   fused: bool = True, num_gpus: int = 1, strategy: str = "ddp", with_ops: bool = False,
                   gpus_per_node: int | None = None, bucket_view: bool = False,
                   adamw_impl: str | None = None) -> Estimate:
    """1 or `num_gpus` data-parallel GPUs (``strategy``: module docstring); ``adamw_impl`` overrides ``fused``."""
    precision, optimizer, recompute, offload, strategy = _checked(
        micro_batch, seq, grad_accum, num_gpus, precision, optimizer, recompute, offload, strategy)
    impl = resolve_impl(fused, adamw_impl)  # estimate/adamw.ADAMW_IMPLS
    fsdp = strategy in ("fsdp", "hsdp")
    shard = (_shard_group(num_gpus, topology_for(hw, num_gpus, gpus_per_node=gpus_per_node)) if strategy == "hsdp"
             else num_gpus)
    cdt = precision_bytes(precision)[2]
    if not hw.supports(cdt):
        raise UserError(f"--precision {precision} needs {cdt} compute, which {hw.name} does not support.")
    pc = count_params(m)
    mem = _memory(m, pc, micro_batch, seq, precision, optimizer, recompute, grad_accum, offload, impl, num_gpus,
                  fsdp, shard, bucket_view)
    peak = max(mem.phases.values())
    overheads = runtime_overheads(peak)
    st = _step_time(m, hw, pc, micro_batch, seq, precision, optimizer, recompute, grad_accum, offload, impl, fsdp,
                    shard)
    comm_s = _data_parallel_comm_s(pc, hw, num_gpus, strategy, precision, st.b_gpu * grad_accum, st.micro_s,
                                   gpus_per_node, m.num_layers) if num_gpus > 1 else 0.0
    step_s = st.step_s + comm_s
    tokens_per_step = grad_accum * micro_batch * seq
    model_flops_token, hw_flops_token = _flops_per_token(m, pc, seq, recompute == "full")
    peak_tf = hw.peak(cdt) * 1e12
    throughput = {"tokens_per_s": tokens_per_step * num_gpus / step_s, "tokens_per_s_per_gpu": tokens_per_step / step_s}
    if num_gpus > 1:
        # scaling efficiency: one GPU's step for the same per-GPU work / this step (what `bench train-dist
        # --baseline` measures); time only, whether or not one GPU could hold the job
        throughput["scaling_efficiency"] = estimate_train(
            m, hw, micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer, recompute=recompute,
            grad_accum=grad_accum, offload=offload, adamw_impl=impl).time["step_s"] / step_s
    est = Estimate(
        kind="train", model=m.name, hardware=hw.key,
        inputs=dict(micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer,
                    fused=impl == "fused", adamw_impl=impl, recompute=recompute, grad_accum=grad_accum,
                    offload=offload, num_gpus=num_gpus, strategy=strategy if (num_gpus > 1 or fsdp) else "single"),
        fits=peak + sum(overheads.values()) <= hw.device_total_bytes, peak_bytes_per_gpu=peak,
        breakdown_bytes=mem.breakdown, device_total_bytes=hw.device_total_bytes, runtime_overhead_bytes=overheads,
        phases_bytes=mem.phases,
        time=st.times(step_s, grad_accum, comm_s), throughput=throughput,
        mfu=model_flops_token * tokens_per_step / step_s / peak_tf,
        hfu=hw_flops_token * tokens_per_step / step_s / peak_tf,
        flops={"model_per_token": model_flops_token, "hardware_per_token": hw_flops_token,
               "per_step": model_flops_token * tokens_per_step},
        params={"total": pc.total, "active": pc.active, "matmul_active": pc.matmul_active},
        calibrated=bool(getattr(hw, "is_calibrated", False)),
    )
    est.time["host_s_per_micro_batch"], est.time["gpu_s_per_micro_batch"] = st.host_micro, st.micro_gpu
    est.assumptions = _assumptions(hw, st, cdt, offload, recompute, mem.host_bytes, optimizer, impl)
    est.verdict, est.suggestions = _verdict(est, m, hw, precision, recompute, micro_batch, num_gpus)
    if est.fits and st.host_micro > st.micro_gpu:
        est.suggestions.append(HOST_BOUND_TIP)
    if with_ops:
        est.ops = [dict(phase="forward", **t.__dict__) for t in st.f_times] + \
                  [dict(phase="backward", **t.__dict__) for t in st.b_times]
    return est


def _checked(micro_batch, seq, grad_accum, num_gpus, precision, optimizer, recompute, offload, strategy):
    """The axes' values after checking every input (one sentence for the first bad one)."""
    for name, v in (("micro-batch", micro_batch), ("seq", seq), ("grad-accum", grad_accum), ("num-gpus", num_gpus)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise UserError(f"--{name} must be a positive integer, got {v!r}.")
    out = (Precision.parse(precision, "precision").value, Optimizer.parse(optimizer, "optimizer").value,
           Recompute.parse(recompute, "recompute").value, Offload.parse(offload, "offload").value,
           Strategy.parse(strategy, "strategy").value)
    if out[4] in ("fsdp", "hsdp") and (out[0] not in ("amp-bf16", "bf16") or out[3] != "none"
                                                        or grad_accum != 1):
        raise UserError(f"--strategy {out[4]} is planned for --precision amp-bf16 (FSDP2 with a bf16 "
                        "mixed-precision policy) or bf16, no offload and --grad-accum 1.")
    if out[0] == Precision.BF16_MASTER.value and out[3] != "none":
        raise UserError("--precision bf16-master keeps its fp32 master weights on the GPU: use --offload none "
                        "(with offload, amp-bf16 already keeps fp32 masters on the host).")
    return out


def _memory(m, pc, micro_batch, seq, precision, optimizer, recompute, grad_accum, offload, impl, num_gpus, fsdp,
            shard, bucket_view):
    """The allocator's phase peaks: FSDP2's sharded walk, or one replica's walk plus DDP's gradient buckets."""
    if fsdp:
        return fsdp_train_memory(m, pc, num_gpus=shard, micro_batch=micro_batch, seq=seq, optimizer=optimizer,
                                 recompute=recompute, precision=precision, impl=impl)
    mem = train_memory(m, pc, micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer,
                       recompute=recompute, grad_accum=grad_accum, offload=offload, fused=False, impl=impl)
    if num_gpus > 1:  # DDP's gradient buckets live beside everything, in every phase
        buckets = ddp_bucket_bytes(pc, precision)
        # gradient_as_bucket_view: the gradients ARE the buckets. The single-GPU walk counts gradients in the
        # optimizer phase (already the buckets' bytes) and frees them before the forward (a view never is):
        # the buffer is added to the forward and backward phases only. In backward this counts the gradients
        # produced before the peak twice; the walk's peak is at its start (two H200s, Llama-2-7B: +0.3%).
        grown = ("forward", "backward") if bucket_view else tuple(mem.phases)
        mem = replace(mem, phases={k: v + (buckets if k in grown else 0.0) for k, v in mem.phases.items()},
                      breakdown={**mem.breakdown, "ddp_buckets": buckets})
    return mem


HOST_BOUND_TIP = ("the step is host (launch)-bound: a larger --micro-batch or --seq does more work per kernel launch "
                  "(the step time barely grows until the GPU catches up), or compile the model (torch.compile) to "
                  "cut the kernel count")


@dataclass
class _StepTime:
    """One GPU's optimizer step before data-parallel communication, and its parts."""

    step_s: float
    micro_s: float  # one micro-batch: max(GPU, host)
    micro_gpu: float
    host_micro: float
    f_wall: float
    b_wall: float
    b_gpu: float
    r_gpu: float
    opt_s: float
    offload_s: float
    f_times: list
    b_times: list
    launch_s: float
    tflops: float
    bw: float

    def times(self, step_s: float, grad_accum: int, comm_s: float) -> dict:
        """The estimate's ``time`` keys for a step of ``step_s`` (communication included)."""
        return {"step_s": step_s, "forward_s": self.f_wall * grad_accum, "backward_s": self.b_wall * grad_accum,
                "recompute_s": self.r_gpu * grad_accum, "optimizer_s": self.opt_s, "offload_s": self.offload_s,
                "exposed_comm_s": comm_s}


def _step_time(m, hw, pc, micro_batch, seq, precision, optimizer, recompute, grad_accum, offload, impl, fsdp,
               shard) -> _StepTime:
    """Forward, backward and recompute at the roofline (each phase max(GPU, host)), then the optimizer, the autocast
    casts and offload's transfers (see the module docstring)."""
    w_b, act_b, cdt = precision_bytes(precision)
    amp = precision.startswith("amp") or precision == "fp8"
    full = recompute == "full"
    P = pc.total
    # the residual stream's dtype: fp32 under autocast; FSDP's bf16 policy runs the layers in bf16
    stream_b = 4.0 if ((amp and not fsdp) or precision == "fp32") else 2.0
    tflops = hw.achievable_tflops(cdt)
    bw = hw.achievable_bw_gbs()
    train_engine = cpu_for_model(engine_for("eager", hw), m)  # a CPU's cost per kernel for this family
    sms = sm_count(hw)
    fwd_ops = train_forward_ops(m, micro_batch, seq, act_b, stream_b)
    _, f_gpu, _, f_times = forward_time(fwd_ops, tflops, bw, train_engine, sms, False, m.head_dim)
    bwd_ops = [loss_backward_op(o) if o.name == LOSS_OP else
               opsmod.Op(o.name + "_bwd", o.kind, o.flops * (2.5 if o.kind == "attention" else 2.0), o.bytes * 2.0,
                         o.kernels * 2, o.count, o.matmul_shape) for o in fwd_ops]
    _, b_gpu, _, b_times = forward_time(bwd_ops, tflops, bw, train_engine, sms, False, m.head_dim)
    # full recompute runs each decoder layer's forward again in the backward, not the embeddings, head or loss
    # (transformers' GradientCheckpointingLayer). A 128k vocabulary's head and loss are a fifth of a 1B forward:
    # Llama-3.2-1B, micro-batch 4 x 2048, AMP bf16, read 8-12% above the plan that re-ran them in seven H200 runs
    # (research/results/2026-11-30-h200-j), where its no-recompute twin read within 2%.
    r_gpu = sum(t.gpu_s for o, t in zip(fwd_ops, f_times) if opsmod.in_layers(o)) if full else 0.0
    micro_gpu = f_gpu + b_gpu + r_gpu
    host = train_host_s(fwd_ops, m, train_engine.launch_s, full, train_host_for(hw))
    if fsdp:  # FSDP2's hooks on the host and its copies on the GPU, inside the micro-batch (estimate/fsdp_time.py)
        host, micro_gpu = fsdp_micro_batch(host, micro_gpu, m, pc, precision, shard, train_engine.launch_s, bw)
    host_micro = host["forward"] + host["backward"] + host["recompute"]
    cpu = train_engine.cpu  # the device is the CPU: compute and host time in series (estimate/cpu.py)
    micro_s = micro_gpu + host_micro if cpu is not None else max(micro_gpu, host_micro)
    # Per optimizer step: autocast re-casts weights every forward (read fp32, write 16 bit) and casts 16-bit weight
    # grads back (read 2, write 4); the optimizer's passes over what it updates (its shard under FSDP) and its
    # kernel launches, per AdamW implementation: estimate/adamw.py.
    opt_bytes = optimizer_bytes(P, optimizer, precision, impl) / (shard if fsdp else 1)
    cast_bytes = 12.0 * (P - pc.embedding) if (amp and offload == "none" and not fsdp) else 0.0
    opt_launch_s = adamw_launch_s(m, impl, train_engine.launch_s, P / (shard if fsdp else 1))
    # bf16-master launches two kernels per tensor (the grad's fp32 cast and the copy back to bf16)
    master_launch_s = (2 * (m.num_layers * (9 if m.gated_mlp else 12) + 4) * train_engine.launch_s
                       if precision == Precision.BF16_MASTER.value else 0.0)
    opt_s = max(opt_bytes / (bw * 1e9 * bw_fraction(impl)), host["optimizer"] + master_launch_s + opt_launch_s)
    if cpu is not None:  # torch's AdamW on a CPU: no fused kernel, its single-tensor loop (estimate/cpu.py)
        loop_s, fresh_s = cpu_step_s(m, optimizer_bytes(P, optimizer, precision, "for-loop"), w_b, micro_batch * seq,
                                     cpu, train_engine.launch_s)
        opt_s, micro_s = loop_s + host["optimizer"] + master_launch_s, micro_s + fresh_s
    offload_s = 0.0
    if offload != "none":
        link = host_link_gbs(hw) * 1e9
        # ZeRO-Offload: 16-bit grads stream down during backward (hidden behind it when the link keeps up), the
        # CPU runs Adam, 16-bit params come back up before the next forward.
        offload_s = max(0.0, 2.0 * P / link - b_gpu * grad_accum)
        opt_s = P / CPU_ADAM_PARAMS_PER_S + 2.0 * P / link
        if offload == "params":  # weights stream up for forward and backward (and the recompute), overlapped
            micro_s = max(micro_s, (3 if full else 2) * 2.0 * P / link)
    step_s = grad_accum * (micro_s + cast_bytes / (bw * 1e9)) + opt_s + offload_s
    both = (lambda a, b: a + b) if cpu is not None else max  # a CPU's phase: its compute and host time in series
    return _StepTime(step_s, micro_s, micro_gpu, host_micro, both(f_gpu, host["forward"]),
                     both(b_gpu + r_gpu, host["backward"] + host["recompute"]), b_gpu, r_gpu, opt_s, offload_s,
                     f_times, b_times, train_engine.launch_s, tflops, bw)


def _flops_per_token(m: ModelSpec, pc, seq: int, full: bool) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) per token: PaLM's 6N + 12 L s d (module docstring); full recompute adds the
    decoder layers' forward again (2N less the head, + 4 L s d)."""
    attn_width = (m.num_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim) / 2
                  if m.mla else m.q_dim)
    model = 6.0 * pc.matmul_active + 12.0 * m.num_layers * seq * attn_width
    recompute = (2.0 * (pc.matmul_active - pc.lm_head_matmul) + 4.0 * m.num_layers * seq * attn_width
                 if full else 0.0)
    return model, model + recompute


def _assumptions(hw, st: _StepTime, cdt: str, offload: str, recompute: str, host_bytes: float,
                 optimizer: str = "adamw", impl: str = "fused") -> list[str]:
    out = [
        "activations as saved by Hugging Face transformers in eager mode with SDPA attention",
        f"achievable {st.tflops:.0f} TFLOP/s ({cdt}) and {st.bw:.0f} GB/s",
        "MFU: 6N + 12 L s d per token (PaLM convention) against the dense peak",
        platform_for(hw).assumed,  # where the host costs and the context size are CUDA's (estimate/platform.py)
        f"offload {offload}: {host_bytes / 2**30:.1f} GiB in host memory, {host_link_gbs(hw):.0f} GB/s host link, "
        f"CPU Adam at {CPU_ADAM_PARAMS_PER_S / 1e9:.0f}B params/s (rough)" if offload != "none" else "",
        "selective recompute has no s^2 attention term to drop with SDPA/flash, so it saves what 'none' saves"
        if recompute == "selective" else "",
        # which AdamW implementation the optimizer step is priced as (estimate/adamw.py)
        IMPL_NOTES[impl] if optimizer in ("adamw", "adam") and offload == "none" else "",
    ]
    if st.host_micro > st.micro_gpu:
        out.append(f"host (launch)-bound: {st.host_micro * 1e3:.1f} ms of host time per micro-batch "
                   f"against {st.micro_gpu * 1e3:.1f} ms of GPU work (eager, {st.launch_s * 1e6:.1f}"
                   " us per kernel)")
    return [a for a in out if a]


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
