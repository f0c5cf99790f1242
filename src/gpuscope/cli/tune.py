"""`gpuscope tune batch|precision infer|train`: search the batch size and the precision on the user's model."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from gpuscope.errors import UserError

KINDS = ("infer", "train")
JSON_HELP = "Print JSON (schemas gpuscope.tune.batch/1, gpuscope.tune.precision/1)."
MODEL_HELP = "Preset name, config.json, or a directory holding one."
CONFIG_HELP = "A Hugging Face config.json to build the model from (instead of --model)."
DEVICE_HELP = "cpu, cuda, cuda:N, xpu, mps (default: the first available accelerator, else cpu)."


def _console():
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=max(c.width, 140))


def resolve_config(model: str | None, config: str | None) -> tuple[dict, str]:
    """(HF config dict, display name); bad input is a UserError."""
    if config:
        p = Path(config)
        if p.is_dir():
            p = p / "config.json"
        if not p.is_file():
            raise UserError(f"--config '{config}' does not exist.")
        try:
            cfg = json.loads(p.read_text())
        except json.JSONDecodeError:
            raise UserError(f"--config '{config}' is not valid JSON.") from None
        if not isinstance(cfg, dict) or "model_type" not in cfg:
            raise UserError(f"--config '{config}' has no 'model_type'.")
        return cfg, p.stem if p.name != "config.json" else p.parent.name
    if not model:
        raise UserError("--model or --config is required.")
    if Path(model).expanduser().exists():  # a config.json or a directory holding one, named by the file
        return resolve_config(None, str(Path(model).expanduser()))
    from gpuscope.specs.models import load_model

    load_model(model)  # a missing file or unknown preset is a UserError here
    from gpuscope.measure.models.hf_model import case_config

    return case_config({"model": model}), model


def case_model(model: str | None, config: str | None = None) -> tuple[str, dict]:
    """(the case's model name, extra case keys) for --model/--config: a preset stays a name; a config file
    (--config, or --model pointing at a config.json or a directory holding one) is stored inline as the case's
    ``config`` under the file's name, so the record is self-contained: it can be re-planned and re-run on another
    machine (a device path alone could not)."""
    cfg, name = resolve_config(model, config)
    inline = bool(config) or Path(str(model)).expanduser().exists()
    return name, ({"config": cfg} if inline else {})


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise UserError(f"the workload must be one of {', '.join(KINDS)}, got '{kind}'.")
    return kind


def _device(device: str | None):
    from gpuscope.cli.options import check_device, require_torch

    require_torch()
    device = check_device(device)
    from gpuscope.measure.device.device import Device, pick_device

    try:
        return Device(pick_device(device))
    except RuntimeError as e:
        raise UserError(f"--device: {e}.") from None


def _positive(**kw) -> None:
    for name, v in kw.items():
        if v is None or v <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be positive, not {v}.")


def _emit(res: dict, as_json: bool, markdown: bool, md_fn, render_fn) -> None:
    from gpuscope.report.doctor_view import to_json_text

    if as_json:
        typer.echo(to_json_text(res))
    elif markdown:
        typer.echo(md_fn(res))
    else:
        render_fn(res, _console())


def register(app: typer.Typer) -> None:
    tune = typer.Typer(name="tune", help="Find the batch size and precision that suit your model on this device.",
                       no_args_is_help=True)

    @tune.command("batch")
    def batch(
        kind: str = typer.Argument(..., help="infer | train"),
        model: str = typer.Option(None, "--model", help=MODEL_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
        prompt: int = typer.Option(128, "--prompt", help="infer: prompt tokens per sequence."),
        gen: int = typer.Option(16, "--gen", help="infer: generated tokens per sequence."),
        dtype: str = typer.Option("bf16", "--dtype", help="infer: bf16|fp16|fp32."),
        seq: int = typer.Option(512, "--seq", help="train: tokens per sequence."),
        precision: str = typer.Option("amp-bf16", "--precision", help="train: amp-bf16|amp-fp16|bf16|fp32."),
        start: int = typer.Option(1, "--start", help="First batch tried."),
        max_batch: int = typer.Option(256, "--max-batch", help="Upper limit of the search."),
        knee: float = typer.Option(0.10, "--knee", help="Knee: tokens/s gain per doubling below this fraction."),
        fixed: int = typer.Option(1, "--fixed", help="Your current batch, compared with the others."),
        util_threshold: float = typer.Option(0.9, "--util-threshold", help="Dynamic policy: stop growing at this "
                                             "utilisation (0..1)."),
        mem_fraction: float = typer.Option(0.9, "--mem-fraction", help="Dynamic policy: memory headroom limit."),
        upper: int = typer.Option(None, "--upper", help="Dynamic policy: upper bound (default --max-batch)."),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
        markdown: bool = typer.Option(False, "--markdown", help="Print Markdown."),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Largest batch that fits, the throughput knee, and the dynamic policy's choice, with a table."""
        from gpuscope.report.doctor_view import batch_markdown, render_batch

        _kind(kind)
        _positive(prompt=prompt, gen=gen, seq=seq, start=start, max_batch=max_batch, fixed=fixed, knee=knee,
                  util_threshold=util_threshold, mem_fraction=mem_fraction)
        if max_batch < start:
            raise UserError(f"--max-batch ({max_batch}) must be at least --start ({start}).")
        if kind == "infer" and dtype not in ("bf16", "fp16", "fp32"):
            raise UserError(f"--dtype '{dtype}' is not one of bf16, fp16, fp32.")
        if kind == "train" and precision not in ("amp-bf16", "amp-fp16", "bf16", "fp32"):
            raise UserError(f"--precision '{precision}' is not one of amp-bf16, amp-fp16, bf16, fp32.")
        cfg, name = resolve_config(model, config)
        dev = _device(device)
        from gpuscope.measure.tune.batch import tune_batch

        kw = dict(prompt=prompt, gen=gen, dtype=dtype) if kind == "infer" else dict(seq=seq, precision=precision)
        res = tune_batch(kind, cfg, dev, start=start, max_batch=max_batch, knee_gain=knee, fixed=fixed,
                         util_threshold=util_threshold, mem_fraction=mem_fraction, upper=upper, **kw)
        res["model"] = name
        _emit(res, as_json, markdown, batch_markdown, render_batch)

    @tune.command("precision")
    def precision_cmd(
        kind: str = typer.Argument(..., help="infer | train"),
        model: str = typer.Option(None, "--model", help=MODEL_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
        batch: int = typer.Option(2, "--batch"),
        seq: int = typer.Option(128, "--seq"),
        modes: str = typer.Option("fp32,tf32,bf16,fp16,fp8", "--modes", help="Comma-separated subset of "
                                  "fp32,tf32,bf16,fp16,fp8 (fp32 is always measured: the reference)."),
        steps: int = typer.Option(3, "--steps", help="train: optimizer steps per mode."),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
        markdown: bool = typer.Option(False, "--markdown", help="Print Markdown."),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Speed, memory and deviation from fp32 per precision, and a recommendation with its trade-off."""
        from gpuscope.measure.tune.precision import PRECISION_MODES, precision_sweep
        from gpuscope.report.doctor_view import precision_markdown, render_precision

        _kind(kind)
        _positive(batch=batch, seq=seq, steps=steps)
        ms = [m.strip().lower() for m in modes.split(",") if m.strip()]
        for m in ms:
            if m not in PRECISION_MODES:
                raise UserError(f"--modes: '{m}' is not one of {', '.join(PRECISION_MODES)}.")
        ms = ["fp32"] + [m for m in ms if m != "fp32"]
        cfg, name = resolve_config(model, config)
        dev = _device(device)
        res = precision_sweep(kind, cfg, dev, batch=batch, seq=seq, modes=tuple(ms), steps=steps)
        res["model"] = name
        _emit(res, as_json, markdown, precision_markdown, render_precision)

    @tune.command("plan")
    def plan_cmd(
        model: str = typer.Option(..., "--model", help="Preset name, config.json, or a directory holding one."),
        gpu: str = typer.Option(..., "--gpu", help="Catalog name or alias, or a hardware TOML."),
        seq: int = typer.Option(2048, "--seq"),
        tokens_per_step: int = typer.Option(None, "--tokens-per-step", help="Tokens per optimizer step to keep "
                                            "(gradient accumulation fills it; default seq x max micro-batch)."),
        max_micro_batch: int = typer.Option(64, "--max-micro-batch"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Planner-only: the single-GPU training configurations that fit, fastest first (no GPU needed)."""
        import json

        from rich.console import Console
        from rich.table import Table

        from gpuscope.explain.recommend import recommend_train
        from gpuscope.specs.hardware import load_hardware
        from gpuscope.specs.models import load_model

        m, hw = load_model(model), load_hardware(gpu)
        choices = recommend_train(m, hw, seq=seq, tokens_per_step=tokens_per_step, max_micro_batch=max_micro_batch)
        if as_json:
            typer.echo(json.dumps({"schema": "gpuscope.recommend/1", "model": m.name, "hardware": hw.key, "seq": seq,
                                   "ranked": [c.to_json() for c in choices]}, indent=2))
            return
        t = Table(title=f"{m.name} on {hw.name}, seq {seq}: configurations that fit, fastest first",
                  header_style="bold")
        for c in ("#", "precision", "optimizer", "recompute", "micro-batch", "accum", "tok/s", "MFU", "GiB", "needs"):
            t.add_column(c, justify="right")
        for i, c in enumerate(choices, 1):
            t.add_row(str(i), c.precision, c.optimizer, c.recompute, str(c.micro_batch), str(c.grad_accum),
                      f"{c.tokens_per_s:,.0f}", f"{c.mfu:.1%}", f"{c.required_bytes / 2**30:.1f}", c.needs or "-")
        console = Console()
        (console if console.is_terminal else Console(width=160)).print(t)

    app.add_typer(tune)
