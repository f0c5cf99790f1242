"""Time of a component's forward: the roofline per op (estimate/roofline.time_ops) under the host's launch floor.

Per op on the GPU (roofline.py): t = max(flops / F, bytes / B, kernels x t_min), with
- GEMMs (Linear) at the dtype's achievable rate x wave quantization (roofline.wave_efficiency);
- convolutions as implicit GEMMs (M = images x output pixels, N = out channels, K = in channels x kernel volume)
  at CONV_EFFICIENCY x that rate, plus cuDNN's NCHW<->NHWC layout copies around each and the bias added by a
  kernel of its own (trace.py). CONV_EFFICIENCY 1.0: the SDXL VAE decode's convolution kernels alone (its H200
  kernel table, 1024x1024 fp16: 13.28 ms for 9.89 TFLOP, 745 TFLOP/s, 1.05 x the 737 of a cuBLAS GEMM; kept at
  the GEMM rate). It was 0.7, set on SDXL UNet totals that hid the norms' and broadcasts' own time; checks: the
  SVD-XT UNet's convolutions at 14 and 20 frames (planned 45 / 63 ms, measured at least 36 / 50 in the top 25).
- attention (SDPA flash / memory-efficient) at roofline.attention_efficiency(head_dim) x the GEMM rate (measured
  on the H200 for causal prefill, causal FLOPs counted; bidirectional attention's tiles are all full, so this is a
  floor on its rate);
- memory-bound kernels by their kernel path (trace.KOp.path, ``kernel_paths``), as fractions of the copy
  bandwidth, each from the H200 kernel tables of research/results/2026-12-02-h200-c/diffusion.md:
  * "vec", TensorIterator's vectorized kernels on these large tensors (SiLU, contiguous adds, scalar multiplies):
    VEC_BW_FRACTION 1.0, the copy rate (the SDXL VAE decode's moved the bytes the walkers count at 1.08 x it; kept
    at the copy rate), not the LLM profile's 0.63 (roofline.ELEMENTWISE_BW_FRACTION, short kernels); checks:
    SVD-XT's, the SDXL UNet's.
  * "nonvec", an operand broadcast or strided (a conv bias, a time embedding, adaLN's shift and scale, a permuted
    view copied, an add of a channels-last and an NCHW tensor): ``elementwise_kernel<128, 4>``; "gn_apply",
    GroupNorm's apply (its scale and shift broadcast): NONVEC_BW_FRACTION 0.37 (the SDXL VAE decode's apply, bias
    and mixed-layout adds, 10.7 ms); checks: SVD-XT's 208 adds, the SDXL UNet's at 768x768.
  * GEGLU's GELU and gating multiply, both on ``chunk(2, dim=-1)`` halves: GEGLU_BW_FRACTION 0.324 and 0.51
    (SVD-XT's UNet at 14 frames: the GELU kernel 26.1 ms for 34.9 GB; the multiplies 30.6 ms less its time
    mixer's at the non-vectorized rate); checks: SVD-XT at 20 frames, the SDXL UNet (70 each).
  * "upsample" / "upsample_nhwc", nearest 2x interpolation's own kernels (upsample_nearest2d_out_frame, and its
    channels-last variant where the input is channels-last and holds more than one image: blocks.upsample):
    UPSAMPLE_BW_FRACTION 0.27 and 0.097 of the copy bandwidth, for the bytes the walkers count (the SDXL VAE
    decode at 1024x1024 batch 1, 0.97 ms for 1.09 GB; at 768x768 batch 2, 3.08 ms for 1.23 GB).
  * "transpose", a channels-last tensor copied to NCHW by TensorIterator (GroupNorm's ``input.contiguous()`` on
    a VAE's channels-last stream, blocks.resnet2d): the reads stride by the channel count, so each warp's loads
    touch as many cache lines as threads. TRANSPOSE_BW_FRACTION 0.063, set by the SDXL VAE decode at 768x768
    batch 2 (17 copies, 18.95 ms for 4.94 GB, most of them 75-600 MB at 384-768 pixels); the same decode at
    1024x1024 batch 1 copies four 16 MB tensors (L2-resident) at 0.12. No independent check yet.
  * "layer_norm", the native LayerNorm kernel (one block of 128 threads per row): LAYER_NORM_BW_FRACTION 0.25
    (SVD-XT's 112 LayerNorms at 14 frames, 20.1 ms for 20.4 GB); checks: 20 frames, the SDXL UNet's 210.
  * "gn_moments", GroupNorm's RowwiseMomentsCUDAKernel: one 512-thread block per (image, group) row walking it
    with one load in flight per thread (a Welford loop), so latency-bound: each block reads GN_BLOCK_FRACTION
    of an SM's share of the copy bandwidth (in 16-bit elements: the rate is per element, whatever the dtype),
    GN_BLOCKS_PER_SM of them resident (2,048 threads), in ceil(rows / (SMs x 4)) waves of one row each. At batch 1
    a GroupNorm has 32 rows for 132 SMs: the SDXL VAE decode at 1024x1024 spends 44.7 ms of its 85.6 in them
    (it sets 0.082: 1.29 G elements/s a block); checks: the same decode at 768x768 batch 2 (64 rows, -2%), SVD-XT
    at 14 and 20 frames (64 and 896-1,280 rows, -4% and -6%).
- attention wider than WIDE_HEAD_DIM (the VAEs' single-head mid-block attention, head_dim 512): PyTorch's flash
  kernels stop at head_dim 256, so SDPA runs the memory-efficient (cutlass) kernel, at WIDE_HEAD_FRACTION 0.2 of
  the dtype's GEMM rate (the SDXL VAE decode's one fmha_cutlassF kernel: 3.68 ms for 0.55 TFLOP, 149 TFLOP/s;
  check: 768x768 batch 2, -22%). In fp32 that kernel multiplies in 3xTF32 on Tensor Cores (PyTorch
  mem_eff_attention/gemm_kernel_utils.h, DefaultGemmType<Sm80+, float>: OpMultiplyAddFastF32):
  WIDE_HEAD_FP32_FRACTION 0.111 of the TF32 rate (the fp32 decode's fmha_cutlassF_f32 kernel: 13.48 ms, 40.8
  TFLOP/s; 1.8x under the fp16 kernel's fraction at TF32, not the 3x its MMA count would give). Before the kernel
  tables the wide head was 0.22 of the fp32 rate in every dtype, attributed by elimination: the fp16 table put
  that time in GroupNorm's moments instead.
- In fp32 the element-bound paths (non-vectorized, GroupNorm's apply, transposing copies, upsampling, GEGLU) and
  cuDNN's layout copies move FP32_ELEMENT_BOUND_FACTOR 1.64 x their 16-bit bytes a second (their time follows the
  element count more than the bytes: the SDXL VAE decode at 1024x1024 in fp32, 22.3 ms for its non-vectorized
  adds, apply and layout copies against 18.6 ms in fp16 for half the bytes); the vectorized kernels and the
  moments are as in 16-bit (bytes, and elements). Check: the same decode inside the SDXL pipeline (the first set). Measured on NVIDIA only; other
  vendors' kernels are assumed to behave the same way.

In fp32, convolutions run on TF32 Tensor Cores where the device has them: PyTorch's
torch.backends.cudnn.allow_tf32 defaults to True (matmuls' allow_tf32 defaults to False, so Linear layers stay
fp32).

Host (engines.engine_for("eager", hw): 17.2 us a kernel, or a calibrated TOML's host_launch_s): every kernel is
launched from Python through diffusers' modules, launch_s each, plus forward_s per forward, and the host runs
ahead of the GPU on one in-order stream. ``timeline`` walks the ops in forward order: an op's kernels start when
the host has launched them and the GPU has finished the op before, so a forward takes between max(GPU, host)
and their sum; where the two are close, the GPU idles while the host launches a run of small kernels (the host
never waits: no sync inside a forward). A small batch is host-bound: SDXL's UNet at 512x512, batch 1 with CFG,
traces 2,091 kernels (cuDNN's layout copies, GroupNorm's three, included: trace.py; the profile counted 2,270),
36 ms of host time at 17.2 us each against 15 ms of GPU work. Checks (research/results/2026-12-02-h200/
diffusion.md, 2026-12-02-h200-c/diffusion.md): the GPU time against the H200 profile's device-busy time of the
same forwards (within 8.4% at all eight SDXL UNet points, 16-268 ms); on that machine's host, a gVisor VM whose
launch costs ~45 us (an LLM decode forward's host time per kernel, measured apart:
research/results/2026-12-02-h200/h200-gvisor-host.toml), the host-bound steps (within 14% but one, -21%).

Per denoising step the pipeline adds its own kernels: the CFG batch cat and the guidance combine (chunk, sub, mul,
add), the scheduler's step (EulerDiscrete / FlowMatchEuler: sigma lookups, a multiply-add, dtype casts):
STEP_KERNELS, launched like the rest.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from gpuscope.estimate.engines import EngineModel
from gpuscope.estimate.ops import Op
from gpuscope.estimate.roofline import ELEMENTWISE_BW_FRACTION, OpTime, attention_efficiency, sm_count, time_ops

CONV_EFFICIENCY = 1.0  # cuDNN's implicit-GEMM kernels / the GEMM rate (module docstring)
WIDE_HEAD_DIM = 256  # the largest head_dim of PyTorch's flash-attention kernels
WIDE_HEAD_FRACTION = 0.2  # a wider head's attention rate / the dtype's achievable GEMM rate (module docstring)
VEC_BW_FRACTION = 1.0  # TensorIterator's vectorized kernels on these large tensors / copy bandwidth (docstring)
NONVEC_BW_FRACTION = 0.37  # TensorIterator's non-vectorized kernels / copy bandwidth (module docstring)
GEGLU_BW_FRACTION = {"geglu_gelu": 0.324, "geglu_mul": 0.51}  # GEGLU's two kernels on chunk halves (docstring)
UPSAMPLE_BW_FRACTION = {"upsample": 0.27, "upsample_nhwc": 0.097}  # nearest 2x, NCHW and NHWC kernels (docstring)
ELEMENT_BOUND = ("nonvec", "gn_apply", "transpose", "upsample", "upsample_nhwc", "geglu_gelu", "geglu_mul")
FP32_ELEMENT_BOUND_FACTOR = 1.64  # those paths and cuDNN's layout copies: bytes/s in fp32 / in 16-bit (docstring)
WIDE_HEAD_FP32_FRACTION = 0.111  # the wide head's fp32 (3xTF32) kernel / the achievable TF32 rate (docstring)
TRANSPOSE_BW_FRACTION = 0.063  # a channels-last -> NCHW copy through TensorIterator / copy bandwidth (docstring)
LAYER_NORM_BW_FRACTION = 0.25  # the native LayerNorm kernel / copy bandwidth (module docstring)
GN_BLOCKS_PER_SM = 4  # RowwiseMomentsCUDAKernel: 512-thread blocks, 2,048 resident threads per SM
GN_BLOCK_FRACTION = 0.082  # one moments block's 16-bit element rate x 2 B / one SM's share of the bandwidth
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
    """How much longer than roofline's attention rate a head of ``head_dim`` takes (1 up to WIDE_HEAD_DIM; in fp32
    the wide head's 3xTF32 kernel is faster than roofline's fp32 rate)."""
    if head_dim <= WIDE_HEAD_DIM:
        return 1.0
    rate = WIDE_HEAD_FRACTION * hw.achievable_tflops(dtype)
    if dtype == "fp32" and hw.supports("tf32"):  # the fp32 kernel multiplies in 3xTF32 (module docstring)
        rate = WIDE_HEAD_FP32_FRACTION * hw.achievable_tflops("tf32")
    return hw.achievable_tflops(dtype) * attention_efficiency(head_dim) / rate  # < 1 in fp32: faster than SIMT


def _path_fraction(o: Op) -> float | None:
    """The fraction of the copy bandwidth an elementwise op's kernel path reaches (module docstring); None for
    GroupNorm's moments (priced per row) and for what is not elementwise."""
    path = getattr(o, "path", "vec")
    if o.kind != "elementwise" or path == "gn_moments":
        return None
    if o.name.endswith(".layout"):
        return ELEMENTWISE_BW_FRACTION  # cuDNN's transforms: roofline's elementwise rate
    return {"vec": VEC_BW_FRACTION, "nonvec": NONVEC_BW_FRACTION, "gn_apply": NONVEC_BW_FRACTION,
            "transpose": TRANSPOSE_BW_FRACTION, "layer_norm": LAYER_NORM_BW_FRACTION, **GEGLU_BW_FRACTION,
            **UPSAMPLE_BW_FRACTION}.get(path)


def kernel_paths(ops: list[Op], hw, sms: int | None, elem_b: float = 2.0) -> list[Op]:
    """Memory-bound ops priced by their kernel path (trace.KOp.path; module docstring), as the bytes that take
    their time at roofline's elementwise rate: each path at its fraction of the copy bandwidth (the element-bound
    ones FP32_ELEMENT_BOUND_FACTOR faster in bytes for 4-byte elements); GroupNorm's moments at one block per row,
    GN_BLOCKS_PER_SM resident per SM, each reading at GN_BLOCK_FRACTION of an SM's share of the bandwidth
    (latency-bound: counted in elements), or at the elementwise rate if that is slower."""
    bw = hw.achievable_bw_gbs() * 1e9
    out = []
    for o in ops:
        frac = _path_fraction(o)
        if frac is not None:
            bound = o.name.endswith(".layout") or getattr(o, "path", "vec") in ELEMENT_BOUND
            frac *= FP32_ELEMENT_BOUND_FACTOR if bound and elem_b >= 4 else 1.0
            o = replace(o, bytes=o.bytes * ELEMENTWISE_BW_FRACTION / frac)
        elif getattr(o, "path", "") == "gn_moments" and sms:
            per_block = GN_BLOCK_FRACTION * bw / sms / 2.0  # elements a second
            waves = math.ceil(o.rows / (sms * GN_BLOCKS_PER_SM))
            t = waves * (o.elems / o.rows) / per_block
            o = replace(o, bytes=max(o.bytes, t * ELEMENTWISE_BW_FRACTION * bw))
        out.append(o)
    return out


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
        priced = _as_roofline_ops(group, slow)
        if eager and engine.cpu is None:  # PyTorch's own GPU kernels
            priced = kernel_paths(priced, hw, sms, 4.0 if d == "fp32" else 2.0)
        for o, t in zip(group, time_ops(priced, hw.achievable_tflops(d), bw, engine, sms, hd)):
            timed[id(o)] = t
    times = [timed[id(o)] for o in ops]  # forward order
    gpu = sum(t.gpu_s for t in times) + extra_kernels * engine.kernel_min_s
    kernels = sum(o.kernels for o in ops) + extra_kernels
    host = kernels * engine.launch_s + engine.forward_s
    wall = timeline(times, engine.launch_s, engine.forward_s, extra_kernels * engine.kernel_min_s)
    return {"wall_s": wall, "gpu_s": gpu, "host_s": host, "kernels": kernels,
            "flops": sum(o.flops for o in ops), "bound": "host" if host > gpu else "gpu", "times": times,
            "classes": [kernel_class(o) for o in ops]}


def kernel_class(o: Op) -> str:
    """What kind of kernel an op runs (the classes of a --profile kernel table): conv, gemm, attention, layout
    (cuDNN's NCHW<->NHWC copies) or the op's kernel path (trace.KOp.path)."""
    if o.kind in ("conv", "attention"):
        return o.kind
    if o.kind == "matmul":
        return "gemm"
    return "layout" if o.name.endswith(".layout") else getattr(o, "path", "vec")


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
