"""plan_diffusion: memory, time, throughput and energy of a diffusion pipeline call (or one of its components).

A call: encode the prompt(s) once (each text encoder; twice where the negative prompt is encoded too), run the
denoiser ``steps`` times at batch B (2B with classifier-free guidance: diffusers concatenates the unconditional and
conditional latents into one batch), decode the latents with the VAE once.
    total_s = text_encode_s + steps x (step_s + step_overhead_s) + vae_decode_s, each phase with its offload
    copies (estimate/diffusion/offload.py; offload_transfer_s is their sum, already inside the phases)
    images/s = B / total_s (images);  s per clip = total_s / B (video)
Energy per image: P x total_s / B with P = idle + (TDP - idle) x (GPU-busy time / total_s) (estimate/cost.power_w).
"""

from __future__ import annotations

import math

from gpuscope.errors import UserError
from gpuscope.estimate.cost import power_w
from gpuscope.estimate.diffusion.components import Shapes, trace_component
from gpuscope.estimate.diffusion.memory import ComponentCost, pipeline_phases
from gpuscope.estimate.diffusion.offload import moves as offload_moves
from gpuscope.estimate.diffusion.request import DiffusionRequest, Resolved, resolve
from gpuscope.estimate.diffusion.result import DiffusionPlan, limits_for
from gpuscope.estimate.diffusion.text import t5_fp32_params
from gpuscope.estimate.diffusion.time import STEP_KERNELS, forward_seconds, top_ops
from gpuscope.estimate.engines import engine_for
from gpuscope.estimate.runtime import runtime_overheads
from gpuscope.specs.diffusion import ComponentSpec, PipelineSpec, load_pipeline

BYTES = {"fp16": 2.0, "bf16": 2.0, "fp32": 4.0, "fp8": 1.0}
# fp8 (planner only): the denoiser's weights in fp8 and its GEMMs/convs at the fp8 rate, its activations fp16; the
# text encoders and the VAE stay fp16 (as NVIDIA's MLPerf SDXL submissions quantize only the UNet)
ROLES_OF = {"pipeline": ("text_encoder", "image_encoder", "denoiser", "vae"), "denoiser": ("denoiser",),
            "vae-decode": ("vae",), "text-encoders": ("text_encoder", "image_encoder")}


def _ctx(spec: PipelineSpec, r: Resolved) -> tuple[int, int]:
    """(context tokens, context width) the denoiser attends to."""
    d = spec.denoiser
    if d is None:
        return 77, 768
    cls = d.class_name
    if cls == "UNetSpatioTemporalConditionModel":
        return 1, d.get("cross_attention_dim", 1024)
    if cls == "SD3Transformer2DModel":
        return 77 + r.t5_tokens, d.get("joint_attention_dim", 4096)
    if cls == "FluxTransformer2DModel":
        return r.t5_tokens, d.get("joint_attention_dim", 4096)
    if cls == "CogVideoXTransformer3DModel":
        return d.get("max_text_seq_length", r.t5_tokens), d.get("text_embed_dim", 4096)
    return 77, d.get("cross_attention_dim", 768)


def _latent_frames(spec: PipelineSpec, r: Resolved) -> int:
    d = spec.denoiser
    if d is not None and d.class_name == "CogVideoXTransformer3DModel":
        ratio = d.get("temporal_compression_ratio", 4)
        return (r.frames - 1) // ratio + 1
    return r.frames


def _vae_upcast(spec: PipelineSpec, req: DiffusionRequest) -> bool:
    vae = spec.vae
    return (req.component == "pipeline" and req.dtype == "fp16" and vae is not None and bool(vae.get("force_upcast"))
            and spec.pipeline_class == "StableDiffusionXLPipeline")


def _vae_tiles(vae: ComponentSpec, r: Resolved, lh: int, lw: int, tiling: bool) -> tuple[int, int, int]:
    """(tiles, tile latent h, w): AutoencoderKL.tiled_decode cuts latents larger than sample_size / factor into
    tiles of that size, stepping 75% of a tile (tile_overlap_factor 0.25); smaller latents decode whole."""
    tile = int(vae.get("sample_size", 512) // r.vae_factor) if isinstance(vae.get("sample_size", 512), int) else 64
    if not tiling or vae.class_name != "AutoencoderKL" or (lh <= tile and lw <= tile):
        return 1, lh, lw
    stride = int(tile * 0.75)
    return math.ceil(lh / stride) * math.ceil(lw / stride), min(tile, lh), min(tile, lw)


def _cost(comp: ComponentSpec, shapes: Shapes, dtype: str, req: DiffusionRequest, hw, passes: int,
          inputs: float, repeat: int = 1, timed: bool = True) -> ComponentCost:
    w_b = BYTES[dtype]
    act_b = 2.0 if dtype == "fp8" else w_b
    # eager PyTorch runs cuDNN on NCHW tensors (layout copies around each convolution, trace.py); the fp8 path
    # stands for a TensorRT engine, which keeps its activations NHWC throughout (no copies)
    t = trace_component(comp, shapes, act_b, w_b, req.attention, nchw_copies=req.dtype != "fp8")
    weight_bytes = t.params * w_b + t.buffer_elems * act_b  # buffers are cast with the module
    if comp.class_name == "T5EncoderModel" and dtype == "fp16":
        weight_bytes += 2.0 * t5_fp32_params(comp.config)
    if timed and not hw.supports(dtype):
        raise UserError(f"--dtype {dtype}: {hw.key} has no {dtype} rate in the catalog.")
    fwd = (forward_seconds(t.ops, hw, dtype, t.heads_dims, engine_for("eager", hw), eager=req.dtype != "fp8")
           if timed else {"wall_s": 0.0, "gpu_s": 0.0, "host_s": 0.0, "kernels": 0, "flops": 0.0, "bound": "-",
                          "times": []})
    if repeat > 1:  # VAE tiles: the same forward per tile
        fwd = {**fwd, "wall_s": fwd["wall_s"] * repeat, "gpu_s": fwd["gpu_s"] * repeat,
               "host_s": fwd["host_s"] * repeat, "kernels": fwd["kernels"] * repeat, "flops": fwd["flops"] * repeat}
    return ComponentCost(comp.name, comp.role, comp.class_name, t.params, weight_bytes, t.peak, t.peak_op,
                         t.seq_peak, fwd, passes, inputs, t.run_params * w_b, t.run_tensors,
                         t.tensors)


def component_costs(spec: PipelineSpec, r: Resolved, req: DiffusionRequest, hw, timed: bool = True
                    ) -> list[ComponentCost]:
    lh, lw = r.height // r.vae_factor, r.width // r.vae_factor
    rows = r.batch * (2 if r.cfg else 1)
    other = "fp16" if req.dtype == "fp8" else req.dtype  # everything but the denoiser
    ctx_len, ctx_dim = _ctx(spec, r)
    frames = _latent_frames(spec, r)
    roles = ROLES_OF[req.component]
    costs = []
    for comp in spec.components.values():
        if comp.role not in roles:
            continue
        if comp.role in ("text_encoder", "image_encoder"):
            s = Shapes(rows, r.batch, r.batch, lh, lw, t5_tokens=r.t5_tokens)
            passes = 2 if (r.encode_negative and comp.role == "text_encoder") else 1
            costs.append(_cost(comp, s, other, req, hw, passes, 0.0, timed=timed))
        elif comp.role == "denoiser":
            s = Shapes(rows, r.batch, r.batch, lh, lw, frames=frames, ctx_tokens=ctx_len)
            cin = comp.get("in_channels", 4)
            inputs = ((r.batch + 2 * rows) * cin * lh * lw * frames + rows * ctx_len * ctx_dim) * BYTES[other]
            costs.append(_cost(comp, s, req.dtype, req, hw, r.steps, inputs, timed=timed))
        else:
            dtype = "fp32" if _vae_upcast(spec, req) else other
            images = 1 if req.vae_slicing else r.batch
            vframes = 1 if (req.vae_slicing and r.video) else frames
            tiles, th, tw = _vae_tiles(comp, r, lh, lw, req.vae_tiling)
            s = Shapes(rows, r.batch, images, th, tw, frames=vframes)
            repeat = tiles * (r.batch // images) * (frames // vframes if comp.class_name != "AutoencoderKLCogVideoX"
                                                     else 1)
            # decoded pixels kept while the rest decodes: every image of a sliced decode; tiled_decode keeps all its
            # tiles (each a 25% overlap larger than its share, so about 1/0.75^2 = 1.8x the image) until it blends
            out_px = r.batch * r.height * r.width * 3 * max(r.frames, 1)
            held = (1.8 * out_px if tiles > 1 else out_px if repeat > 1 else 0.0) * BYTES[dtype]
            latents = BYTES[other] * r.batch * comp.get("latent_channels", 4) * lh * lw * frames
            costs.append(_cost(comp, s, dtype, req, hw, 1, latents + held, repeat, timed))
    return costs


def _times(costs: list[ComponentCost], r: Resolved, req: DiffusionRequest, hw) -> dict[str, float]:
    den = [c for c in costs if c.role == "denoiser"]
    step = den[0].forward["wall_s"] if den else 0.0
    eng = engine_for("eager", hw)  # a calibrated TOML's host_launch_s / host_forward_s where it has them
    overhead = (STEP_KERNELS * eng.launch_s) if den else 0.0
    moved = offload_moves(costs, req.offload, hw, eng.launch_s)  # estimate/diffusion/offload.py, per phase
    text = sum(c.forward["wall_s"] * c.passes for c in costs if c.role in ("text_encoder", "image_encoder"))
    text += moved["text_encode"]
    vae = sum(c.forward["wall_s"] for c in costs if c.role == "vae") + moved["vae_decode"]
    denoise = (r.steps * (step + overhead + moved["per_step"]) + moved["denoise"]) if den else 0.0
    total = text + denoise + vae
    busy = (sum(c.forward["gpu_s"] * c.passes for c in costs if c.role != "denoiser") +
            (r.steps * den[0].forward["gpu_s"] if den else 0.0))
    transfers = moved["text_encode"] + moved["denoise"] + moved["vae_decode"] + r.steps * moved["per_step"]
    return {"step_s": step, "step_overhead_s": overhead + moved["per_step"], "denoise_s": denoise,
            "text_encode_s": text, "vae_decode_s": vae, "offload_transfer_s": transfers, "total_s": total,
            "gpu_busy_s": busy}


def fits_device(spec: PipelineSpec, req: DiffusionRequest, hw, r: Resolved) -> bool:
    """Whether the call fits the device (memory only: no timing)."""
    costs = component_costs(spec, r, req, hw, timed=False)
    upcast = sum(c.weight_bytes for c in costs if c.role == "vae") / 2.0 if _vae_upcast(spec, req) else 0.0
    peak = max(pipeline_phases(costs, req.offload, upcast).values())
    return peak + sum(runtime_overheads(peak).values()) <= hw.device_total_bytes


def plan_resolved(spec: PipelineSpec, req: DiffusionRequest, hw, r: Resolved, with_limits: bool = True
                  ) -> DiffusionPlan:
    costs = component_costs(spec, r, req, hw)
    # SDXL fp16: the VAE is fp16 until the pipeline upcasts it for the decode (half its fp32 bytes before)
    upcast = sum(c.weight_bytes for c in costs if c.role == "vae") / 2.0 if _vae_upcast(spec, req) else 0.0
    phases = pipeline_phases(costs, req.offload, upcast)
    peak = max(phases.values()) if phases else 0.0
    times = _times(costs, r, req, hw)
    overhead = runtime_overheads(peak)
    fits = peak + sum(overhead.values()) <= hw.device_total_bytes
    util = min(1.0, times["gpu_busy_s"] / times["total_s"]) if times["total_s"] else 0.0
    pw = power_w(hw.tdp_w, util)
    plan = DiffusionPlan(spec=spec, hw=hw, req=req, r=r, costs=costs, phases=phases, peak=peak, overhead=overhead,
                         fits=fits, times=times, power=pw, upcast_vae=bool(upcast))
    plan.ops = {c.name: top_ops(c.forward["times"]) for c in costs}
    if with_limits:
        plan.limits = limits_for(lambda **kw: fits_device(spec, req, hw, _replace(r, **kw)), r)
    return plan


def _replace(r: Resolved, **kw) -> Resolved:
    from dataclasses import replace

    return replace(r, **kw)


def plan_diffusion(request: DiffusionRequest, hardware, limits: bool = True) -> DiffusionPlan:
    """The library call: a DiffusionRequest (model: a diffusers folder or preset) and a HardwareSpec
    (specs.hardware.load_hardware) -> DiffusionPlan (``.to_json()``: schema gpuscope.estimate/1). ``limits``:
    also search the largest batch, square side and frame count that fit (memory only)."""
    spec = load_pipeline(request.model)
    r = resolve(request, spec)
    return plan_resolved(spec, request, hardware, r, with_limits=limits)
