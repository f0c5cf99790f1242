"""The doctor's device-side rules: GEMM shapes off the tensor-core alignment, communication not overlapped, clock
throttling, MoE routing imbalance (thresholds and their reasons: explain/findings.py).
"""

from __future__ import annotations

import math

from gpuscope.explain.finding import Finding, THRESHOLDS, num, severity


def matmul_shapes(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    if s.get("timeline") != "device_kernels":  # tensor cores: a GPU question
        return None
    mms = s.get("matmuls") or []
    total = num(s, "matmul_s") or sum(m.get("self_s", 0.0) for m in mms)
    if not mms or not total:
        return None
    a = t["matmul_align"]
    bad = [m for m in mms if m.get("n", 0) % a or m.get("k", 0) % a]
    # a dim of 1 (GEMV, bias grads) is not a tensor-core shape either way; ignore it
    bad = [m for m in bad if min(m.get("n", 0), m.get("k", 0)) > 1]
    share = sum(m["self_s"] for m in bad) / total
    if share < t["matmul_misaligned_share"]:
        return None
    saved = share * (1 - 1 / t["matmul_misaligned_slowdown"])
    mm_frac = total / s["wall_s"] if num(s, "wall_s") else 1.0
    speedup = 1.0 / max(1e-9, 1.0 - saved * min(1.0, mm_frac))

    def pad(x):
        return x if x % a == 0 else (x + 63) // 64 * 64

    worst = sorted(bad, key=lambda m: -m["self_s"])[:5]
    return Finding(
        "matmul_shapes", f"Matmul shapes that waste the tensor cores (dims not a multiple of {a})", severity(speedup),
        {"misaligned_share_of_matmul_time": share, "matmul_s": total,
         "shapes": [{"m": m["m"], "n": m["n"], "k": m["k"], "dtype": m.get("dtype"), "count": m["count"],
                     "self_s": m["self_s"], "pad_to": [pad(m["n"]), pad(m["k"])]} for m in worst]},
        "Pad the model's dimensions to multiples of 64 (e.g. vocab 50257 -> 50304, hidden/intermediate sizes), "
        "keep head_dim a multiple of 8, and use bf16/fp16 so the tensor cores are used.",
        f"{share:.0%} of matmul time is in unaligned shapes; at ~{t['matmul_misaligned_slowdown']}x their aligned "
        f"cost, up to {speedup:.2f}x on the step", speedup=speedup)


def comm_not_overlapped(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    c, wall = num(s, "comm", "s"), num(s, "wall_s")
    ov = num(s, "comm", "overlap_fraction")
    if not c or not wall or ov is None:
        return None
    if c / wall < t["comm_fraction"] or ov >= t["comm_overlap_min"]:
        return None
    exposed = c * (1 - ov)
    speedup = wall / max(1e-12, wall - exposed)
    return Finding(
        "comm_not_overlapped", "Communication not overlapped with compute", severity(speedup),
        {"comm_s": c, "comm_fraction": c / wall, "overlap_fraction": ov, "exposed_s": exposed},
        "Overlap collectives with compute: DDP with gradient bucketing (bucket_cap_mb 25-100, "
        "gradient_as_bucket_view=True, no find_unused_parameters), FSDP with backward_prefetch=BACKWARD_PRE and "
        "forward_prefetch=True, or torch.compile's compute/communication reordering; avoid a synchronize between "
        "backward and the collective.",
        f"{exposed * 1e3:.1f} ms of exposed communication per profile: up to {speedup:.2f}x faster if hidden",
        speedup=speedup)


def throttling(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    nv = s.get("nvml") or {}
    frac = num(nv, "throttled_fraction")
    if frac is None or frac < t["throttle_fraction"]:
        return None
    cmax, cmin, cmed = (num(nv, k) for k in ("sm_clock_mhz_max", "sm_clock_mhz_min", "sm_clock_mhz_median"))
    speedup = (cmax / cmed) if cmax and cmed else None
    reasons = nv.get("throttle_reasons_seen") or []
    return Finding(
        "throttling", "Thermal or power throttling: the clocks were held down", "high" if frac >= 0.5 else "medium",
        {"throttled_fraction": frac, "reasons": reasons, "sm_clock_mhz_min": cmin, "sm_clock_mhz_median": cmed,
         "sm_clock_mhz_max": cmax, "temperature_c_max": nv.get("temperature_c_max"),
         "power_w_median": nv.get("power_w_median")},
        "Check cooling and the power limit (nvidia-smi -q -d PERFORMANCE,POWER; raise it with nvidia-smi -pl where "
        "allowed), other jobs on the same GPU, and the data-centre inlet temperature; benchmark numbers from a "
        "throttled run are not the card's steady state.",
        (f"clocks back at {cmax:.0f} MHz from a median {cmed:.0f} MHz: up to {speedup:.2f}x on compute-bound work"
         if speedup else f"{frac:.0%} of samples throttled"), speedup=speedup)


def moe_imbalance(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    r = s.get("moe_routing") or {}
    med, n, e = num(r, "imbalance_median"), num(r, "rows_largest_call"), num(r, "experts")
    if med is None or med < t["moe_imbalance"]:
        return None
    # Even a uniform router gives max/mean > 1 from sampling alone: the largest of E counts of n rows sits about
    # sqrt(2 ln E) standard deviations (sqrt(n / E)) above the mean n / E, i.e. max/mean ~ 1 + sqrt(2 ln E x E / n)
    # (1.13 for Mixtral's 2,048 rows over 8 experts; 1.42 for 64 rows over 4). Below that it is noise, not skew.
    noise = 1.0 + math.sqrt(2.0 * math.log(e) * e / n) if n and e and e > 1 else 1.0
    if med < noise:
        return None
    return Finding(
        "moe_imbalance", "MoE routing is uneven: the busiest expert gets more rows than the grouped GEMMs like",
        "medium", {"layers": r.get("layers"), "experts": r.get("experts"), "imbalance_median": med,
                   "imbalance_max": num(r, "imbalance_max"), "rows_largest_call": r.get("rows_largest_call"),
                   "uniform_routing_noise": noise},
        "Random weights route unevenly (no load-balancing loss shaped them): time MoE models with a checkpoint's "
        "own weights (bench infer --weights) before trusting expert-bound timings. With a trained model, skewed "
        "routing makes hot experts the bottleneck: check the router's auxiliary loss / capacity factor, and under "
        "expert parallelism place hot experts apart.",
        f"the median layer gives its busiest expert {med:.2f}x the mean rows; the planner prices each expert's rows "
        "in whole units of the grouped GEMM's tiles under a binomial (uniform) router (estimate/moe.py), so a router "
        "more skewed than that is slower than planned")
