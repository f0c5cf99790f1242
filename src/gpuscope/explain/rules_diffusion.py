"""The doctor's diffusion rules: a `bench diffusion` point (its result, and the planner's plan for the same case)
-> findings. Each rule reads ``s["diffusion"]`` = {"result", "plan" (DiffusionPlan.to_json() or None), "tiers"
(oom_levers' list, where the point ran out of memory or the plan says it does not fit)} and stays quiet without it,
so it sits in explain/findings.RULES beside the profile rules.

- diffusion_launch_bound: the denoiser's step is host-bound on a CUDA device: a profiled step (``--profile``) kept
  the device busy for <= half of it (launch_idle_fraction); without a profile, the host took >= 90% of the step
  to issue its kernels (``denoiser_enqueue_s / denoiser_step_s``) and the planner's host time for the step
  (kernels x launch cost, estimate/diffusion/time.py) is above its GPU time. The issue share alone is not enough:
  CUDA's launch queue holds about a thousand kernels and SDXL's UNet launches twice that, so a host waiting on a
  full queue behind a busy device also issues for the whole step. SDXL's UNet launches about 2,000
  kernels a step: 34 ms of host time at 17.2 us each against ~15 ms of GPU work at 1024x1024 batch 1 with CFG on an
  H200, so there the step costs the launches. Effect: the step could drop to the device's busy time (profiled, else
  the planner's GPU time); a larger batch rides along nearly free.
- diffusion_attention: attention runs diffusers' AttnProcessor (scores and probabilities materialised: two
  batch x heads x L x L tensors) instead of scaled_dot_product_attention, or runs in fp32 on CUDA (SDPA's flash
  kernel takes fp16/bf16 only: fp32 falls back to the memory-efficient or math kernel). The memory and time the
  planner gives for SDPA in the same case are the effect.
- diffusion_oom_tiers: out of memory (or a plan that does not fit): the levers ranked cheapest first, each the
  planner's peak and time for the same case with that lever: VAE slicing, VAE tiling, SDPA attention, model CPU
  offload (one component on the GPU at a time), sequential offload (weights streamed layer by layer), a half batch,
  fp16 from fp32.
- offload_fresh_pages (explain/rules_offload.py): a model-offload point >= 1.3x its plan whose timed calls met page
  faults worth >= 5% of the call and half the excess.
"""

from __future__ import annotations

from dataclasses import replace

from gpuscope.explain.finding import THRESHOLDS, Finding, GIB, num, severity
from gpuscope.explain.rules_offload import diffusion_offload_fresh_pages  # model offload's fresh host pages

ISSUE_SHARE = 0.9  # host issue time >= this share of the step: the device waited on launches


def _d(s: dict) -> dict:
    return s.get("diffusion") or {}


def _den_plan(plan: dict | None) -> dict:
    comps = (plan or {}).get("components") or {}
    return next((c for c in comps.values() if c.get("role") == "denoiser"), {})


def diffusion_launch_bound(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    d = _d(s)
    r, plan = d.get("result") or {}, d.get("plan")
    step, issue = num(r, "denoiser_step_s"), num(r, "denoiser_enqueue_s")
    if r.get("status") != "ok" or not step or not str(r.get("device", "")).startswith("cuda"):
        return None
    busy, den = num(r, "device_busy_s"), _den_plan(plan)
    host_s, gpu_s = num(den, "host_s"), num(den, "gpu_s")
    why = []
    if busy:  # a profiled step: the device's own timeline decides
        if busy / step <= 1 - t["launch_idle_fraction"]:
            why.append(f"the device was busy {busy / step:.0%} of the step")
    elif host_s and gpu_s and host_s > gpu_s and issue and issue / step >= ISSUE_SHARE:
        # both needed: a host that blocks on a full launch queue (about a thousand kernels deep) also issues for
        # the whole step when the device is the bottleneck, so the issue share alone does not tell
        why += [f"the host took {issue / step:.0%} of the step to issue its kernels",
                f"the planner's host time {host_s * 1e3:.1f} ms is above its GPU time {gpu_s * 1e3:.1f} ms"]
    if not why:
        return None
    floor = busy or gpu_s
    speedup = step / floor if floor and floor < step else None
    return Finding(
        "diffusion_launch_bound", f"The denoiser step is launch-bound at batch {r.get('denoiser_batch')}",
        severity(speedup) if speedup else "medium",
        {"step_s": step, "host_issue_s": issue, "device_busy_s": busy, "kernels": r.get("kernels") or
         den.get("kernels"), "planner_host_s": host_s, "planner_gpu_s": gpu_s, "why": "; ".join(why)},
        "Capture the step in a CUDA graph (torch.compile(unet, mode='reduce-overhead') with static shapes, or "
        "diffusers' compile recipes), or generate more images per call: at this batch the GPU idles between "
        "kernels, so a larger batch costs little more per step.",
        f"the step could drop toward the device's busy time ({floor * 1e3:.1f} ms)" if floor else
        "the step could drop toward the device's busy time", speedup=speedup)


def diffusion_attention(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    d = _d(s)
    r = d.get("result") or {}
    procs = {k for v in (r.get("attention_processors") or {}).values() for k in v}
    math = "AttnProcessor" in procs or (d.get("case_attn") == "math")
    fp32_cuda = r.get("dtype") == "fp32" and str(r.get("device", "")).startswith("cuda")
    if not (math or fp32_cuda) or r.get("status") not in ("ok", "oom"):
        return None
    sdpa = d.get("sdpa_plan") or {}
    plan = d.get("plan") or {}
    saved = (num(plan, "memory", "peak_bytes_per_gpu") or 0) - (num(sdpa, "memory", "peak_bytes_per_gpu") or 0)
    t_now, t_sdpa = num(plan, "time", "total_s"), num(sdpa, "time", "total_s")
    speedup = t_now / t_sdpa if t_now and t_sdpa and t_sdpa < t_now else None
    what = ("diffusers' AttnProcessor materialises the attention scores" if math else
            "fp32 attention: SDPA's flash kernel takes fp16/bf16 only")
    return Finding(
        "diffusion_attention", f"Attention implementation: {what}", severity(speedup) if speedup else "medium",
        {"attention_processors": r.get("attention_processors"), "dtype": r.get("dtype"),
         "planner_saved_gib": saved / GIB if saved > 0 else None},
        "Use scaled_dot_product_attention: pipe.unet.set_attn_processor(AttnProcessor2_0()) (diffusers' default on "
        "PyTorch 2), and fp16 or bf16 weights so that SDPA can pick its flash kernel.",
        f"the planner gives {saved / GIB:.2f} GiB less at the peak with SDPA" if saved > 0 else
        "less memory and time at long sequences (high resolutions, many frames)",
        speedup=speedup, memory_saved_bytes=saved if saved > 0 else None)


def diffusion_oom_tiers(s: dict, t: dict = THRESHOLDS) -> Finding | None:
    d = _d(s)
    r, plan, tiers = d.get("result") or {}, d.get("plan") or {}, d.get("tiers") or []
    if not tiers or not (r.get("status") == "oom" or plan.get("fits") is False):
        return None
    best = next((x for x in tiers if x["fits"]), None)
    head = (f"{best['lever']} fits (peak {best['peak_bytes'] / GIB:.2f} GiB, {best['slowdown']:.2f}x the time)"
            if best else "no single lever fits")
    return Finding(
        "diffusion_oom_tiers", "Out of memory: the levers, cheapest first", "high",
        {"status": r.get("status"), "phase": r.get("phase"), "peak_bytes": r.get("peak_bytes"),
         "planned_peak_bytes": num(plan, "memory", "peak_bytes_per_gpu"), "tiers": tiers},
        "Apply the first lever that fits: " + "; ".join(f"{x['lever']} ({x['peak_bytes'] / GIB:.2f} GiB"
                                                         f"{'' if x['fits'] else ', still too big'})"
                                                         for x in tiers[:4]) + ".",
        head, memory_saved_bytes=best["saved_bytes"] if best else None)


LEVERS = (("VAE slicing (decode one image at a time)", {"vae_slicing": True}),
          ("VAE tiling (decode in tiles)", {"vae_tiling": True}),
          ("SDPA attention", {"attention": "sdpa"}),
          ("model CPU offload (enable_model_cpu_offload)", {"offload": "model"}),
          ("sequential CPU offload (enable_sequential_cpu_offload)", {"offload": "sequential"}),
          ("fp16 weights and activations", {"dtype": "fp16"}))


def plan_case(req, hw):
    """plan_diffusion without its search for the largest batch and sizes (the rules do not read them)."""
    from gpuscope.estimate.diffusion import plan_diffusion

    return plan_diffusion(req, hw, limits=False)


def oom_levers(req, hw) -> list[dict]:
    """Each lever (and half the batch) planned for the same request: {lever, changes, peak_bytes, saved_bytes,
    fits, time_s, slowdown}; ranked: those that fit first by slowdown, then the rest by memory saved."""
    from gpuscope.errors import UserError

    base = plan_case(req, hw)
    levers = [(n, ch) for n, ch in LEVERS if any(getattr(req, k) != v for k, v in ch.items())]
    if req.batch > 1:
        levers.append((f"batch {req.batch // 2} (twice the calls)", {"batch": req.batch // 2}))
    out = []
    for name, ch in levers:
        try:
            p = plan_case(replace(req, **ch), hw)
        except UserError:
            continue
        calls = req.batch / p.r.batch
        time_s = p.times["total_s"] * calls if req.component == "pipeline" else sum(
            v for k, v in p.times.items() if k in ("step_s", "vae_decode_s", "text_encode_s")) * calls
        base_t = base.times["total_s"] if req.component == "pipeline" else sum(
            v for k, v in base.times.items() if k in ("step_s", "vae_decode_s", "text_encode_s"))
        out.append({"lever": name, "changes": ch, "peak_bytes": p.peak, "saved_bytes": base.peak - p.peak,
                    "fits": bool(p.fits), "time_s": time_s, "slowdown": time_s / base_t if base_t else None})
    fit = sorted((x for x in out if x["fits"]), key=lambda x: x["slowdown"] or 0)
    return fit + sorted((x for x in out if not x["fits"]), key=lambda x: -x["saved_bytes"])


RULES = (diffusion_launch_bound, diffusion_attention, diffusion_oom_tiers, diffusion_offload_fresh_pages)


def point_summary(case, res: dict, gpu: str | None) -> dict:
    """The summary the rules read for one `bench diffusion` point (a workloads/diffusion.DiffusionCase and its
    result): the plan for the same case on ``gpu`` (else the catalog entry of the device that ran; none for a CPU),
    the plan with SDPA where the case ran another attention, and the OOM levers where it ran out of memory or the
    plan says it does not fit."""
    from gpuscope.errors import UserError
    from gpuscope.specs.hardware import hardware_for_device, load_hardware
    from gpuscope.workloads.diffusion import request

    out: dict = {"result": res, "case_attn": case.attn, "plan": None, "tiers": []}
    try:
        hw = load_hardware(gpu) if gpu else hardware_for_device(res.get("device_name"))
        req = request(case)
        base = plan_case(req, hw)
    except UserError:
        return {"diffusion": out}
    out["plan"] = base.to_json()
    if req.attention != "sdpa":
        out["sdpa_plan"] = plan_case(replace(req, attention="sdpa"), hw).to_json()
    if res.get("status") == "oom" or not base.fits:
        out["tiers"] = oom_levers(req, hw)
    return {"diffusion": out}


def diagnose_point(case, res: dict, gpu: str | None) -> list[Finding]:
    """The diffusion rules on one point, most severe first."""
    from gpuscope.explain.finding import SEVERITY_ORDER

    s = point_summary(case, res, gpu)
    found = [f for rule in RULES if (f := rule(s)) is not None]
    return sorted(found, key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), -(f.speedup or 1.0)))
