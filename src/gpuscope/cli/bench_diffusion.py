"""`gpuscope bench diffusion`: a diffusers pipeline's denoiser step, VAE decode, text encoders or the whole pipeline
of N steps, measured on random weights built from the folder's configs (or a local checkpoint's with --weights),
stored like every bench result with the planner's estimate (`plan diffusion`) and the doctor's findings beside it.

--batch, --height, --width and --frames take comma-separated lists: the points of one model, dtype and component
are measured in one process that builds the modules once, cheapest point first (each point is its own stored case,
with its own key, estimate and findings; an out-of-memory point is a result and the next one runs).
--height and --width pair up (512,1024 x 512,1024 is 512x512 then 1024x1024); one value applies to all.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from gpuscope.cli import options
from gpuscope.cli.bench_run import Session, bench_gpu, guarded, json_out, timeout
from gpuscope.errors import UserError

HELP = {
    "sizes": "Comma-separated values measure each (a sweep in one process).",
    "component": "pipeline (text encoders, N steps, VAE decode) | denoiser (one step) | vae-decode | text-encoders.",
    "cfg": "Classifier-free guidance: the denoiser sees 2B (--no-cfg: B). Default: the pipeline's (FLUX.1 is "
           "guidance-distilled: no CFG).",
    "attn": "sdpa (diffusers' default: scaled_dot_product_attention) | math (diffusers' AttnProcessor: the score "
            "matrix materialised; UNets only).",
    "profile": "One more call under torch.profiler: the device's busy time (the step if launches cost nothing: the "
               "doctor's launch-bound evidence), the top kernels by device time, the top host operators (denoiser, "
               "vae-decode, each text encoder).",
    "offload": "none | model (diffusers' enable_model_cpu_offload: one component on the GPU at a time) | sequential "
               "(enable_sequential_cpu_offload: each layer's weights copied in as it runs).",
    "weights": "Load the folder's own weights (from_pretrained, local files only) instead of random ones.",
    "timeout": "Seconds each point may take (the first includes building the modules).",
}


def _ints(flag: str, text: str | None) -> list[int | None]:
    if text is None:
        return [None]
    out = []
    for part in str(text).split(","):
        try:
            out.append(int(part.strip()))
        except ValueError:
            raise UserError(f"--{flag} '{text}' is not a comma-separated list of integers.") from None
    for v in out:
        options.positive(**{flag: v})
    return out


def sizes(height: str, width: str) -> list[tuple[int, int]]:
    hs, ws = _ints("height", height), _ints("width", width)
    if len(hs) != len(ws) and 1 not in (len(hs), len(ws)):
        raise UserError(f"--height and --width list {len(hs)} and {len(ws)} values: give as many of each, or one.")
    n = max(len(hs), len(ws))
    return [(hs[i if len(hs) > 1 else 0], ws[i if len(ws) > 1 else 0]) for i in range(n)]


def points(common: dict, batch: str, height: str, width: str, frames: str | None) -> list[dict]:
    """The case dicts of the sweep, checked (workloads/diffusion.py), cheapest first (pixels x frames, batch)."""
    from gpuscope.workloads.diffusion import DiffusionCase

    out = []
    for b in _ints("batch", batch):
        for h, w in sizes(height, width):
            for f in _ints("frames", frames):
                d = {**common, "batch": b, "height": h, "width": w, **({"frames": f} if f is not None else {})}
                out.append(DiffusionCase.from_dict(d))
    out.sort(key=lambda c: (c.height * c.width * (c.frames or 1) * c.batch, c.batch))
    return [c.to_dict() for c in out]


def _store(s: Session, rec: dict, gpu: str | None) -> None:
    """One measured point stored, with the estimate and the doctor's findings beside it."""
    from gpuscope import workloads
    from gpuscope.explain.rules_diffusion import diagnose_point
    from gpuscope.pipeline.estimate import estimate_beside

    typed = workloads.from_dict(rec["case"])
    res = rec["result"]
    prov = dict(rec.get("provenance") or {})
    prov.update(wall_s=rec.get("wall_s"), parent_argv=list(sys.argv))
    mid = s.store.put(s.run_id, typed.key, typed.KIND.value, typed.name, rec["case"], res, prov)
    est = estimate_beside(rec, gpu)
    entry = {"id": mid, "key": typed.key, "name": typed.name, "skipped": False, "status": res.get("status"),
             "result": res, "estimate": est, "wall_s": rec.get("wall_s")}
    entry["findings"] = [f.to_json() for f in diagnose_point(typed, res, gpu)]
    s.add(entry)
    for f in entry["findings"]:
        s.note(f"  {f['severity']}: {f['title']}. {f['fix']}")


def run_sweep(s: Session, cases: list[dict], gpu: str | None, timeout_s: float) -> None:
    """Each build's points in one process (measure/diffusion/spawn.py), those already measured skipped (--resume)."""
    from gpuscope import workloads
    from gpuscope.measure.diffusion.spawn import run_group
    from gpuscope.pipeline.estimate import estimate_beside, stored_record

    groups: dict = {}
    for c in cases:
        groups.setdefault(workloads.from_dict(c).build_key, []).append(c)
    for group in groups.values():
        todo = []
        for c in group:
            typed = workloads.from_dict(c)
            if typed.key in s.done:
                s.skipped(typed.key, typed.name, estimate=lambda old: estimate_beside(stored_record(old), gpu))
            else:
                todo.append(c)
        if todo:
            run_group(todo, timeout_s, lambda rec: _store(s, rec, gpu))


def diffusion(
    model: str = typer.Option(..., "--model", help="Diffusion preset (sd-1.5, sdxl, sd-3.5-medium, flux.1-schnell, "
                              "svd-xt, cogvideox-5b) or a diffusers folder (model_index.json + component configs)."),
    batch: str = typer.Option("1", "--batch", help="Images (or clips) per prompt batch. " + HELP["sizes"]),
    height: str = typer.Option(None, "--height", help="Pixels (default: the pipeline's). " + HELP["sizes"]),
    width: str = typer.Option(None, "--width", help="Pixels (default: the pipeline's). " + HELP["sizes"]),
    frames: str = typer.Option(None, "--frames", help="Video: frames per clip (default: the model's). "
                               + HELP["sizes"]),
    steps: int = typer.Option(None, "--steps", help="Denoising steps of --component pipeline (default: the "
                              "pipeline's)."),
    cfg: Optional[bool] = typer.Option(None, "--cfg/--no-cfg", help=HELP["cfg"]),
    dtype: str = options.dtype("fp16"),
    component: str = typer.Option("pipeline", "--component", help=HELP["component"]),
    vae_slicing: bool = typer.Option(False, "--vae-slicing", help="Decode one image at a time."),
    vae_tiling: bool = typer.Option(False, "--vae-tiling", help="Decode in overlapping tiles (diffusers')."),
    attn: str = typer.Option("sdpa", "--attn", help=HELP["attn"]),
    offload: str = typer.Option("none", "--offload", help=HELP["offload"]),
    repeats: int = typer.Option(5, "--repeats", help="Timed calls per point (median)."),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="Untimed calls first (default 2; 4 for a pipeline "
                                      "under --offload model, whose first calls meet fresh host pages)."),
    min_time: float = typer.Option(0.0, "--min-time", help="Repeat each timed phase until this many seconds."),
    profile: bool = typer.Option(False, "--profile", help=HELP["profile"]),
    weights: bool = typer.Option(False, "--weights", help=HELP["weights"]),
    gpu: str = bench_gpu(), timeout_s: float = timeout(help=HELP["timeout"]),
    db: str = options.db(), resume: bool = options.resume(), as_json: bool = json_out(),
    device: str = options.device(),
) -> None:
    """Image and video generation (diffusers, random weights): denoiser step, VAE decode, text encoders or the whole
    pipeline, peak memory and energy per point; estimate and findings beside it."""
    options.require_torch()
    device = options.device_exists(device)
    if warmup is None and offload == "model" and component == "pipeline":
        from gpuscope.estimate.diffusion.offload import STEADY_WARMUP_CALLS  # its first calls meet fresh pages

        warmup = STEADY_WARMUP_CALLS
    options.non_negative(warmup=warmup, min_time=min_time)
    options.positive(timeout=timeout_s)
    common = {"kind": "diffusion", "model": model, "steps": steps, "cfg": cfg, "dtype": dtype,
              "component": component, "repeats": repeats, "warmup": warmup}
    common = {k: v for k, v in common.items() if v is not None}
    extra = {"vae_slicing": vae_slicing, "vae_tiling": vae_tiling,
             "attn": attn if attn != "sdpa" else None, "offload": offload if offload != "none" else None,
             "min_time_s": min_time or None, "profile": profile,
             "weights": weights, "device": device}
    common.update({k: v for k, v in extra.items() if v})
    cases = points(common, batch, height, width, frames)
    options.known_gpu(gpu)
    s = Session(db, "bench diffusion", resume, as_json)
    guarded(s, lambda: run_sweep(s, cases, gpu, timeout_s))


def register_diffusion(bench: typer.Typer) -> None:
    bench.command("diffusion")(diffusion)
