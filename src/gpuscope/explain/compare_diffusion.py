"""Hardware side by side for a diffusion workload: fit, seconds per step and per call, images/s (or seconds per
clip), dollars per 1,000 images (or clips) and joules per image, one row per accelerator; and, where the call does
not fit, the first of the memory tiers that makes it fit (VAE slicing and tiling, model offload, sequential
offload), with what that tier costs in time.

Cost per 1,000 units (pure arithmetic on the plan, estimate/cost.py's conventions), both where the price table
(specs/data/prices.toml) has the figure:
- cloud: usd_per_gpu_hour x seconds per unit / 3600 x 1000;
- owned: (purchase / years / hours_per_year) x seconds per unit / 3600 x 1000 + the energy of those seconds at the
  plan's average power x PUE x usd_per_kwh (the card busy all year: Economics.utilisation 1).
Everything is estimated (the planner and the power model); nothing here is measured.
"""

from __future__ import annotations

from dataclasses import replace

from gpuscope.errors import UserError
from gpuscope.estimate.cost import Economics
from gpuscope.estimate.diffusion.pipeline import plan_diffusion
from gpuscope.estimate.diffusion.request import DiffusionRequest
from gpuscope.specs.prices import is_cloud_equivalent, price_for

# the memory tiers tried, cheapest in time first (docs/diffusion.md): decode one image at a time, decode in tiles,
# one component on the GPU at a time, every layer's weights streamed in as it runs
TIERS = ({"vae_slicing": True}, {"vae_slicing": True, "vae_tiling": True},
         {"vae_slicing": True, "vae_tiling": True, "offload": "model"},
         {"vae_slicing": True, "vae_tiling": True, "offload": "sequential"})


def _usd_per_1k(hw, seconds_per_unit: float, watts: float | None, prices, econ: Economics) -> dict:
    entry = price_for(hw, prices)
    out = {"usd_per_1k_cloud": None, "usd_per_1k_owned": None}
    if entry.cloud is not None:
        out["usd_per_1k_cloud"] = entry.cloud.value * seconds_per_unit / 3600.0 * 1000.0
    if entry.purchase is not None and not is_cloud_equivalent(entry.purchase):
        hourly = entry.purchase.value / econ.years / (econ.hours_per_year * econ.utilisation)
        energy = (watts or 0.0) * econ.pue * seconds_per_unit / 3.6e6 * econ.usd_per_kwh
        out["usd_per_1k_owned"] = (hourly * seconds_per_unit / 3600.0 + energy) * 1000.0
    return out


def _fix(req: DiffusionRequest, hw) -> tuple[dict | None, dict | None]:
    """The first memory tier under which the call fits, and its plan (None, None where none does)."""
    for tier in TIERS:
        p = plan_diffusion(replace(req, **tier), hw, limits=False).to_json()
        if p["fits"]:
            return tier, p
    return None, None


def _row(req: DiffusionRequest, hw, prices, econ: Economics) -> dict:
    try:
        plan = plan_diffusion(req, hw, limits=False).to_json()
    except UserError as exc:
        return {"gpu": hw.key, "fits": False, "error": str(exc), "peak_bytes": None, "step_s": None,
                "total_s": None, "step_bound": "-"}
    tier, used = (None, plan) if plan["fits"] else _fix(req, hw)
    row = {"gpu": hw.key, "fits": plan["fits"], "peak_bytes": plan["memory"]["peak_bytes_per_gpu"],
           "memory_bytes": hw.memory_bytes, "fix": tier}
    if used is None:
        return {**row, "step_s": None, "total_s": None, "step_bound": "-"}
    den = [c for c in used["components"].values() if c["role"] == "denoiser"]
    units = used["inputs"]["batch"]
    per_unit = used["time"]["total_s"] / units
    energy = used.get("energy") or {}
    row.update(_usd_per_1k(hw, per_unit, energy.get("avg_power_w"), prices, econ))
    row.update(step_s=used["time"]["step_s"], total_s=used["time"]["total_s"],
               step_bound=den[0]["bound"] if den else "-",
               j_per_unit=energy.get("j_per_clip", energy.get("j_per_image")), **used.get("throughput", {}))
    if tier:
        row["fits_with"] = ", ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
                                     for k, v in tier.items())
        row["peak_with_fix_bytes"] = used["memory"]["peak_bytes_per_gpu"]
    return row


def _best(rows: list[dict], video: bool) -> list[str]:
    """The fastest card and the cheapest per 1,000 units on each price basis, among the rows that fit (as asked or
    with their memory tier)."""
    ok = [r for r in rows if r.get("total_s")]
    if not ok:
        return []
    unit = "clip" if video else "image"
    fastest = min(ok, key=lambda r: r["total_s"])
    out = [f"fastest: {fastest['gpu']} ({fastest['total_s']:.2f} s per call)"]
    for basis in ("cloud", "owned"):
        priced = [r for r in ok if r.get(f"usd_per_1k_{basis}") is not None]
        if priced:
            best = min(priced, key=lambda r: r[f"usd_per_1k_{basis}"])
            out.append(f"cheapest per 1,000 {unit}s ({basis}): {best['gpu']} "
                       f"({best[f'usd_per_1k_{basis}']:.2f} USD)")
    return out


def compare_diffusion(req: DiffusionRequest, gpus: list, prices=None, econ: Economics = Economics()) -> dict:
    """One row per GPU (see the module docstring); ``req.component`` is taken as the whole pipeline."""
    req = replace(req, component="pipeline")
    rows = [_row(req, hw, prices, econ) for hw in gpus]
    first = next((r for r in rows if r.get("total_s")), None)
    video = bool(first and "s_per_clip" in first)
    title = (f"{req.model}: batch {req.batch}" + (f", {req.height}x{req.width}" if req.height else "")
             + (f", {req.frames} frames" if req.frames else "") + f", {req.dtype}")
    notes = [f"{r['gpu']}: does not fit as asked; fits with {r['fits_with']} "
             f"(peak {r['peak_with_fix_bytes'] / 2**30:.1f} GiB)" for r in rows if r.get("fits_with")]
    notes += [f"{r['gpu']}: {r['error']}" for r in rows if r.get("error")]
    notes += [f"{r['gpu']}: does not fit even with sequential offload" for r in rows
              if not r["fits"] and not r.get("fits_with") and not r.get("error")]
    notes += _best(rows, video)
    notes.append("estimated: eager diffusers on each card with NVIDIA-measured host launch costs (engines.py); "
                 "$ per 1,000 from the price table: cloud rate x time, and owned (purchase over "
                 f"{econ.years:g} years, busy all year, + energy at {econ.usd_per_kwh} USD/kWh, PUE {econ.pue})")
    return {"title": title, "video": video, "rows": rows, "notes": notes}
