"""Time of a component's forward: the roofline per op (estimate/roofline.time_ops) under the host's launch floor.

Per op on the GPU (roofline.py): t = max(flops / F, bytes / B, kernels x t_min), with
- GEMMs (Linear) at the dtype's achievable rate x wave quantization (roofline.wave_efficiency);
- convolutions as implicit GEMMs (M = images x output pixels, N = out channels, K = in channels x kernel volume)
  at CONV_EFFICIENCY x that rate (cuDNN's implicit-GEMM kernels gather the im2col tiles in the K-loop; NVIDIA
  "Convolutional Layers User's Guide"), plus cuDNN's NCHW<->NHWC layout copies around each (trace.py).
  CONV_EFFICIENCY 0.7 is set by the SDXL UNet's GPU time on an H200: the planned GPU time of its six
  GPU-heavy points (512x512 at batch 4 and 8, 1024x1024 at batch 1-8, CFG) against the device-busy time of
  their profiles is -0.9% on average at 0.7, max |error| 2.9% (-3.4%, max 5.3%, at the 0.8 assumed before); the SVD-XT
  UNet (temporal Conv3d, other shapes) is the check (research/results/2026-12-02-h200/diffusion.md).
- attention (SDPA flash / memory-efficient) at roofline.attention_efficiency(head_dim) x the GEMM rate (measured
  on the H200 for causal prefill, causal FLOPs counted; bidirectional attention's tiles are all full, so this is a
  floor on its rate);
- elementwise kernels at roofline.ELEMENTWISE_BW_FRACTION of the copy bandwidth.
- attention wider than WIDE_HEAD_DIM (the VAEs' single-head mid-block attention, head_dim 512): PyTorch's flash
  kernels stop at head_dim 256, so SDPA runs another kernel, taken at WIDE_HEAD_FP32_FRACTION of the device's
  fp32 rate whatever the dtype. Set by the SDXL VAE decode at 1024x1024 fp16 on an H200 (86.7 ms measured; the
  rest of the decode plans 37.3 ms, leaving 49.4 ms for its 0.55 TFLOP of attention: 11.1 TFLOP/s, 0.22 of the
  achievable fp32 49.9). Attributed by elimination, not by a kernel profile: the same decode in fp32 (inside the
  full pipeline, SDXL's force_upcast) measured 122.1 ms, ~50 ms above what its other ops plan, again; one
  dtype-blind op of that size, and only the attention changes kernel at this head_dim. Check: that fp32 decode
  plans within 2.1% with the constant (research/results/2026-12-02-h200/diffusion.md). Measured on NVIDIA only;
  other vendors' SDPA kernels are assumed to fall back the same way.

In fp32, convolutions run on TF32 Tensor Cores where the device has them: PyTorch's
torch.backends.cudnn.allow_tf32 defaults to True (matmuls' allow_tf32 defaults to False, so Linear layers stay
fp32).

Host (engines.engine_for("eager", hw): 17.2 us a kernel, or a calibrated TOML's host_launch_s): every kernel is
launched from Python through diffusers' modules, launch_s each, plus forward_s per forward, and the host runs
ahead of the GPU on one in-order stream. ``timeline`` walks the ops in forward order: an op's kernels start when
the host has launched them and the GPU has finished the op before, so a forward takes between max(GPU, host)
and their sum; where the two are close, the GPU idles while the host launches a run of small kernels (the host
never waits: no sync inside a forward). A small batch is host-bound: SDXL's UNet at 512x512, batch 1 with CFG,
traces 2,139 kernels (cuDNN's layout copies included, trace.py), 37 ms of host time at 17.2 us each against
15 ms of GPU work. Checks (research/results/2026-12-02-h200/diffusion.md): the GPU time against the H200
profile's device-busy time of the same forwards (within 12.3% at all eight SDXL UNet points, 16-268 ms); on
that machine's host, a gVisor VM whose launch costs ~45 us (an LLM decode forward's host time per kernel,
measured apart: research/results/2026-12-02-h200/h200-gvisor-host.toml), the host-bound steps (within 14% but
one, -19%).

Per denoising step the pipeline adds its own kernels: the CFG batch cat and the guidance combine (chunk, sub, mul,
add), the scheduler's step (EulerDiscrete / FlowMatchEuler: sigma lookups, a multiply-add, dtype casts):
STEP_KERNELS, launched like the rest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from gpuscope.estimate.engines import EngineModel
from gpuscope.estimate.ops import Op
from gpuscope.estimate.roofline import OpTime, attention_efficiency, sm_count, time_ops

CONV_EFFICIENCY = 0.7
WIDE_HEAD_DIM = 256  # the largest head_dim of PyTorch's flash-attention kernels
WIDE_HEAD_FP32_FRACTION = 0.22  # a wider head's attention rate / achievable fp32 rate (module docstring)
STEP_KERNELS = 16  # the pipeline's own kernels per denoising step (see the module docstring)


def _as_roofline_ops(ops: list[Op], wide_slowdown: float = 1.0) -> list[Op]:
    """Convolutions become GEMMs whose FLOPs are inflated by 1 / CONV_EFFICIENCY (same M, N, K); attention ops
    of a head wider than WIDE_HEAD_DIM have theirs inflated by ``wide_slowdown`` (flash rate / their rate)."""
    out = []
    for o in ops:
        if o.kind == "conv":
            o = replace(o, kind="matmul", flops=o.flops / CONV_EFFICIENCY)
        elif o.kind == "attention" and wide_slowdown != 1.0:
            o = replace(o, flops=o.flops * wide_slowdown)
        out.append(o)
    return out


def wide_head_slowdown(hw, dtype: str, head_dim: int) -> float:
    """How much longer than roofline's attention rate a head of ``head_dim`` takes (1 up to WIDE_HEAD_DIM)."""
    if head_dim <= WIDE_HEAD_DIM or not hw.supports("fp32"):
        return 1.0
    flash = hw.achievable_tflops(dtype) * attention_efficiency(head_dim)
    return max(1.0, flash / (WIDE_HEAD_FP32_FRACTION * hw.achievable_tflops("fp32")))


def head_dim_of(heads_dims: list[int]) -> int:
    return Counter(heads_dims).most_common(1)[0][0] if heads_dims else 64


def _dtypes(dtype: str, hw) -> tuple[str, str, str]:
    """(convolution, GEMM, attention / elementwise) dtypes of a forward in ``dtype``: fp32 convolutions in TF32
    where the device has it (see the module docstring); fp8 (planner only): GEMMs and convolutions in fp8, the
    attention core and the elementwise kernels in fp16 (TensorRT's fp8 UNet quantizes the GEMM and conv inputs;
    activations stay 16-bit)."""
    if dtype == "fp32" and hw.supports("tf32"):
        return "tf32", "fp32", "fp32"
    if dtype == "fp8":
        return "fp8", "fp8", "fp16"
    return dtype, dtype, dtype


def forward_seconds(ops: list[Op], hw, dtype: str, heads_dims: list[int], engine: EngineModel | None = None,
                    extra_kernels: int = 0, eager: bool = True) -> dict:
    """(wall, gpu, host seconds, kernels, FLOPs, per-op times) of one forward of a component. ``eager``: PyTorch's
    own kernels (False: the fp8 path, a TensorRT engine, whose attention has no flash head_dim limit)."""
    engine = engine or EngineModel()
    hd, sms, bw = head_dim_of(heads_dims), sm_count(hw), hw.achievable_bw_gbs()
    conv_dt, gemm_dt, base_dt = _dtypes(dtype, hw)
    groups: dict[str, list[Op]] = {}
    for o in ops:
        d = conv_dt if o.kind == "conv" else gemm_dt if o.kind == "matmul" else base_dt
        groups.setdefault(d, []).append(o)
    timed: dict[int, OpTime] = {}
    for d, group in groups.items():
        slow = wide_head_slowdown(hw, d, hd) if eager else 1.0
        for o, t in zip(group, time_ops(_as_roofline_ops(group, slow), hw.achievable_tflops(d), bw, engine, sms, hd)):
            timed[id(o)] = t
    times = [timed[id(o)] for o in ops]  # forward order
    gpu = sum(t.gpu_s for t in times) + extra_kernels * engine.kernel_min_s
    kernels = sum(o.kernels for o in ops) + extra_kernels
    host = kernels * engine.launch_s + engine.forward_s
    wall = timeline(times, engine.launch_s, engine.forward_s, extra_kernels * engine.kernel_min_s)
    return {"wall_s": wall, "gpu_s": gpu, "host_s": host, "kernels": kernels,
            "flops": sum(o.flops for o in ops), "bound": "host" if host > gpu else "gpu", "times": times}


def timeline(times: list[OpTime], launch_s: float, forward_s: float, tail_gpu_s: float = 0.0) -> float:
    """Wall time of one eager forward on one in-order stream: the host spends forward_s, then launch_s per kernel
    in forward order; an op's GPU work starts once its first kernel is launched and the op before has finished,
    and ends no sooner than its last kernel's launch plus that kernel's share of the op. Between max(GPU, host)
    and their sum; no constant of its own."""
    host = forward_s
    end = 0.0
    for t in times:
        k = max(1, t.kernels)
        start = max(end, host + launch_s)
        host += k * launch_s
        end = max(start + t.gpu_s, host + t.gpu_s / k)
    return max(host, end + tail_gpu_s)


def top_ops(times: list[OpTime], n: int = 8) -> list[dict]:
    """The ops that take the most GPU time, grouped by their name without block indices."""
    groups: dict[str, list[float]] = {}
    for t in times:
        key = ".".join(p for p in t.name.split(".") if not p.isdigit())
        g = groups.setdefault(key, [0.0, 0.0, 0])
        g[0] += t.gpu_s
        g[1] += t.flops
        g[2] += t.kernels
    rows = sorted(groups.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"op": k, "gpu_s": v[0], "flops": v[1], "kernels": int(v[2])} for k, v in rows]
