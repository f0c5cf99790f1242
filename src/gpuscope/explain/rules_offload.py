"""The doctor's rule for model CPU offload's moves into fresh host memory (a `bench diffusion` point's summary, as
explain/rules_diffusion.py builds it: ``s["diffusion"]`` = {"result", "plan", ...}).

- offload_fresh_pages: a model-offload point measured >= ``plan_ratio`` x the plan (its steady state) whose timed
  calls met page faults (the bench's ``host_fault_bytes``, getrusage's minor faults x the page size) worth at least
  ``offload_fault_share`` of the call and half the excess, at estimate/diffusion/offload.FAULT_S a 4 KiB page. A
  move out (``module.to("cpu")``) into host pages the process has not touched pays one fault a page on top of the
  copy, until glibc's heap has grown to hold what the modules leave (SDXL at 1024 on an H200 VM: 3.6, 2.0, then
  0.2 GB of fresh pages in the first three calls; research/results/2026-12-02-h200-d/offload.md). Effect: the
  call without those faults, or the plan where that is longer.
"""

from __future__ import annotations

from gpuscope.estimate.diffusion.offload import FAULT_S, PAGE_BYTES, STEADY_WARMUP_CALLS
from gpuscope.explain.finding import THRESHOLDS, Finding, num, severity

FIX = (f"Time, and serve, from a long-lived process: run {STEADY_WARMUP_CALLS} pipeline calls after loading before "
       f"timing (bench diffusion's default for such a point, --warmup {STEADY_WARMUP_CALLS}: SDXL at 1024 on an H200 "
       "then ran within 8% of the plan); the faults stop once glibc's heap holds the bytes the modules leave when "
       "they move in. "
       "MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ do not help (measured). If the weights fit, drop model "
       "offload: the moves themselves cost ~2 s a call for SDXL at pageable rates.")


def diffusion_offload_fresh_pages(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    d = s.get("diffusion") or {}
    r, plan = d.get("result") or {}, d.get("plan") or {}
    fresh, total = num(r, "host_fault_bytes"), num(r, "total_s")
    if r.get("status") != "ok" or not fresh or not total or (plan.get("inputs") or {}).get("offload") != "model":
        return None
    cost, planned = fresh / PAGE_BYTES * FAULT_S, num(plan, "time", "total_s")
    if (not planned or total / planned < t["plan_ratio"] or cost < t["offload_fault_share"] * total
            or cost < 0.5 * (total - planned)):
        return None
    speedup = total / max(planned, total - cost)
    return Finding(
        "offload_fresh_pages", "Model offload's moves out landed in fresh host pages (a page fault every 4 KiB)",
        severity(speedup),
        {"measured_s": total, "planned_steady_s": planned, "fault_bytes": fresh, "fault_s": cost,
         "page_faults": r.get("host_page_faults"), "fault_s_per_page": FAULT_S},
        FIX, f"~{cost:.2f} s a call ({cost / total:.0%}) once the heap has settled: the timed calls met "
        f"{fresh / 1e9:.2f} GB of fresh host pages at {FAULT_S * 1e6:.1f} us a page, not yet the steady state the plan "
        "prices",
        speedup=speedup)
