"""`gpuscope compare diffusion`: a diffusion workload on several accelerators (explain.compare_diffusion; the table
report.diffusion_view)."""

from __future__ import annotations

from typing import List, Optional

import typer

from gpuscope.cli import options as o
from gpuscope.cli.plan_diffusion import ATTN_HELP, DTYPE_HELP, MODEL_HELP, OFFLOAD_HELP

GPUS_HELP = "GPUs to compare: repeat the flag or give a comma list (a770,v100,4090,l40s,a100,h100,h200,mi300x)."


def register(cmp_app: typer.Typer) -> None:
    cmp_app.command("diffusion")(diffusion)


def diffusion(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    gpu: Optional[List[str]] = typer.Option(None, "--gpu", help=GPUS_HELP),
    batch: int = typer.Option(1, "--batch", help="Images (or clips) per call."),
    height: int = typer.Option(None, "--height", help="Pixels (default: the pipeline's)."),
    width: int = typer.Option(None, "--width", help="Pixels (default: the pipeline's)."),
    frames: int = typer.Option(None, "--frames", help="Video frames (default: the pipeline's)."),
    steps: int = typer.Option(None, "--steps", help="Denoising steps (default: the pipeline's)."),
    cfg: bool = typer.Option(None, "--cfg/--no-cfg", help="Classifier-free guidance (the denoiser sees 2B)."),
    dtype: str = typer.Option("fp16", "--dtype", help=DTYPE_HELP),
    offload: str = typer.Option("none", "--offload", help=OFFLOAD_HELP),
    attention: str = typer.Option("sdpa", "--attention", help=ATTN_HELP),
    prices: Optional[str] = typer.Option(None, "--prices", help="A prices TOML laid over the packaged table."),
    as_json: bool = o.json_out(help="Print JSON."),
    as_md: bool = o.markdown(),
) -> None:
    """Images/s (or s per clip), $ per 1,000 images and J per image across accelerators, with the memory tier
    that makes a call fit where it does not."""
    from gpuscope.cli.compare import gpus_from
    from gpuscope.errors import UserError
    from gpuscope.estimate.diffusion import DiffusionRequest
    from gpuscope.explain.compare_diffusion import compare_diffusion
    from gpuscope.report.diffusion_view import compare_markdown, render_compare
    from gpuscope.specs.prices import load_prices

    common = ctx.obj or {}
    model = model or common.get("model")
    names = list(gpu or []) or common.get("gpu") or []
    if not model:
        raise UserError("--model is required (a diffusion preset or a diffusers folder).")
    if not names:
        raise UserError("--gpu is required: give one or more GPUs to compare (`gpuscope hardware` lists them).")
    o.positive(batch=batch)
    for flag, v in (("height", height), ("width", width), ("frames", frames), ("steps", steps)):
        if v is not None:
            o.positive(**{flag: v})
    req = DiffusionRequest(model=model, batch=batch, height=height, width=width, frames=frames, steps=steps,
                           cfg=cfg, dtype=dtype, offload=offload, attention=attention)
    out = compare_diffusion(req, gpus_from(names), prices=load_prices(prices))
    if as_json:
        import json

        typer.echo(json.dumps(out, indent=2))
    elif as_md:
        typer.echo(compare_markdown(out))
    else:
        render_compare(out, o.console(160))
