"""Time of an op list on a device: a roofline per op, GEMM wave quantization, and an execution-engine model.

Per op on the GPU:  t = max(flops / F, bytes / B, kernels * t_kernel_min)
- F: achievable matmul rate for the dtype (hardware.achievable_tflops: measured ceiling, or datasheet x efficiency),
  scaled for matmuls by wave quantization: a GEMM split into 128x128 output tiles runs in ceil(tiles / SMs) waves,
  so its useful fraction is tiles / (waves * SMs) (NVIDIA "Matrix Multiplication Background" user guide,
  "Wave Quantization"). Non-matmul FLOPs (attention softmax etc.) run on the same units at the same rate.
- B: achievable device-memory bandwidth (measured copy bandwidth, or datasheet x efficiency).
- Eager elementwise kernels (PyTorch TensorIterator: dtype casts, broadcasts, strided reads, cat) do not reach
  a plain device copy's bandwidth. On the H200 (2026-11-29 profile of a Llama-3.1-8B prefill and of a
  Llama-3.2-1B AMP training step, research/results/2026-11-29-h200/profile.json) the non-GEMM kernels moved the bytes
  counted in ops.py at 63% and 64% of the measured copy bandwidth: ELEMENTWISE_BW_FRACTION.
- Attention (SDPA flash kernels, cuDNN on Hopper) runs below the GEMM rate: measured causal forward 430-570
  TFLOP/s at head_dim 128 and 310 at head_dim 64, forward+backward 350-490 and 300, against 737 for GEMMs
  (same profile): ATTENTION_EFFICIENCY by head_dim.
- t_kernel_min: the shortest a kernel takes from launch to completion on the GPU, about 2-3 us on recent NVIDIA parts
  (launch latency plus the ramp of one wave). It dominates small-batch decode once host overhead is gone.

The engine (engines.py) decides how the host feeds the GPU: its host costs per kernel, forward and step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscope.estimate.engines import EngineModel
from gpuscope.estimate.ops import Op

TILE = 128
ELEMENTWISE_BW_FRACTION = 0.63
ATTENTION_EFFICIENCY = {64: 0.42, 128: 0.62}  # fraction of the GEMM rate, by head_dim (<=64, >=128 interpolated)


# SDPA given an explicit boolean mask instead of is_causal=True: 114 against 335 TFLOP/s (causal FLOPs counted
# the same way) at Phi-3-mini's shape (b4, 32 heads, s 2048, head_dim 96) on the H200
# (research/results/2026-11-29-h200-b/moe_attn.json, research/scripts/gpu_moe_attn_check.py).
MASKED_SDPA_FRACTION = 114.0 / 335.0


def attention_efficiency(head_dim: int) -> float:
    lo, hi = ATTENTION_EFFICIENCY[64], ATTENTION_EFFICIENCY[128]
    if head_dim <= 64:
        return lo
    if head_dim >= 128:
        return hi
    return lo + (hi - lo) * (head_dim - 64) / 64


def sm_count(hw) -> int | None:
    """Multiprocessors (compute units) of the device, for wave quantization: the catalog's ``sm_count``
    (specs/data/hardware.toml; a TOML on a ``base`` inherits it); None where it gives none (no wave model)."""
    return getattr(hw, "sm_count", None)


def wave_efficiency(shape: tuple[int, int, int] | None, sms: int | None) -> float:
    if shape is None or sms is None:
        return 1.0
    m, n, _ = shape
    tiles = math.ceil(m / TILE) * math.ceil(n / TILE)
    waves = math.ceil(tiles / sms)
    return tiles / (waves * sms)


@dataclass(frozen=True)
class OpTime:
    name: str
    kind: str
    count: int
    gpu_s: float  # all repeats of this op
    bound: str  # "compute", "memory" or "latency"
    flops: float
    bytes: float
    kernels: int


def time_ops(ops: list[Op], tflops: float, bw_gbs: float, engine: EngineModel, sms: int | None,
             head_dim: int = 128) -> list[OpTime]:
    out = []
    for o in ops:
        if engine.cpu is not None:  # the device is the CPU: estimate/cpu.py's model
            from gpuscope.estimate.cpu import op_seconds

            t, bound = op_seconds(o, tflops, engine.cpu)
            out.append(OpTime(o.name, o.kind, o.count, t * o.count, bound, o.flops * o.count, o.bytes * o.count,
                              o.kernels * o.count))
            continue
        if o.kind == "matmul":
            f_rate = tflops * 1e12 * wave_efficiency(o.matmul_shape, sms)
        elif o.kind == "attention":
            f_rate = tflops * 1e12 * attention_efficiency(head_dim)
            if o.name.startswith("attention_masked"):
                f_rate *= MASKED_SDPA_FRACTION
        else:
            f_rate = tflops * 1e12
        t_c = o.flops / f_rate if o.flops else 0.0
        bw = bw_gbs * 1e9 * (ELEMENTWISE_BW_FRACTION if o.kind in ("elementwise", "cache") else 1.0)
        t_m = o.bytes / bw + (o.kernels * engine.matmul_tail_s if o.kind == "matmul" else 0.0)
        kernels = 1 if (engine.fused and o.kind in ("elementwise", "cache")) else o.kernels
        t_l = kernels * (engine.matmul_min_s if o.kind in ("matmul", "attention") else engine.kernel_min_s)
        t = max(t_c, t_m, t_l)
        bound = "compute" if t == t_c and t_c > 0 else ("memory" if t == t_m else "latency")
        out.append(OpTime(o.name, o.kind, o.count, t * o.count, bound, o.flops * o.count, o.bytes * o.count,
                          o.kernels * o.count))
    return out


def forward_time(ops: list[Op], tflops: float, bw_gbs: float, engine: EngineModel, sms: int | None,
                 graph: bool, head_dim: int = 128) -> tuple[float, float, float, list[OpTime]]:
    """(wall seconds, GPU seconds, host seconds, per-op times) of one forward."""
    times = time_ops(ops, tflops, bw_gbs, engine, sms, head_dim)
    gpu = sum(t.gpu_s for t in times)
    kernels = sum(t.kernels for t in times)
    host = 0.0 if graph else kernels * engine.launch_s + engine.forward_s
    if engine.cpu is not None:  # a CPU runs each op after dispatching it: in series (estimate/cpu.py)
        return gpu + host, gpu, host, times
    return max(gpu, host), gpu, host, times
