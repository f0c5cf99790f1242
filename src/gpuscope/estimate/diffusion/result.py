"""DiffusionPlan: the value object plan_diffusion returns, rendered to JSON (schema gpuscope.estimate/1,
shared/CONTRACT.md: memory.peak_bytes_per_gpu, time.step_s, time.vae_decode_s, time.total_s, fits), and the search
for the largest batch, resolution and frame count that fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.estimate.engines import engine_for
from gpuscope.estimate.result import SCHEMA

MAX_BATCH = 4096
MAX_SIDE = 16384
MAX_FRAMES = 1024


@dataclass
class DiffusionPlan:
    spec: object
    hw: object
    req: object
    r: object
    costs: list
    phases: dict
    peak: float
    overhead: dict
    fits: bool
    times: dict
    power: object
    upcast_vae: bool = False
    ops: dict = field(default_factory=dict)
    limits: dict = field(default_factory=dict)

    @property
    def images(self) -> int:
        return self.r.batch

    def throughput(self) -> dict:
        total = self.times["total_s"]
        if self.req.component != "pipeline" or not total:
            return {}
        out = {"images_per_s": self.r.batch / total} if not self.r.video else {
            "s_per_clip": total / self.r.batch, "clips_per_s": self.r.batch / total,
            "frames_per_s": self.r.batch * self.r.frames / total}
        return out

    def energy(self) -> dict:
        if self.power is None or self.req.component != "pipeline" or not self.times["total_s"]:
            return {}
        j = self.power.watts_per_gpu * self.times["total_s"] / self.r.batch
        return {"avg_power_w": self.power.watts_per_gpu, "power_formula": self.power.formula,
                ("j_per_clip" if self.r.video else "j_per_image"): j}

    def assumptions(self) -> list[str]:
        r, req = self.r, self.req
        out = [f"{r.steps} steps, classifier-free guidance {'on (denoiser batch 2B)' if r.cfg else 'off'}, "
               f"{req.dtype} weights and activations, attention {req.attention}, offload {req.offload}",
               "eager diffusers/transformers modules (no torch.compile, no CUDA graphs); the host launches every "
               f"kernel ({engine_for('eager', self.hw).launch_s * 1e6:.1f} us each: engines.engine_for, the "
               "hardware TOML's host_launch_s where it has one) and runs ahead of the GPU"]
        if self.upcast_vae:
            out.append("SDXL's VAE (force_upcast) decodes in fp32, as StableDiffusionXLPipeline does in fp16")
        if any(c.class_name == "T5EncoderModel" for c in self.costs) and req.dtype == "fp16":
            out.append("T5's wo weights stay fp32 in fp16 (transformers' _keep_in_fp32_modules)")
        if req.offload != "none":
            from gpuscope.estimate.diffusion.offload import MODULE_D2H_FACTOR, pageable_gbs

            d2h = pageable_gbs(self.hw, "d2h")
            out_rate = (f"{d2h:.1f} GB/s out a large tensor, {d2h * MODULE_D2H_FACTOR:.1f} as module.to moves a "
                        "module" if req.offload == "model" else f"{d2h:.1f} GB/s out")
            out.append(f"offload copies from pageable host memory: {pageable_gbs(self.hw, 'h2d'):.1f} GB/s in, "
                       f"{out_rate} (estimate/diffusion/offload.py), each in the phase that makes it")
        if req.offload == "model":  # research/results/2026-12-02-h200-d/offload.md
            from gpuscope.estimate.diffusion.offload import first_calls_note

            out.append(first_calls_note(self.costs, req.offload))
        return out

    def to_json(self) -> dict:
        comps = {c.name: {"class": c.class_name, "role": c.role, "params": c.params,
                          "weight_bytes": round(c.weight_bytes),
                          "activation_peak_bytes": round(c.activation_peak_bytes),
                          "activation_peak_at": c.peak_op, "inputs_bytes": round(c.inputs_bytes),
                          "forwards": c.passes, "forward_s": c.forward["wall_s"], "gpu_s": c.forward["gpu_s"],
                          "host_s": c.forward["host_s"], "kernels": c.forward["kernels"],
                          "flops": c.forward["flops"], "bound": c.forward["bound"]} for c in self.costs}
        breakdown = {"weights": sum(c.weight_bytes for c in self.costs)}
        for c in self.costs:
            breakdown[f"activations.{c.name}"] = c.activation_peak_bytes
        r, req = self.r, self.req
        return {
            "schema": SCHEMA, "kind": "diffusion", "model": self.spec.name, "hardware": self.hw.key,
            "calibrated": bool(getattr(self.hw, "is_calibrated", False)),
            "inputs": {"model": req.model, "pipeline": self.spec.pipeline_class, "component": req.component,
                       "batch": r.batch, "height": r.height, "width": r.width, "frames": r.frames, "steps": r.steps,
                       "cfg": r.cfg, "denoiser_batch": r.batch * (2 if r.cfg else 1), "dtype": req.dtype,
                       "offload": req.offload, "attention": req.attention, "vae_tiling": req.vae_tiling,
                       "vae_slicing": req.vae_slicing, "t5_tokens": r.t5_tokens},
            "fits": self.fits,
            "memory": {"peak_bytes_per_gpu": round(self.peak),
                       "breakdown_bytes": {k: round(v) for k, v in breakdown.items()},
                       "phases_bytes": {k: round(v) for k, v in self.phases.items()},
                       "runtime_overhead_bytes": {k: round(v) for k, v in self.overhead.items()},
                       "required_bytes_per_gpu": round(self.peak + sum(self.overhead.values())),
                       "device_total_bytes": round(self.hw.device_total_bytes)},
            "time": dict(self.times),
            "throughput": self.throughput(),
            "energy": self.energy(),
            "params": {c.name: c.params for c in self.costs},
            "components": comps,
            "limits": self.limits,
            "top_ops": self.ops,
            "assumptions": self.assumptions(),
        }


def _largest(fits, lo: int, hi: int, step: int = 1) -> int | None:
    """The largest multiple of ``step`` in [lo, hi] with fits(v), by doubling then bisection (fits is monotone)."""
    if not fits(lo):
        return None
    good, v = lo, lo
    while v < hi:
        v = min(hi, v * 2)
        if not fits(v):
            bad = v
            break
        good = v
    else:
        return good
    while bad - good > step:
        mid = (good + bad) // 2 // step * step
        if mid <= good:
            break
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def limits_for(fits_with, r) -> dict:
    """Largest batch, square side (a multiple of the VAE factor x patch) and frame count that fit."""
    step = r.vae_factor * r.patch
    out = {"max_batch": _largest(lambda v: fits_with(batch=v), 1, MAX_BATCH),
           "max_square_side": _largest(lambda v: fits_with(height=v, width=v), step, MAX_SIDE, step)}
    if r.video:
        out["max_frames"] = _largest(lambda v: fits_with(frames=v), 1, MAX_FRAMES)
    return out
