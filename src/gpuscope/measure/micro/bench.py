"""Microbenchmarks of a device's real ceilings: matmul per dtype, device memory bandwidth, host <-> device copies.
The timing helpers are measure/micro/timing.py, the matmul bench measure/micro/matmul.py; this module holds the memory
and transfer benches, the run configurations, the runner and the calibration ceilings.

Method (shared/DESIGN.md "Measuring right"; the ad-hoc versions are research/scripts/gpu_facts.py and
research/scripts/gpu_decode_ceilings.py):
- inputs are random (``randn`` / ``randint``), never zeros, made once per shape; matmuls rotate between two input
  sets and the L2 cache is flushed (a buffer of max(4 x L2, 64 MiB) is overwritten) before every timed iteration,
  outside the timed region, so no iteration reads its operands from cache;
- memory and transfer iterations are each timed alone with ``Device.timer()`` (CUDA/XPU events with a synchronize
  before and after; elsewhere ``perf_counter`` around a synchronize);
- matmul iterations are QUEUED on devices with events (micro/timing.time_queued): flush, start event, matmul, end
  event, next iteration, with one synchronize per batch. A synchronize before each iteration leaves the GPU idle
  when its start event is taken, so the launch latency and the clock's ramp back from idle fall inside the timed
  window (mamf-finder v4 measured 1.6-19% on B200/H200/B300, growing with the kernel's size; the H200 here: 720
  one iteration at a time, 801 queued, same shape); on the host, where there are no events, each iteration is
  still timed alone;
- ``warmup`` iterations are dropped; iterations repeat until both ``min_iters`` and ``min_time_s`` of timed work are
  reached (capped by ``max_time_s``);
- reported: the median time and its rate, min/max, the count and the relative inter-quartile spread
  ``(p75 - p25) / median``.

Rates:
- matmul: ``2*m*n*k / median_s / 1e12`` TFLOPS (TOPS for int8). fp32 runs with TF32 off, tf32 with it on (CUDA only),
  fp8 is ``torch._scaled_mm`` of e4m3 operands with per-tensor scales and bf16 output (CUDA compute capability
  >= 8.9, or a backend where torch runs it), int8 is ``torch._int_mm`` (int32 output); both with a row-major A and
  a column-major B, the only layout cuBLASLt's 8-bit tensor-core kernels run (matmul._operands says why: a
  row-major int8 B ran at 128 TOPS on an H200), and with long-K shapes added to each mode (matmul.LOWP_QUICK,
  LOWP_SWEEP: 8-bit GEMMs peak at a longer K than 16-bit ones). fp8 runs with ``use_fast_accum=True``, the
  forward-pass and inference setting (torchao's float8 output GEMM, Transformer Engine's forward, vLLM) and the one
  published fp8 ceilings are quoted at; its best shape is timed again without it (``tflops_fp32_accum``: the
  gradient GEMMs of fp8 training, 8% slower at the H200 sweep's best shape, matmul.LOWP_QUICK).
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
on CUDA, wave-quantised shapes for this GPU's SM count: matmul.wave_shapes) and reports the best over shapes, as
mamf-finder does. On CPU every size is small, so the whole quick set takes seconds.
"""

from __future__ import annotations

import hashlib
import json
import math
import time

import torch

from gpuscope.measure.device.device import Device, is_oom, oom_result
from gpuscope.measure.micro.matmul import BURST, MATMUL_DTYPES, sm_count, matmul_bench, matmul_shapes
from gpuscope.measure.micro.timing import MIB, L2Flusher, Settings, settings, stats, time_op

MEMORY_OPS = ("copy", "read", "write")
TRANSFER_OPS = (("h2d", True), ("h2d", False), ("d2h", True), ("d2h", False))


def memory_bytes(mode: str, dev: Device) -> int:
    if dev.type == "cpu":
        return 64 * MIB if mode == "quick" else 256 * MIB
    return 1024 * MIB if mode == "quick" else 2048 * MIB


def transfer_bytes(mode: str, dev: Device) -> int:
    return 256 * MIB if mode == "quick" else 1024 * MIB


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
        # the achievable (burst) rate of the fastest shape (quick) or three (sweep, given shapes); no idle on the
        # host (no boost clock to recover, and CI's CPU run stays short)
        burst = dict(BURST, idle_s=0.0, bursts=1, iters=5) if dev.type == "cpu" else dict(BURST)
        top = 1 if mode == "quick" and not shapes_given else 3
        for d in dtypes or MATMUL_DTYPES:
            given = {"shapes_given": True} if shapes_given else {}
            mine = [list(s) for s in (shapes or matmul_shapes(mode, dev, sms=sm_count(dev), dtype=d))]
            accum = {"fast_accum": True, "accum_check": True} if d == "fp8" else {}  # module docstring
            out.append({**base, "bench": "matmul", "dtype": d, "shapes": mine, **timing, **given,
                        "timing": "queued", "burst": burst, "burst_top": top, **accum})
    if "memory" in benches:
        for op in MEMORY_OPS:
            out.append({**base, "bench": "memory", "op": op, "bytes": memory_bytes(mode, dev), **timing})
    if "transfer" in benches:
        for op, pinned in TRANSFER_OPS:
            out.append({**base, "bench": "transfer", "op": op, "pinned": pinned, "bytes": transfer_bytes(mode, dev),
                        **timing})
    return out


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
                                   burst=c.get("burst"), burst_top=c.get("burst_top", 1), probe=probe,
                                   fast_accum=c.get("fast_accum", False), accum_check=c.get("accum_check", False))
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
    from gpuscope.measure.device.nvml import device_sampler

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
