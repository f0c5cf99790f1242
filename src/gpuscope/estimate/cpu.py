"""The planner's CPU model: a run whose device is the host's CPU (eager PyTorch), priced on the costs this host
measured once (measure/host/cpu_costs.py, kept by pipeline/host_ceilings.py under ``[measured.cpu]``).

Why not the accelerator model: on a GPU the host launches kernels ahead of the device, so a forward takes
max(GPU time, host time) and the GPU runs every GEMM near its peak. On a CPU the host runs each kernel itself:

    forward = sum over ops of compute(op)  +  kernels x op_s  +  forward_s              (nothing overlaps)

- compute(matmul) = max(flops / R(M), bytes / B_dram): R(M) is this host's fp32 GEMM rate at M rows (the op's
  tokens), interpolated log-linearly between the measured rows and held flat beyond them. Small-M GEMMs run far
  below the large-GEMM peak on a CPU (a 2-core Xeon: 20 GFLOP/s at M = 1 where the weight streams from memory,
  150 at M = 32, 225 at M = 128, against 264 for a 2048 cube), so one peak for all GEMMs plans a 32-token prefill
  ~2x fast. Another dtype d scales R by its measured large-GEMM rate over fp32's (assumed: the curve's shape is
  fp32's).
- compute(attention) = flops at the curve's largest-row rate, or its bytes from memory if slower (short sequences:
  a small share of a step).
- compute(elementwise, cache, other) = bytes / B: B is the in-place elementwise bandwidth measured in cache for an
  op that moves at most CACHE_OP_BYTES, from memory above it.
- op_s, forward_s: the host cost per kernel the planner counts and per forward, measured on tiny models (their
  compute is negligible); written as host_launch_s / host_forward_s, so the engine model (engines.engine_for)
  carries them. generate's per-token and per-call work: host_step_s / host_setup_s, measured the same way.
- training: each phase's compute plus its host time (engines.TrainHost's autograd costs, in units of op_s: an
  H200 host's ratios, assumed for a CPU), in series; the optimizer is torch's AdamW as a CPU run makes it (no fused
  kernel: measure/llm/train.py fuses on CUDA only), its single-tensor loop: OPTIMIZER_OPS_PER_TENSOR ops a parameter
  tensor at op_s each, and its passes over the weights (estimate/adamw.ADAM_ACCESSES' 20 element accesses a
  parameter for AdamW) at B_dram.

Constants: CACHE_OP_BYTES (assumed, below); OPTIMIZER_OPS_PER_TENSOR (counted in torch/optim/adamw.py). Every rate
is this host's measurement; which runs set and which checked them: research/results/2026-12-02-cpu/README.md.
Pure Python: no torch here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# An op that moves at most this many bytes (read + written) runs from the caches: the 2-core hosts measured have
# 1-2 MiB of L2 a core and 32-36 MiB of L3; a short sequence's activations (GPT-2 at 128 tokens: 0.4-1.5 MB a
# tensor) stay there, a weight-sized optimizer pass (hundreds of MB) does not. Assumed, not measured.
CACHE_OP_BYTES = 8 * 2**20
# torch.optim.adamw's _single_tensor_adamw, per parameter: step += 1, param.mul_ (weight decay), exp_avg.lerp_,
# exp_avg_sq.mul_ and .addcmul_, sqrt, div, add_ (eps), param.addcdiv_ (9 ops), the step's .item() and the Python
# around them (~3 ops' worth): 12.
OPTIMIZER_OPS_PER_TENSOR = 12


# glibc's malloc maps a block above this fresh from the kernel each time (mallopt(3): the dynamic M_MMAP_THRESHOLD
# stops at 32 MiB on 64-bit hosts), so a tensor this large made anew every step pays first_touch_gbs on its first
# write; smaller ones come back from the heap already mapped.
MMAP_THRESHOLD_BYTES = 32 * 2**20


@dataclass(frozen=True)
class CpuCosts:
    rows: tuple[float, ...]  # GEMM rows the rate was measured at (increasing)
    tflops: tuple[float, ...]  # fp32 F.linear rate at those rows
    cache_gbs: float  # in-place elementwise bandwidth in cache (read + write)
    dram_gbs: float  # the same from memory
    fp32_tflops: float  # the large-GEMM fp32 rate (hardware entry), the scale for other dtypes
    first_touch_gbs: float | None = None  # a fresh large tensor's first write (None: not measured, not priced)
    family_costs: tuple = ()  # ((model_type, per-kernel s, per-forward s), ...) measured apart from the Llama's

    def gemm_tflops(self, rows: float, scale: float = 1.0) -> float:
        """R(M) x ``scale``: log-linear between the measured rows, flat beyond them."""
        xs, ys = self.rows, self.tflops
        if rows <= xs[0]:
            return ys[0] * scale
        for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
            if rows <= x1:
                f = (math.log(rows) - math.log(x0)) / (math.log(x1) - math.log(x0))
                return (y0 + f * (y1 - y0)) * scale
        return ys[-1] * scale

    def bandwidth_gbs(self, op_bytes: float) -> float:
        return self.cache_gbs if op_bytes <= CACHE_OP_BYTES else self.dram_gbs


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def cpu_costs(hw) -> CpuCosts | None:
    """The CPU costs of a hardware entry (its ``[measured.cpu]`` table), or None: not a CPU entry, or a table
    that does not describe one (lists of unequal length, a rate that is not a positive number)."""
    m = getattr(hw, "measured", None) or {}
    c = m.get("cpu")
    if not isinstance(c, dict):
        return None
    rows, rates = c.get("gemm_rows"), c.get("gemm_tflops")
    fp32 = (m.get("matmul_tflops") or {}).get("fp32")
    if not (isinstance(rows, list) and isinstance(rates, list) and rows and len(rows) == len(rates)):
        return None
    if not all(_positive(x) for x in (*rows, *rates, c.get("elementwise_cache_gbs"), c.get("elementwise_dram_gbs"),
                                      fp32)):
        return None
    if any(b <= a for a, b in zip(rows, rows[1:])):
        return None
    fams = tuple((f, float(c[f"{f}_op_s"]), float(c.get(f"{f}_forward_s") or 0.0)) for f in ("gpt2",)
                 if _positive(c.get(f"{f}_op_s")))
    touch = c.get("first_touch_gbs")
    # R(M) never falls with M: an M-row GEMM can run as row slices at a smaller M's rate, so a measured dip (a
    # loaded host's noise) is the smaller M's rate
    rates = [max(rates[: i + 1]) for i in range(len(rates))]
    return CpuCosts(tuple(float(x) for x in rows), tuple(float(x) for x in rates), float(c["elementwise_cache_gbs"]),
                    float(c["elementwise_dram_gbs"]), float(fp32), float(touch) if _positive(touch) else None, fams)


def for_model(engine, m):
    """``engine`` with the host cost per kernel and per forward of ``m``'s family where this CPU measured it apart
    (GPT-2's modules: measure/host/cpu_costs.py); unchanged on an accelerator or for another family."""
    from dataclasses import replace

    c = engine.cpu
    for family, op_s, forward_s in (c.family_costs if c is not None else ()):
        if m.family == family:
            return replace(engine, launch_s=op_s, prefill_launch_s=0.0, forward_s=forward_s)
    return engine


def op_seconds(o, tflops: float, costs: CpuCosts) -> tuple[float, str]:
    """(compute seconds of one repeat of op ``o`` on the CPU, its bound: "compute" or "memory"), module docstring;
    its dispatch is the engine's host time per kernel, added by roofline.forward_time."""
    scale = tflops / costs.fp32_tflops
    t_m = o.bytes / (costs.bandwidth_gbs(o.bytes) * 1e9)
    if o.kind == "matmul":
        rows = o.matmul_shape[0] if o.matmul_shape else costs.rows[-1]
        t_c = o.flops / (costs.gemm_tflops(rows, scale) * 1e12)
        t_m = o.bytes / (costs.dram_gbs * 1e9)
    else:
        t_c = o.flops / (costs.gemm_tflops(costs.rows[-1], scale) * 1e12) if o.flops else 0.0
    t = max(t_c, t_m)
    return t, ("compute" if t == t_c and t_c > 0 else "memory")


def optimizer_s(opt_bytes: float, tensors: int, costs: CpuCosts, op_s: float) -> float:
    """The unfused optimizer step on the CPU: its passes over the weights at the memory bandwidth, and its
    single-tensor loop's ops at op_s (module docstring)."""
    return opt_bytes / (costs.dram_gbs * 1e9) + tensors * OPTIMIZER_OPS_PER_TENSOR * op_s


def large_tensor_bytes(m, w_b: float) -> float:
    """Bytes of ``m``'s parameter tensors above MMAP_THRESHOLD_BYTES at ``w_b`` bytes a parameter: the embedding,
    an untied LM head, and a layer's matrices where one is that large (a 1B Llama's MLP matrices)."""
    layer = [m.hidden_size * m.q_dim, m.hidden_size * m.kv_dim, m.hidden_size * m.kv_dim, m.q_dim * m.hidden_size]
    layer += [m.hidden_size * m.intermediate_size] * (3 if m.gated_mlp else 2)
    emb = [m.vocab_size * m.hidden_size] * (1 if m.tie_embeddings else 2)
    big = [n * w_b for n in emb if n * w_b > MMAP_THRESHOLD_BYTES]
    big += [n * w_b * m.num_layers for n in layer if n * w_b > MMAP_THRESHOLD_BYTES]
    return float(sum(big))


def fresh_memory_s(m, w_b: float, logits_bytes: float, costs: CpuCosts) -> tuple[float, float]:
    """(per optimizer step, per micro-batch) seconds of first writes to freshly mapped memory (MMAP_THRESHOLD_BYTES):
    per step each large parameter's gradient (made anew: zero_grad(set_to_none=True)) and the optimizer's two
    temporaries for it (sqrt and its division: _single_tensor_adamw's denominator), and with tied embeddings the
    embedding's own dense gradient before it is added to the head's; per micro-batch the logits and their gradient
    where they are that large. 0 where first touch was not measured."""
    if costs.first_touch_gbs is None:
        return 0.0, 0.0
    rate = costs.first_touch_gbs * 1e9
    big = large_tensor_bytes(m, w_b)
    tied = m.vocab_size * m.hidden_size * w_b if m.tie_embeddings else 0.0
    tied = tied if tied > MMAP_THRESHOLD_BYTES else 0.0
    logits = 2.0 * logits_bytes if logits_bytes > MMAP_THRESHOLD_BYTES else 0.0
    # the tied gradient's sum with the head's: read both, write one, from memory
    return (3.0 * big + tied) / rate + 3.0 * tied / (costs.dram_gbs * 1e9), logits / rate


def step_s(m, opt_bytes: float, w_b: float, tokens: int, costs: CpuCosts, op_s: float) -> tuple[float, float]:
    """(the optimizer step's seconds: its unfused loop and the step's fresh large tensors, the fresh memory a
    micro-batch of ``tokens`` adds: its fp32 logits and their gradient) of a CPU training step."""
    tensors = m.num_layers * (9 if m.gated_mlp else 12) + 4  # as estimate/train.train_host_s counts them
    per_step, per_micro = fresh_memory_s(m, w_b, tokens * m.vocab_size * 4.0, costs)
    return optimizer_s(opt_bytes, tensors, costs, op_s) + per_step, per_micro
