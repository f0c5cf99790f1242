"""Time of an op list on a device: a roofline per op, GEMM wave quantization, and an execution-engine model.

Per op on the GPU:  t = max(flops / F, bytes / B, kernels * t_kernel_min)
- F: achievable matmul rate for the dtype (hardware.achievable_tflops: measured ceiling, or datasheet x efficiency),
  scaled for matmuls by wave quantization: a GEMM split into 128x128 output tiles runs in ceil(tiles / SMs) waves,
  so its useful fraction is tiles / (waves * SMs) (NVIDIA "Matrix Multiplication Background" user guide,
  "Wave Quantization"). Non-matmul FLOPs (attention softmax etc.) run on the same units at the same rate.
- B: achievable device-memory bandwidth (measured copy bandwidth, or datasheet x efficiency).
- t_kernel_min: the shortest a kernel takes from launch to completion on the GPU, about 2-3 us on recent NVIDIA parts
  (launch latency plus the ramp of one wave). It dominates small-batch decode once host overhead is gone.

The engine decides how the host feeds the GPU:
- ``eager``: every kernel is launched from Python through the PyTorch dispatcher; the host spends t_launch per kernel
  (dispatch + Python module overhead) and a fixed t_step per generated token (generate's logits processing, stopping
  criteria, cache bookkeeping). The host runs ahead asynchronously, so a forward takes max(GPU time, host time).
- ``graph``: CUDA graphs / torch.compile with a static cache: one launch per forward, no Python per kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuscope.estimate.ops import Op

# Streaming multiprocessors (or compute units) per device, for wave quantization; vendor architecture documents.
SM_COUNT = {
    "h100": 132, "h200": 132, "h800": 132, "h20": 78, "b200": 148, "a100": 108, "a800": 108, "v100": 80,
    "l40s": 142, "l4": 58, "t4": 40, "rtx_3090": 82, "rtx_4090": 128, "rtx_5090": 170, "rtx_6000": 142,
    "mi300x": 304, "mi325x": 304, "mi250x": 220, "a770": 32,
}
TILE = 128


@dataclass(frozen=True)
class EngineModel:
    """Host-side costs. Defaults measured on the lent H200 host (see results/README.md); override per machine."""

    name: str = "eager"
    launch_s: float = 8e-6  # host time per kernel in eager PyTorch + HF module overhead
    step_s: float = 0.0  # host time per generated token outside the model forward (generate loop)
    kernel_min_s: float = 2.5e-6  # GPU-side floor per kernel


def sm_count(hw_key: str) -> int | None:
    k = hw_key.lower()
    for name, n in SM_COUNT.items():
        if name in k:
            return n
    return None


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


def time_ops(ops: list[Op], tflops: float, bw_gbs: float, engine: EngineModel, sms: int | None) -> list[OpTime]:
    out = []
    for o in ops:
        f_rate = tflops * 1e12 * (wave_efficiency(o.matmul_shape, sms) if o.kind == "matmul" else 1.0)
        t_c = o.flops / f_rate if o.flops else 0.0
        t_m = o.bytes / (bw_gbs * 1e9)
        t_l = o.kernels * engine.kernel_min_s
        t = max(t_c, t_m, t_l)
        bound = "compute" if t == t_c and t_c > 0 else ("memory" if t == t_m else "latency")
        out.append(OpTime(o.name, o.kind, o.count, t * o.count, bound, o.flops * o.count, o.bytes * o.count,
                          o.kernels * o.count))
    return out


def forward_time(ops: list[Op], tflops: float, bw_gbs: float, engine: EngineModel, sms: int | None,
                 graph: bool) -> tuple[float, float, float, list[OpTime]]:
    """(wall seconds, GPU seconds, host seconds, per-op times) of one forward."""
    times = time_ops(ops, tflops, bw_gbs, engine, sms)
    gpu = sum(t.gpu_s for t in times)
    kernels = sum(t.kernels for t in times)
    host = 0.0 if graph else kernels * engine.launch_s
    return max(gpu, host), gpu, host, times
