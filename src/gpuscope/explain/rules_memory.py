"""The doctor's memory rules: allocator fragmentation and unused memory headroom (thresholds and their reasons:
explain/findings.py).
"""

from __future__ import annotations

from gpuscope.explain.finding import Finding, GIB, THRESHOLDS, num


def fragmentation(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    m = s.get("memory") or {}
    res, alloc = num(m, "peak_reserved_bytes"), num(m, "peak_allocated_bytes")
    retries = num(m, "num_alloc_retries") or 0
    if res is None or alloc is None or res <= 0:
        return None
    gap = res - alloc
    frag = gap / res
    if not (retries > 0 or (frag >= t["frag_fraction"] and gap >= t["frag_min_bytes"])):
        return None
    if m.get("expandable_segments") and retries == 0:
        return None
    sev = "high" if retries > 0 else "medium"
    return Finding(
        "fragmentation", "Allocator fragmentation: reserved far above allocated", sev,
        {"peak_reserved_gib": res / GIB, "peak_allocated_gib": alloc / GIB, "unused_reserved_gib": gap / GIB,
         "fragmented_fraction": frag, "num_alloc_retries": retries,
         "expandable_segments": m.get("expandable_segments")},
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PYTORCH_ALLOC_CONF in newer PyTorch); keep shapes "
        "steady (pad sequences to a few bucket lengths, drop the last partial batch); do not call "
        "torch.cuda.empty_cache() in the loop.",
        f"frees up to {gap / GIB:.2f} GiB of cached but unusable memory"
        + (f" and removes {retries} allocator retries (each a cudaFree + synchronize)" if retries else ""),
        memory_saved_bytes=gap)


def memory_headroom(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    m = s.get("memory") or {}
    total, peak = num(m, "device_total_bytes"), num(m, "peak_reserved_bytes")
    if not total or peak is None:
        return None
    used = peak / total
    if used >= t["headroom_used_max"]:
        return None
    static = num(m, "allocated_start_bytes") or 0.0
    dyn = max(1.0, (num(m, "peak_allocated_bytes") or peak) - static)
    factor = max(1.0, (t["headroom_target"] * total - static) / dyn)
    return Finding(
        "memory_headroom", "Memory headroom left unused", "low" if factor < 2 else "medium",
        {"peak_reserved_gib": peak / GIB, "device_total_gib": total / GIB, "used_fraction": used,
         "static_gib": static / GIB, "batch_memory_growth_possible": factor},
        "Use it: a larger batch or micro-batch (gpuscope tune batch finds the largest and the throughput-optimal "
        "one), a longer sequence, or drop activation recompute if it is on.",
        f"the per-batch memory could grow about {factor:.1f}x before {t['headroom_target']:.0%} of the device is "
        "used; on a launch- or bandwidth-bound run tokens/s grows almost in proportion")
