"""Where `tune batch` stops growing before it runs out of memory: the planner's peak for each batch against the
memory free on the device before the model is built.

An accelerator raises an out-of-memory error that the search catches (measure/tune/batch.py); a CPU does not: it
swaps, or the kernel's OOM killer ends the process (the whole host may stall first). So the batch is capped before
it is tried: the largest batch whose planner peak (weights, KV cache or activations and optimizer states, from the
same model config and trial sizes: estimate via gpuscope.workloads) stays under ``fraction`` of the free memory.
The planner's peak is the allocator's, which does not depend on the device; it is computed on a catalog entry only
for the formulas' sake (``MEMORY_MODEL_HW``).
"""

from __future__ import annotations

import os

MEMORY_MODEL_HW = "h100"


def free_bytes(dev) -> int | None:
    """Free memory of the device: ``mem_get_info`` on CUDA, available host memory on a CPU (MemAvailable)."""
    import torch

    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev.index())[0])
    if dev.type == "cpu":
        try:
            import psutil

            return int(psutil.virtual_memory().available)
        except ImportError:
            try:
                return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
            except (ValueError, OSError, AttributeError):
                return None
    total = dev.total_memory()
    return None if total is None else total - (dev.reserved() or 0)


def planned_peak_fn(kind: str, cfg: dict, trial_kw: dict):
    """``peak(batch) -> bytes`` by the planner for this model and trial, or None where it cannot say."""
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.workloads import estimate_for
    from gpuscope.workloads.sets import infer_case, train_case

    hw = load_hardware(MEMORY_MODEL_HW)

    def peak(b: int) -> float | None:
        if kind == "infer":
            case = infer_case("tune", b, trial_kw.get("prompt", 128), trial_kw.get("gen", 16),
                              dtype=trial_kw.get("dtype", "bf16"), config=cfg)
        else:
            case = train_case("tune", b, trial_kw.get("seq", 128), trial_kw.get("precision", "amp-bf16"),
                              config=cfg, fused=False)
        try:
            return float(estimate_for(case, hw).peak_bytes_per_gpu)
        except Exception:  # a config the planner does not read: no cap from it (the OOM guard still holds)
            return None

    return peak


def memory_cap(peak, free: int | None, max_batch: int, fraction: float = 0.9) -> dict:
    """The largest batch <= ``max_batch`` whose ``peak(b)`` stays under ``fraction`` x ``free`` (peaks grow with
    the batch: doubling then bisection). ``batch`` None: not even batch 1 fits; ``max_batch`` when all fit or
    when there is nothing to go by."""
    out = {"free_bytes": free, "fraction": fraction, "source": "planner peak vs free device memory"}
    if free is None or peak(1) is None:
        return dict(out, batch=max_batch, estimated_peak_bytes=None, limited=False)
    budget = fraction * free
    if peak(1) > budget:
        return dict(out, batch=None, estimated_peak_bytes=peak(1), limited=True)
    lo, hi = 1, None
    while hi is None and lo < max_batch:
        nxt = min(2 * lo, max_batch)
        if peak(nxt) <= budget:
            lo = nxt
        else:
            hi = nxt
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if peak(mid) <= budget else (lo, mid)
    return dict(out, batch=lo, estimated_peak_bytes=peak(lo), limited=hi is not None,
                first_over=hi, first_over_peak_bytes=peak(hi) if hi is not None else None)
