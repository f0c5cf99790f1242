"""The matmul microbenchmark (the method: measure/micro/bench.py's docstring): the shapes of each mode (a sweep with the
public table's best shapes and wave-quantised ones for this GPU), operands per dtype, the sustained rate over queued
iterations and the achievable rate on mamf-finder v4's terms (bursts after an idle gap)."""

from __future__ import annotations

import contextlib
import functools
import math
import statistics

import torch

from gpuscope.measure.device.device import Device, is_oom
from gpuscope.measure.micro.timing import L2Flusher, Settings, burst_times, stats, time_queued

MATMUL_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


# 8-bit operands (fp8, int8) do twice the work per byte of a 16-bit GEMM's tile at twice the tensor-core rate:
# a tile's fixed costs (prologue, epilogue, the bf16/int32 output write) weigh twice as much, and a long K is what
# amortises them (tilelang's fp8 table on an H800 at M = N = 8192: 1,378 TFLOP/s at K 4096, 1,461 at 8192, 1,523 at
# 16384). The low-precision dtypes add these shapes to each mode's set; the other dtypes keep theirs.
# Quick mode also gets 2048x2048x13312: the 8-bit sweep on an H200 (research/results/2026-12-02-h200/call3,
# micro_lowp.json: 15 shapes) put fp8's best there with either accumulation, 1,376 TFLOP/s (1,496 with fast
# accumulation) against at most 1,308 (1,423) at the other 14, and the quick set without it read 1,304 at 4096^3:
# 87% of the sweep's best. A small M with a long K (256 output tiles of 128x128 and 104 K-steps of 128 each) is
# also where the public table's H100 peaks in bf16 (PUBLISHED_BEST). int8 reads 874 TOPS there, below its 938 at
# 8192^3, so its quick figure does not move.
LOWP_DTYPES = ("fp8", "int8")
LOWP_QUICK = [(8192, 8192, 16384), (2048, 2048, 13312)]
LOWP_SWEEP = [(4096, 4096, 16384), (8192, 8192, 16384), (16384, 8192, 8192), (8192, 16384, 16384),
              (16384, 16384, 8192), (4096, 8192, 16384)]


def matmul_shapes(mode: str, dev: Device, sms: int | None = None,
                  dtype: str | None = None) -> list[tuple[int, int, int]]:
    """The matmul shapes of a mode; ``sms``: the GPU's multiprocessor count, which adds :func:`wave_shapes` to the
    sweep; ``dtype`` fp8 / int8 adds the long-K shapes 8-bit GEMMs peak at (LOWP_QUICK, LOWP_SWEEP)."""
    lowp = dtype in LOWP_DTYPES and dev.type != "cpu"
    if dev.type == "cpu":
        if mode == "quick":
            return [(256, 256, 256), (512, 512, 512)]
        return [(s, s, s) for s in range(128, 1025, 128)] + [(1024, 512, 1024), (512, 1024, 2048)]
    if mode == "quick":
        return [(4096, 4096, 4096), (8192, 8192, 8192)] + (LOWP_QUICK if lowp else [])
    # Squares, then a grid of rectangular shapes (M 4-8K, N 8-18K, K 2-8K), as mamf-finder sweeps M, N and K
    # rather than squares alone: the best rate need not sit at a square size (tile waves fill differently).
    squares = [(s, s, s) for s in range(1024, 16385, 1024)]
    grid = [(m, n, k) for m in (4096, 6144, 8192) for n in (8192, 12288, 16384, 17920)
            for k in (2048, 2816, 4096, 8192)]
    rect = [(16384, 8192, 4096), (4096, 14336, 4096), (8192, 28672, 4096)]
    waves = wave_shapes(sms) if sms else []
    extra = LOWP_SWEEP if lowp else []
    return list(dict.fromkeys(squares + grid + rect + PUBLISHED_BEST + waves + extra))  # in order, each once


def wave_shapes(sms: int, tile=(128, 256), waves=(1, 2, 3, 4), ks=(4096, 6144, 8192, 12288),
                lo: int = 1024, hi: int = 20480) -> list[tuple[int, int, int]]:
    """Shapes whose output fills whole waves of this GPU: ``ceil(M/tm) * ceil(N/tn) = w * sms`` output tiles.

    A GEMM kernel computes one ``tm x tn`` output tile per thread block and runs ``sms`` blocks at a time, so a
    last, partial wave costs a full one ("wave quantization", NVIDIA's Matrix Multiplication Background User's
    Guide; arXiv:2401.14489 section 3). For each wave count the most square (M, N) made of whole tiles, and its
    transpose, at each K (K sets the arithmetic intensity, not the tiling). (128, 256) is a typical cuBLAS tile on
    Hopper; a wrong guess only changes which shapes are tried, never a measured rate. On an H200 (132 SMs) one
    wave is 1536x2816 or 2816x1536."""
    tm, tn = tile
    out = []
    for w in waves:
        blocks = w * sms
        pairs = [(tm * p, tn * (blocks // p)) for p in range(1, blocks + 1) if blocks % p == 0]
        pairs = [(m, n) for m, n in pairs if lo <= m <= hi and lo <= n <= hi]
        if not pairs:
            continue
        m, n = min(pairs, key=lambda mn: abs(math.log(mn[0] / mn[1])))
        for k in ks:
            out += [(m, n, k), (n, m, k)]
    return list(dict.fromkeys(out))


# The best bf16 shapes the public MAMF table lists (stas00/ml-engineering, compute/accelerator/README.md, "Maximum
# Achievable Matmul FLOPS comparison table": mean of 100 iterations after 50 warm-up ones per shape): H100 SXM
# 794.5 TFLOP/s at 2048x2048x13312 (an earlier run: 792.1 at 6144x17920x2816), GH200 828.6 at 1024x15360x4096 (821.0
# at 11264x19712x1536), A100 SXM 271.2 at 1024x10240x5120, A100 PCIe 252.9 at 2048x5120x6144. Small M with a long K
# is where Hopper peaks there, and the grid above has none: they join the thorough sweep.
PUBLISHED_BEST = [(2048, 2048, 13312), (6144, 17920, 2816), (1024, 15360, 4096), (11264, 19712, 1536),
                  (1024, 10240, 5120), (2048, 5120, 6144)]


def parse_shapes(spec: str) -> list[tuple[int, int, int]]:
    """``"2048x2048x13312,1024x15360x4096"`` -> [(2048, 2048, 13312), (1024, 15360, 4096)] (MxNxK)."""
    out = []
    for item in str(spec).split(","):
        item = item.strip().lower()
        if not item:
            continue
        parts = item.split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"shape '{item}' is not MxNxK with three positive integers (e.g. 2048x2048x13312)")
        out.append(tuple(int(p) for p in parts))
    if not out:
        raise ValueError("no shape given (MxNxK, comma-separated)")
    return out


def dtype_support(dev: Device, dtype: str) -> str | None:
    """None when ``dtype`` can run on ``dev``, else the reason it cannot."""
    if dtype not in MATMUL_DTYPES:
        return f"unknown dtype '{dtype}' (allowed: {', '.join(MATMUL_DTYPES)})"
    if dtype == "tf32" and dev.type != "cuda":
        return "tf32 is a CUDA tensor-core mode"
    if dtype == "fp8":
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            return "this torch has no float8 matmul"
        if dev.type == "cuda" and torch.cuda.get_device_capability(dev.index()) < (8, 9):
            return "fp8 matmul needs compute capability 8.9 or newer"
    return None


@contextlib.contextmanager
def _tf32(enabled: bool):
    m = torch.backends.cuda.matmul
    old = m.allow_tf32
    m.allow_tf32 = enabled
    try:
        yield
    finally:
        m.allow_tf32 = old


def _generator(dev: Device, seed: int) -> torch.Generator:
    try:
        return torch.Generator(device=dev.torch_device).manual_seed(seed)
    except (RuntimeError, TypeError):  # a backend without device generators: drawn on the CPU, copied over
        return torch.Generator().manual_seed(seed)


def _operands(dtype: str, m: int, n: int, k: int, dev: Device, gen: torch.Generator, b_layout: str = "col"):
    """Fresh random operands, drawn on the device itself where it has a generator (a CPU randn of two 16384^2
    matrices takes seconds), else on the CPU and copied.

    Layouts (why the 8-bit ones are what they are): A is row-major (m, k); B is (k, n) and, for fp8 and int8,
    COLUMN-major (the transpose of a contiguous (n, k) tensor), which is how a linear layer's weight (out, in)
    enters ``x @ w.t()``. cuBLASLt runs its 8-bit tensor-core kernels (IMMA for int8, QMMA for fp8) in the "TN"
    layout only: A transposed, B not, in its column-major terms, which is row-major A times column-major B here
    (cuBLAS documentation, cublasLtMatmul: "To use FP8 kernels ... A must be transposed and B non-transposed (The
    TN format)"; the same holds for the int8 IMMA kernels). torch._scaled_mm refuses any other B; torch._int_mm
    accepts a row-major B but then hands cuBLASLt an "NN" problem, which on an H200 ran at 128 TOPS against a
    1,979 TOPS dense peak in every stored run (research/results/2026-11-30-h200-j): not the IMMA path. ``b_layout
    "row"`` keeps that layout for int8, so research/scripts/gpu_micro_lowp.py can show the difference."""
    d = dev.torch_device
    where = d if gen.device.type == d.type else torch.device("cpu")

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen, device=where, dtype=dtype).to(d)

    if dtype == "int8":
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=gen, device=where).to(d)
        if b_layout == "row":
            return a, torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=gen, device=where).to(d)
        b = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=gen, device=where).to(d).t()
        return a, b
    if dtype == "fp8":
        a = randn(m, k).to(torch.float8_e4m3fn)
        b = randn(n, k).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        return a, b
    tdt = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    return randn(m, k, dtype=tdt), randn(k, n, dtype=tdt)


def _mm(dtype: str, dev: Device, fast_accum: bool = False):
    """The matmul of a dtype. fp8: per-tensor fp32 scales (one scalar each), bf16 output, and torch's default
    accumulation (``use_fast_accum=False``: cuBLASLt promotes the partial sums to fp32 at intervals, what fp8
    training's weight-gradient GEMMs use); ``fast_accum`` True is the faster forward-pass setting that inference and
    torchao's float8 forward use, and what `bench micro` reports (measure/micro/bench.py)."""
    if dtype == "int8":
        return torch._int_mm
    if dtype == "fp8":
        one = torch.ones((), device=dev.torch_device, dtype=torch.float32)
        return lambda a, b: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                             use_fast_accum=fast_accum)
    return torch.matmul


def _rotating(mm, sets):
    """``fn(i)``: the matmul of operand set ``i % 2`` (two sets alternate, so consecutive iterations read different
    memory); the last result is kept until the next call, so its memory is not reused mid-queue."""
    out = [None]

    def fn(i):
        a, b = sets[i % 2]
        out[0] = mm(a, b)

    return fn


BURST = {"bursts": 3, "iters": 40, "idle_s": 1.0, "fastest": 5}  # mamf-finder v4's MAMF: median of the 5 fastest
BURST_MAX_S = 0.25  # seconds of matmul work a burst may hold (fewer iterations for long shapes)


def matmul_bench(dev: Device, dtype: str, shapes, st: Settings, flush: L2Flusher | None, seed: int = 0,
                 burst: dict | None = None, burst_top: int = 1, probe=None, b_layout: str = "col",
                 fast_accum: bool = False, accum_check: bool = False) -> dict:
    """Median rate per shape (queued iterations) and the best of them (``tflops``); then, with ``burst``, the
    achievable rate (``tflops_achievable``) of the ``burst_top`` fastest shapes (module docstring). ``probe()``
    returns the SM clock in MHz, or None. ``b_layout`` (int8) and ``fast_accum`` (fp8): :func:`_operands`,
    :func:`_mm`. ``accum_check`` (fp8 with ``fast_accum``): the best shape timed again with torch's default
    accumulation (``tflops_fp32_accum``), the rate of the gradient GEMMs fp8 training runs."""
    why = dtype_support(dev, dtype)
    if why:
        return {"status": "unsupported", "reason": why}
    gen = _generator(dev, seed)
    mm = _mm(dtype, dev, fast_accum)
    operands = functools.partial(_operands, b_layout=b_layout)
    rows = []
    before = (lambda i: flush()) if flush else None
    with _tf32(dtype == "tf32"):
        for (m, n, k) in shapes:
            fn = _rotating(mm, [operands(dtype, m, n, k, dev, gen) for _ in range(2)])
            try:
                times = time_queued(dev, fn, st, before=before)
            except RuntimeError as e:
                if is_oom(e):
                    raise
                if not rows:  # the op itself is not implemented for this dtype on this backend
                    return {"status": "unsupported", "reason": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}
                raise
            del fn  # the operands go with it
            s = stats(times)
            rows.append({"m": m, "n": n, "k": k, **s, "tflops": 2 * m * n * k / s["time_s"] / 1e12,
                         "tflops_mean_time": 2 * m * n * k / s["time_s_mean"] / 1e12,
                         "tflops_at_min_time": 2 * m * n * k / s["time_s_min"] / 1e12})
        achievable = (_achievable(dev, dtype, rows, burst, burst_top, mm, operands, gen, before, probe)
                      if burst else None)
    best = max(rows, key=lambda r: r["tflops"])
    if accum_check and dtype == "fp8" and fast_accum:
        extra = fp32_accum_rate(dev, (best["m"], best["n"], best["k"]), st, operands, gen, before)
    else:
        extra = {}
    # mamf-finder prints mean, median and max over its iterations for the best shape of each; ours: the best
    # shape's median is the headline (a sustained rate), the other two are kept for comparison with it
    res = {"status": "ok", "tflops": best["tflops"], "best_shape": [best["m"], best["n"], best["k"]],
           "tflops_best_mean": max(r["tflops_mean_time"] for r in rows),
           "tflops_best_iteration": max(r["tflops_at_min_time"] for r in rows),
           "shapes": rows, "unit": "TOPS" if dtype == "int8" else "TFLOPS",
           **_layout(dtype, b_layout, fast_accum), "timing": "queued" if dev._events_ok()
           else "per_iteration",
           "metric_formula": "2*m*n*k / median_s / 1e12; tflops = max over shapes of the median; "
                             "tflops_best_mean / tflops_best_iteration: max over shapes of the mean / fastest "
                             "iteration; tflops_achievable: mamf-finder v4's MAMF (median of the 5 fastest "
                             "iterations of bursts started after an idle gap), max over the burst shapes"}
    res.update(extra)
    if achievable:
        top = max(achievable, key=lambda r: r["tflops"])
        res.update({"tflops_achievable": top["tflops"], "achievable_shape": top["shape"],
                    "achievable_sm_clock_mhz_min": top["sm_clock_mhz_min"], "achievable": achievable})
    return res


def fp32_accum_rate(dev: Device, shape, st: Settings, operands, gen, before) -> dict:
    """fp8 at ``shape`` with ``use_fast_accum=False`` (cuBLASLt promotes the partial sums to fp32 at intervals):
    the median rate, timed as the main shapes are."""
    m, n, k = shape
    fn = _rotating(_mm("fp8", dev, False), [operands("fp8", m, n, k, dev, gen) for _ in range(2)])
    s = stats(time_queued(dev, fn, st, before=before))
    del fn
    return {"tflops_fp32_accum": 2 * m * n * k / s["time_s"] / 1e12, "fp32_accum_shape": [m, n, k]}


def _achievable(dev, dtype, rows, burst, top_n, mm, operands, gen, before, probe) -> list[dict]:
    """mamf-finder v4's MAMF of the ``top_n`` shapes with the best medians: the median of the ``fastest`` fastest
    iterations over ``bursts`` bursts (:func:`burst_times`)."""
    out = []
    for r in sorted(rows, key=lambda r: -r["tflops"])[:max(1, top_n)]:
        m, n, k = r["m"], r["n"], r["k"]
        fn = _rotating(mm, [operands(dtype, m, n, k, dev, gen) for _ in range(2)])
        fn(0)  # kernel selection and workspace outside the bursts
        # a burst is short (BURST_MAX_S of work at this shape's median, at least `fastest` iterations): the boost
        # clock holds only briefly after idle, and a slow GPU's large shapes would otherwise take seconds a burst
        iters = min(burst["iters"], max(burst["fastest"], math.ceil(BURST_MAX_S / max(r["time_s"], 1e-9))))
        times, clocks = burst_times(dev, fn, burst["bursts"], iters, burst["idle_s"], before, probe)
        del fn
        fastest = sorted(times)[:burst["fastest"]]
        t = statistics.median(fastest)
        out.append({"shape": [m, n, k], "tflops": 2 * m * n * k / t / 1e12, "time_s": t,
                    "iterations": len(times), "time_s_fastest": fastest,
                    "tflops_burst_median": 2 * m * n * k / statistics.median(times) / 1e12,
                    "sm_clock_mhz": clocks, "sm_clock_mhz_min": min(clocks) if clocks else None})
    return out


def _layout(dtype: str, b_layout: str, fast_accum: bool) -> dict:
    """What a result records of the operands' layout and the accumulation (8-bit dtypes only)."""
    if dtype == "int8":
        return {"b_layout": "column-major" if b_layout == "col" else "row-major"}
    if dtype == "fp8":
        return {"b_layout": "column-major", "use_fast_accum": fast_accum, "scales": "per-tensor fp32"}
    return {}


def sm_count(dev: Device) -> int | None:
    if dev.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(dev.index()).multi_processor_count)
