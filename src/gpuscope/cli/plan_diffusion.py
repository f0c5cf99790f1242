"""`gpuscope plan diffusion`: memory, time, throughput and energy of a diffusers pipeline (shared/CONTRACT.md; the
estimate is estimate.diffusion.plan_diffusion, the table report.diffusion_view)."""

from __future__ import annotations

import typer

from gpuscope.cli import options as o
from gpuscope.report.html.option import html_option, write_html

MODEL_HELP = ("A local diffusers folder (model_index.json + component configs) or a preset: sd-1.5, sdxl, "
              "sd-3.5-medium, flux.1-schnell, svd-xt, cogvideox-5b.")
COMPONENT_HELP = ("pipeline (text encoders, the denoiser's steps, the VAE decode) | denoiser (one forward) | "
                  "vae-decode | text-encoders.")
OFFLOAD_HELP = ("none | model (enable_model_cpu_offload: one component on the GPU at a time) | sequential "
                "(enable_sequential_cpu_offload: every layer's weights copied in as it runs).")
DTYPE_HELP = "fp16|bf16|fp32 (fp8: planner only, the denoiser's GEMMs and convolutions in fp8)."
ATTN_HELP = "sdpa (flash / memory-efficient: no score matrix) | math (diffusers' AttnProcessor: scores in memory)."


def register(plan: typer.Typer) -> None:
    plan.command("diffusion")(diffusion)


def diffusion(
    model: str = typer.Option(..., "--model", help=MODEL_HELP),
    gpu: str = o.gpu(),
    batch: int = typer.Option(1, "--batch", help="Images (or clips) per call."),
    height: int = typer.Option(None, "--height", help="Pixels (default: the pipeline's)."),
    width: int = typer.Option(None, "--width", help="Pixels (default: the pipeline's)."),
    frames: int = typer.Option(None, "--frames", help="Video frames (default: the pipeline's)."),
    steps: int = typer.Option(None, "--steps", help="Denoising steps (default: the pipeline's)."),
    cfg: bool = typer.Option(None, "--cfg/--no-cfg", help="Classifier-free guidance (the denoiser sees 2B)."),
    dtype: str = typer.Option("fp16", "--dtype", help=DTYPE_HELP),
    component: str = typer.Option("pipeline", "--component", help=COMPONENT_HELP),
    offload: str = typer.Option("none", "--offload", help=OFFLOAD_HELP),
    attention: str = typer.Option("sdpa", "--attention", help=ATTN_HELP),
    vae_tiling: bool = typer.Option(False, "--vae-tiling", help="Decode large latents tile by tile."),
    vae_slicing: bool = typer.Option(False, "--vae-slicing", help="Decode one image (or frame) at a time."),
    calibrated: bool = o.calibrated(),
    as_json: bool = o.json_out(help="Print JSON (schema gpuscope.estimate/1, kind diffusion)."),
    html: str = html_option(),
) -> None:
    """Diffusion and video generation: VRAM per phase, seconds per step, decode and call, images/s, J/image,
    and the largest batch, resolution and frame count that fit."""
    from gpuscope.estimate.diffusion import DiffusionRequest, plan_diffusion

    o.positive(batch=batch)
    for flag, v in (("height", height), ("width", width), ("frames", frames), ("steps", steps)):
        if v is not None:
            o.positive(**{flag: v})
    req = DiffusionRequest(model=model, batch=batch, height=height, width=width, frames=frames, steps=steps,
                           cfg=cfg, dtype=dtype, component=component, offload=offload, attention=attention,
                           vae_tiling=vae_tiling, vae_slicing=vae_slicing)
    plan = plan_diffusion(req, o.hardware(gpu, calibrated))
    if as_json:
        import json

        typer.echo(json.dumps(plan.to_json(), indent=2))
    else:
        from gpuscope.report.diffusion_view import render_plan

        render_plan(plan.to_json(), o.console())
    write_html(plan.to_json(), html)
