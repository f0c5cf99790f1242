"""The doctor's rule for cuDNN SDPA's per-shape graph builds in plain HF generate (estimate/cudnn_sdpa.py says when
a case is on that path and what a build costs; thresholds and their reasons: explain/findings.py).
"""

from __future__ import annotations

from gpuscope.explain.finding import Finding, THRESHOLDS, num, severity

FIX = ("Run the decode attention off cuDNN or without new shapes: torch.backends.cuda.enable_cudnn_sdp(False) before "
       "generate (flash / efficient SDPA, which build nothing: on an H200 the same steps ran as fast as cuDNN's warm "
       "ones, research/results/2026-12-02-h200-c/moe_generate.md); or warm up with one generate over the same batch "
       "and lengths (the builds are cached per shape for the process: bench infer does this, so it measures warm "
       "steps); or decode from a static cache replayed as a CUDA graph (--engine hf-graph, gs-graph, gs-compile: one "
       "shape, built once).")


def cudnn_graph_builds(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    """A plain-generate case on the cuDNN path (the planner's ``cudnn_sdpa_build_s_per_step`` > 0) measured well
    above the warm plan, by at least ``cudnn_build_share`` of the builds its G - 1 decode steps would pay at KV
    lengths new to the process: the run paid them (a first generate, or lengths not run before)."""
    case, cmp_ = s.get("case") or {}, s.get("estimate") or {}
    build = num(cmp_, "planner_cudnn_build_s_per_step")
    est, meas, gen = num(cmp_, "estimated_s"), num(cmp_, "measured_s"), case.get("gen")
    if (not build or not est or meas is None or not isinstance(gen, int) or gen < 2
            or case.get("engine", "hf-eager") != "hf-eager" or case.get("attn", "sdpa") == "eager"):
        return None
    builds = (gen - 1) * build
    excess = meas - est
    if meas / est < t["plan_ratio"] or excess < t["cudnn_build_share"] * builds:
        return None
    speedup = meas / max(est, meas - builds)
    cold = num(cmp_, "planner_decode_cold_s")
    return Finding(
        "cudnn_graph_builds", "Decode steps at new KV lengths: cuDNN SDPA builds an execution graph on the host "
        "every step", severity(speedup),
        {"measured_s": meas, "planned_warm_s": est, "planned_cold_s": est + builds, "excess_s": excess,
         "builds": gen - 1, "build_s_per_step": build, "excess_over_builds": excess / builds,
         "planned_decode_cold_s_per_token": cold},
        FIX, f"the run is {excess * 1e3:.0f} ms above the warm plan, {excess / builds:.0%} of {gen - 1} builds at "
        f"{build * 1e3:.1f} ms: up to {speedup:.2f}x faster with warm or cuDNN-free steps", speedup=speedup)
