"""Microbenchmarks of a device's real ceilings: matmul per dtype, device memory bandwidth, host <-> device copies.

Method (shared/DESIGN.md "Measuring right"; the ad-hoc versions are scripts/gpu_facts.py and
scripts/gpu_decode_ceilings.py):
- inputs are random (``randn`` / ``randint``), never zeros, made once per shape; matmuls rotate between two input
  sets and the L2 cache is flushed (a buffer of max(4 x L2, 64 MiB) is overwritten) before every timed iteration,
  outside the timed region, so no iteration reads its operands from cache;
- memory and transfer iterations are each timed alone with ``Device.timer()`` (CUDA/XPU events with a synchronize
  before and after; elsewhere ``perf_counter`` around a synchronize);
- matmul iterations are QUEUED on devices with events (:func:`time_queued`): flush, start event, matmul, end event,
  next iteration, with one synchronize per batch. A synchronize before each iteration leaves the GPU idle when its
  start event is taken, so the launch latency and the clock's ramp back from idle fall inside the timed window
  (mamf-finder v4 measured 1.6-19% on B200/H200/B300, growing with the kernel's size); on the host, where there
  are no events, each iteration is still timed alone;
- ``warmup`` iterations are dropped; iterations repeat until both ``min_iters`` and ``min_time_s`` of timed work are
  reached (capped by ``max_time_s``);
- reported: the median time and its rate, min/max, the count and the relative inter-quartile spread
  ``(p75 - p25) / median``.

Rates:
- matmul: ``2*m*n*k / median_s / 1e12`` TFLOPS (TOPS for int8). fp32 runs with TF32 off, tf32 with it on (CUDA only),
  fp8 is ``torch._scaled_mm`` of e4m3 operands with bf16 output (CUDA compute capability >= 8.9, or a backend
  where torch runs it), int8 is ``torch._int_mm`` (int32 output).
  Two figures per dtype: ``tflops``, the best shape's median over a long queued run (sustained: under a power cap
  the clock settles below boost, which is what a training step sees and what calibration uses), and
  ``tflops_achievable``, the maximum achievable rate on mamf-finder v4's terms (its MAMF: "the median of a shape's
  5 fastest iterations that ran at the boost clock, each burst started after an idle gap"): for the fastest few
  shapes, ``bursts`` queued bursts of ``iters`` iterations each after ``idle_s`` of idle, the median of the 5
  fastest iterations of all bursts; the SM clock is read in the middle of each burst and kept beside it.
- memory: copy ``y.copy_(x)`` counts read + write bytes (2 x size, the convention of ``measured.memory_bw_gbs``),
  read ``x.sum()`` counts size, write ``y.fill_(v)`` counts size; GB/s = bytes / median_s / 1e9.
- transfer: h2d / d2h of one buffer, from/to pinned or pageable host memory; skipped when the device is the host.

``quick`` runs a few shapes; ``sweep`` runs many (squares, a rectangular grid, the public table's best shapes and,
on CUDA, wave-quantised shapes for this GPU's SM count: :func:`wave_shapes`) and reports the best over shapes, as
mamf-finder does. On CPU every size is small, so the whole quick set takes seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import statistics
import time
from dataclasses import dataclass

import torch

from gpuscope.measure.device import Device, is_oom, oom_result

MATMUL_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
MEMORY_OPS = ("copy", "read", "write")
TRANSFER_OPS = (("h2d", True), ("h2d", False), ("d2h", True), ("d2h", False))
MIB = 2**20


@dataclass(frozen=True)
class Settings:
    warmup: int
    min_iters: int
    min_time_s: float
    max_time_s: float


def settings(mode: str, dev: Device) -> Settings:
    host = dev.type == "cpu"
    if mode == "quick":
        return Settings(warmup=1 if host else 3, min_iters=3 if host else 10, min_time_s=0.02 if host else 0.2,
                        max_time_s=1.0 if host else 3.0)
    return Settings(warmup=2 if host else 5, min_iters=5 if host else 20, min_time_s=0.1 if host else 0.5,
                    max_time_s=3.0 if host else 10.0)


def matmul_shapes(mode: str, dev: Device, sms: int | None = None) -> list[tuple[int, int, int]]:
    """The matmul shapes of a mode; ``sms``: the GPU's multiprocessor count, which adds :func:`wave_shapes` to the
    sweep."""
    if dev.type == "cpu":
        if mode == "quick":
            return [(256, 256, 256), (512, 512, 512)]
        return [(s, s, s) for s in range(128, 1025, 128)] + [(1024, 512, 1024), (512, 1024, 2048)]
    if mode == "quick":
        return [(4096, 4096, 4096), (8192, 8192, 8192)]
    # Squares, then a grid of rectangular shapes (M 4-8K, N 8-18K, K 2-8K), as mamf-finder sweeps M, N and K
    # rather than squares alone: the best rate need not sit at a square size (tile waves fill differently).
    squares = [(s, s, s) for s in range(1024, 16385, 1024)]
    grid = [(m, n, k) for m in (4096, 6144, 8192) for n in (8192, 12288, 16384, 17920)
            for k in (2048, 2816, 4096, 8192)]
    rect = [(16384, 8192, 4096), (4096, 14336, 4096), (8192, 28672, 4096)]
    waves = wave_shapes(sms) if sms else []
    return list(dict.fromkeys(squares + grid + rect + PUBLISHED_BEST + waves))  # in order, each once


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


def memory_bytes(mode: str, dev: Device) -> int:
    if dev.type == "cpu":
        return 64 * MIB if mode == "quick" else 256 * MIB
    return 1024 * MIB if mode == "quick" else 2048 * MIB


def transfer_bytes(mode: str, dev: Device) -> int:
    return 256 * MIB if mode == "quick" else 1024 * MIB


# --- timing --------------------------------------------------------------------------------------------------
class L2Flusher:
    """Overwrites a buffer larger than the last-level cache; call before each timed iteration."""

    def __init__(self, dev: Device):
        size = 32 * MIB
        if dev.type == "cuda":
            l2 = int(getattr(torch.cuda.get_device_properties(dev._index()), "L2_cache_size", 0) or 0)
            size = max(4 * l2, 64 * MIB)
        elif dev.type != "cpu":
            size = 256 * MIB
        self.bytes = size
        self.buf = torch.empty(size, dtype=torch.int8, device=dev.torch_device)

    def __call__(self) -> None:
        self.buf.zero_()


def time_op(dev: Device, fn, st: Settings, before=None) -> list[float]:
    """Seconds of each timed call of ``fn(i)``; ``before(i)`` runs untimed first (flush, rotation)."""
    for i in range(st.warmup):
        if before:
            before(i)
        fn(i)
    times: list[float] = []
    t_start = time.perf_counter()
    i = st.warmup
    while len(times) < st.min_iters or sum(times) < st.min_time_s:
        if before:
            before(i)
        with dev.timer() as t:
            fn(i)
        times.append(t.s)
        i += 1
        if time.perf_counter() - t_start > st.max_time_s and len(times) >= 3:
            break
    return times


def time_queued(dev: Device, fn, st: Settings, before=None) -> list[float]:
    """Like :func:`time_op`, but on devices with events the iterations are queued back to back: ``before(i)``,
    a start event, ``fn(i)``, an end event, with one synchronize per batch, so no iteration starts on an idle GPU
    (see the module docstring). Batches grow until ``min_iters`` and ``min_time_s`` are reached (``max_time_s``
    caps it). Without events it is :func:`time_op`."""
    if not dev._events_ok():
        return time_op(dev, fn, st, before)
    mod = dev._mod
    for i in range(st.warmup):
        if before:
            before(i)
        fn(i)
    dev.synchronize()
    times: list[float] = []
    t_start, i, batch = time.perf_counter(), st.warmup, max(1, min(st.min_iters, 64))
    while True:
        evs = [(mod.Event(enable_timing=True), mod.Event(enable_timing=True)) for _ in range(batch)]
        for a, b in evs:
            if before:
                before(i)
            a.record()
            fn(i)
            b.record()
            i += 1
        dev.synchronize()
        times += [a.elapsed_time(b) / 1e3 for a, b in evs]
        done = len(times) >= st.min_iters and sum(times) >= st.min_time_s
        if done or (time.perf_counter() - t_start > st.max_time_s and len(times) >= 3):
            return times
        mean = sum(times) / len(times)
        want = max(st.min_iters - len(times), math.ceil((st.min_time_s - sum(times)) / max(mean, 1e-9)), 1)
        batch = min(want, 4 * batch, 4096)


def burst_times(dev: Device, fn, bursts: int, iters: int, idle_s: float, before=None, probe=None):
    """``bursts`` queued bursts of ``iters`` timed iterations, each after ``idle_s`` of idle (the clock returns to
    boost). Returns (seconds of every iteration, the SM clock ``probe()`` read mid-burst for each burst, or [])."""
    times: list[float] = []
    clocks: list[float] = []
    for _ in range(bursts):
        dev.synchronize()
        if idle_s > 0:
            time.sleep(idle_s)
        st = Settings(warmup=0, min_iters=iters, min_time_s=0.0, max_time_s=float("inf"))
        if dev._events_ok():
            mod = dev._mod
            evs = [(mod.Event(enable_timing=True), mod.Event(enable_timing=True)) for _ in range(iters)]
            for i, (a, b) in enumerate(evs):
                if before:
                    before(i)
                a.record()
                fn(i)
                b.record()
            clk = probe() if probe else None  # the host queued the burst well ahead of the GPU: it is running
            dev.synchronize()
            times += [a.elapsed_time(b) / 1e3 for a, b in evs]
        else:
            clk = probe() if probe else None
            times += time_op(dev, fn, st, before)
        if clk is not None:
            clocks.append(clk)
    return times, clocks


def stats(times: list[float]) -> dict:
    med = statistics.median(times)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [med, med, med]
    return {"time_s": med, "time_s_min": min(times), "time_s_max": max(times), "time_s_mean": statistics.fmean(times),
            "iters": len(times), "rel_iqr": (q[2] - q[0]) / med if med > 0 else None}


# --- matmul --------------------------------------------------------------------------------------------------
def dtype_support(dev: Device, dtype: str) -> str | None:
    """None when ``dtype`` can run on ``dev``, else the reason it cannot."""
    if dtype not in MATMUL_DTYPES:
        return f"unknown dtype '{dtype}' (allowed: {', '.join(MATMUL_DTYPES)})"
    if dtype == "tf32" and dev.type != "cuda":
        return "tf32 is a CUDA tensor-core mode"
    if dtype == "fp8":
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            return "this torch has no float8 matmul"
        if dev.type == "cuda" and torch.cuda.get_device_capability(dev._index()) < (8, 9):
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


def _operands(dtype: str, m: int, n: int, k: int, dev: Device, gen: torch.Generator):
    """Fresh random operands, drawn on the device itself where it has a generator (a CPU randn of two 16384^2
    matrices takes seconds), else on the CPU and copied."""
    d = dev.torch_device
    where = d if gen.device.type == d.type else torch.device("cpu")

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen, device=where, dtype=dtype).to(d)

    if dtype == "int8":
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=gen, device=where).to(d)
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=gen, device=where).to(d)
        return a, b
    if dtype == "fp8":
        a = randn(m, k).to(torch.float8_e4m3fn)
        b = randn(n, k).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        return a, b
    tdt = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    return randn(m, k, dtype=tdt), randn(k, n, dtype=tdt)


def _mm(dtype: str, dev: Device):
    if dtype == "int8":
        return torch._int_mm
    if dtype == "fp8":
        one = torch.ones((), device=dev.torch_device, dtype=torch.float32)
        return lambda a, b: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return torch.matmul


BURST = {"bursts": 3, "iters": 40, "idle_s": 1.0, "fastest": 5}  # mamf-finder v4's MAMF: median of the 5 fastest
BURST_MAX_S = 0.25  # seconds of matmul work a burst may hold (fewer iterations for long shapes)


def matmul_bench(dev: Device, dtype: str, shapes, st: Settings, flush: L2Flusher | None, seed: int = 0,
                 burst: dict | None = None, burst_top: int = 1, probe=None) -> dict:
    """Median rate per shape (queued iterations) and the best of them (``tflops``); then, with ``burst``, the
    achievable rate (``tflops_achievable``) of the ``burst_top`` fastest shapes (module docstring). ``probe()``
    returns the SM clock in MHz, or None."""
    why = dtype_support(dev, dtype)
    if why:
        return {"status": "unsupported", "reason": why}
    gen = _generator(dev, seed)
    mm = _mm(dtype, dev)
    rows = []
    before = (lambda i: flush()) if flush else None
    with _tf32(dtype == "tf32"):
        for (m, n, k) in shapes:
            sets = [_operands(dtype, m, n, k, dev, gen) for _ in range(2)]
            out = [None]

            def fn(i, sets=sets):
                a, b = sets[i % 2]
                out[0] = mm(a, b)

            try:
                times = time_queued(dev, fn, st, before=before)
            except RuntimeError as e:
                if is_oom(e):
                    raise
                if not rows:  # the op itself is not implemented for this dtype on this backend
                    return {"status": "unsupported", "reason": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}
                raise
            del sets, out
            s = stats(times)
            rows.append({"m": m, "n": n, "k": k, **s, "tflops": 2 * m * n * k / s["time_s"] / 1e12,
                         "tflops_mean_time": 2 * m * n * k / s["time_s_mean"] / 1e12,
                         "tflops_at_min_time": 2 * m * n * k / s["time_s_min"] / 1e12})
        achievable = _achievable(dev, dtype, rows, burst, burst_top, mm, gen, before, probe) if burst else None
    best = max(rows, key=lambda r: r["tflops"])
    # mamf-finder prints mean, median and max over its iterations for the best shape of each; ours: the best
    # shape's median is the headline (a sustained rate), the other two are kept for comparison with it
    res = {"status": "ok", "tflops": best["tflops"], "best_shape": [best["m"], best["n"], best["k"]],
           "tflops_best_mean": max(r["tflops_mean_time"] for r in rows),
           "tflops_best_iteration": max(r["tflops_at_min_time"] for r in rows),
           "shapes": rows, "unit": "TOPS" if dtype == "int8" else "TFLOPS", "timing": "queued" if dev._events_ok()
           else "per_iteration",
           "metric_formula": "2*m*n*k / median_s / 1e12; tflops = max over shapes of the median; "
                             "tflops_best_mean / tflops_best_iteration: max over shapes of the mean / fastest "
                             "iteration; tflops_achievable: mamf-finder v4's MAMF (median of the 5 fastest "
                             "iterations of bursts started after an idle gap), max over the burst shapes"}
    if achievable:
        top = max(achievable, key=lambda r: r["tflops"])
        res.update({"tflops_achievable": top["tflops"], "achievable_shape": top["shape"],
                    "achievable_sm_clock_mhz_min": top["sm_clock_mhz_min"], "achievable": achievable})
    return res


def _achievable(dev, dtype, rows, burst, top_n, mm, gen, before, probe) -> list[dict]:
    """mamf-finder v4's MAMF of the ``top_n`` shapes with the best medians: the median of the ``fastest`` fastest
    iterations over ``bursts`` bursts (:func:`burst_times`)."""
    out = []
    for r in sorted(rows, key=lambda r: -r["tflops"])[:max(1, top_n)]:
        m, n, k = r["m"], r["n"], r["k"]
        sets = [_operands(dtype, m, n, k, dev, gen) for _ in range(2)]
        holder = [None]

        def fn(i, sets=sets):
            a, b = sets[i % 2]
            holder[0] = mm(a, b)

        fn(0)  # kernel selection and workspace outside the bursts
        # a burst is short (BURST_MAX_S of work at this shape's median, at least `fastest` iterations): the boost
        # clock holds only briefly after idle, and a slow GPU's large shapes would otherwise take seconds a burst
        iters = min(burst["iters"], max(burst["fastest"], math.ceil(BURST_MAX_S / max(r["time_s"], 1e-9))))
        times, clocks = burst_times(dev, fn, burst["bursts"], iters, burst["idle_s"], before, probe)
        del sets, holder
        fastest = sorted(times)[:burst["fastest"]]
        t = statistics.median(fastest)
        out.append({"shape": [m, n, k], "tflops": 2 * m * n * k / t / 1e12, "time_s": t,
                    "iterations": len(times), "time_s_fastest": fastest,
                    "tflops_burst_median": 2 * m * n * k / statistics.median(times) / 1e12,
                    "sm_clock_mhz": clocks, "sm_clock_mhz_min": min(clocks) if clocks else None})
    return out


# --- memory --------------------------------------------------------------------------------------------------
def memory_bench(dev: Device, op: str, nbytes: int, st: Settings, seed: int = 0) -> dict:
    n = nbytes // 4
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen).to(dev.torch_device)
    y = torch.empty_like(x)
    sink = [None]
    if op == "copy":
        fn, moved = (lambda i: y.copy_(x)), 2 * n * 4
    elif op == "read":
        def fn(i):
            sink[0] = x.sum()
        moved = n * 4
    elif op == "write":
        fn, moved = (lambda i: y.fill_(1.0 + (i % 7))), n * 4
    else:
        raise ValueError(f"memory op '{op}' is not one of {', '.join(MEMORY_OPS)}")
    s = stats(time_op(dev, fn, st))
    del x, y
    return {"status": "ok", "gbs": moved / s["time_s"] / 1e9, "gbs_at_min_time": moved / s["time_s_min"] / 1e9,
            "bytes_moved": moved, "buffer_bytes": n * 4, **s,
            "metric_formula": {"copy": "2 * size / median_s / 1e9 (read + write)",
                               "read": "size / median_s / 1e9 (x.sum())",
                               "write": "size / median_s / 1e9 (y.fill_)"}[op]}


def transfer_bench(dev: Device, direction: str, pinned: bool, nbytes: int, st: Settings, seed: int = 0) -> dict:
    if dev.type == "cpu":
        return {"status": "unsupported", "reason": "the device is the host: no host-device copy"}
    n = nbytes // 4
    gen = torch.Generator().manual_seed(seed)
    host = torch.randn(n, generator=gen)
    if pinned:
        host = host.pin_memory()
    devbuf = torch.randn(n, generator=gen).to(dev.torch_device)
    if direction == "h2d":
        fn = lambda i: devbuf.copy_(host, non_blocking=pinned)  # noqa: E731
    else:
        fn = lambda i: host.copy_(devbuf, non_blocking=pinned)  # noqa: E731
    s = stats(time_op(dev, fn, st))
    del host, devbuf
    return {"status": "ok", "gbs": n * 4 / s["time_s"] / 1e9, "bytes_moved": n * 4, **s,
            "metric_formula": "size / median_s / 1e9"}


# --- items: what the CLI runs, stores and resumes ----------------------------------------------------------------
def item_key(config: dict) -> str:
    digest = hashlib.sha1(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:8]
    return f"{item_name(config)}#{digest}"


def item_name(c: dict) -> str:
    if c["bench"] == "matmul":
        return f"micro/matmul/{c['dtype']}/{c['mode']}" + ("-shapes" if c.get("shapes_given") else "")
    if c["bench"] == "memory":
        return f"micro/memory/{c['op']}/{c['mode']}"
    return f"micro/transfer/{c['op']}-{'pinned' if c['pinned'] else 'pageable'}/{c['mode']}"


def micro_configs(dev: Device, mode: str = "quick", dtypes=None, benches=("matmul", "memory", "transfer"),
                  shapes=None, iters: int | None = None, warmup: int | None = None) -> list[dict]:
    """The configuration of every microbenchmark of a run (each is one stored measurement). ``shapes``: the matmul
    shapes to time instead of the mode's set; ``iters``/``warmup``: at least that many timed / untimed iterations
    per shape (mamf-finder's table: 100 after 50)."""
    if mode not in ("quick", "sweep"):
        raise ValueError(f"mode '{mode}' is not quick or sweep")
    base = {"kind": "micro", "mode": mode, "device": dev.name}
    st = settings(mode, dev)
    timing = {"warmup": st.warmup if warmup is None else warmup,
              "min_iters": st.min_iters if iters is None else iters, "min_time_s": st.min_time_s}
    out = []
    if "matmul" in benches:
        shapes_given = bool(shapes)
        shapes = [list(s) for s in (shapes or matmul_shapes(mode, dev, sms=_sm_count(dev)))]
        # the achievable (burst) rate of the fastest shape (quick) or three (sweep, given shapes); no idle on the
        # host (no boost clock to recover, and CI's CPU run stays short)
        burst = dict(BURST, idle_s=0.0, bursts=1, iters=5) if dev.type == "cpu" else dict(BURST)
        top = 1 if mode == "quick" and not shapes_given else 3
        for d in dtypes or MATMUL_DTYPES:
            given = {"shapes_given": True} if shapes_given else {}
            out.append({**base, "bench": "matmul", "dtype": d, "shapes": shapes, **timing, **given,
                        "timing": "queued", "burst": burst, "burst_top": top})
    if "memory" in benches:
        for op in MEMORY_OPS:
            out.append({**base, "bench": "memory", "op": op, "bytes": memory_bytes(mode, dev), **timing})
    if "transfer" in benches:
        for op, pinned in TRANSFER_OPS:
            out.append({**base, "bench": "transfer", "op": op, "pinned": pinned, "bytes": transfer_bytes(mode, dev),
                        **timing})
    return out


def _sm_count(dev: Device) -> int | None:
    if dev.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(dev._index()).multi_processor_count)


class Runner:
    """Runs micro configs on one device, sharing the L2 flush buffer; ``run(config)`` never raises for OOM."""

    def __init__(self, dev: Device):
        self.dev = dev
        self._flush: L2Flusher | None = None

    def flusher(self) -> L2Flusher:
        if self._flush is None:
            self._flush = L2Flusher(self.dev)
        return self._flush

    def run(self, c: dict, sample_power: bool = True) -> dict:
        dev = self.dev
        st = Settings(c["warmup"], c["min_iters"], c["min_time_s"], settings(c["mode"], dev).max_time_s)
        sampler = _sampler(dev) if sample_power else None
        t0 = time.perf_counter()
        try:
            if sampler:
                sampler.start()
            if c["bench"] == "matmul":
                probe = (lambda: (sampler.read_now() or {}).get("sm_clock_mhz")) if sampler else None
                res = matmul_bench(dev, c["dtype"], [tuple(s) for s in c["shapes"]], st, self.flusher(),
                                   burst=c.get("burst"), burst_top=c.get("burst_top", 1), probe=probe)
            elif c["bench"] == "memory":
                res = memory_bench(dev, c["op"], c["bytes"], st)
            else:
                res = transfer_bench(dev, c["op"], c["pinned"], c["bytes"], st)
        except Exception as e:
            if is_oom(e):
                res = oom_result(dev, c["bench"], e)
            else:
                res = {"status": "error", "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
        finally:
            if sampler:
                sampler.stop()
            dev.empty_cache()
        res.update({"kind": "micro", "bench": c["bench"], "device": dev.name, "device_name": dev.device_name(),
                    "timer": dev.timer_kind, "wall_s": time.perf_counter() - t0})
        for k in ("dtype", "op", "pinned"):
            if k in c:
                res[k] = c[k]
        if c["bench"] == "matmul":
            if self._flush is not None:
                res["l2_flush_bytes"] = self._flush.bytes
        res["nvml"] = sampler.result(with_samples=False) if sampler else {"unavailable": "not an NVIDIA device"}
        if sampler and res["nvml"].get("summary"):
            res["nvml_samples"] = sampler.samples
            res["throttled"] = res["nvml"]["throttled"]
        return _clean(res)


def _sampler(dev: Device):
    from gpuscope.measure.nvml import device_sampler

    return device_sampler(dev)


def _clean(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def ceilings(results: list[dict]) -> dict:
    """The ``[measured]`` table of a hardware TOML from micro results (ok ones only)."""
    out: dict = {"matmul_tflops": {}}
    for r in results:
        if r.get("status") != "ok":
            continue
        if r["bench"] == "matmul":
            out["matmul_tflops"][r["dtype"]] = max(out["matmul_tflops"].get(r["dtype"], 0.0), r["tflops"])
        elif r["bench"] == "memory" and r.get("op", "copy") == "copy":
            out["memory_bw_gbs"] = r["gbs"]
        elif r["bench"] == "transfer" and r.get("pinned"):
            out[f"{r['op']}_gbs"] = r["gbs"]
    return out
