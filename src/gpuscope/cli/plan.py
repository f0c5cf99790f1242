"""`gpuscope plan infer|train`: estimates with no GPU (shared/CONTRACT.md)."""

from __future__ import annotations

import typer

JSON_HELP = "Print JSON (schema gpuscope.estimate/1)."


def _console():
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=max(c.width, 140))


def register(app: typer.Typer) -> None:
    plan = typer.Typer(name="plan", help="Estimate memory, time and throughput without a GPU.", no_args_is_help=True)

    @plan.command("infer")
    def infer(
        model: str = typer.Option(..., "--model", help="Preset name, config.json, or a directory holding one."),
        gpu: str = typer.Option(..., "--gpu", help="Catalog name or alias, or a hardware TOML."),
        batch: int = typer.Option(1, "--batch"),
        prompt: int = typer.Option(512, "--prompt", help="Prompt tokens per sequence."),
        gen: int = typer.Option(128, "--gen", help="Generated tokens per sequence."),
        dtype: str = typer.Option("bf16", "--dtype", help="bf16|fp16|fp32|fp8|int8|int4 (weights)."),
        kv_dtype: str = typer.Option(None, "--kv-dtype", help="KV-cache dtype (default: the compute dtype)."),
        engine: str = typer.Option("eager", "--engine", help="eager (plain HF generate) | graph (CUDA graphs)."),
        num_gpus: int = typer.Option(1, "--num-gpus"),
        tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
        ops: bool = typer.Option(False, "--ops", help="Show the per-operation breakdown."),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Inference: weights, KV cache and activations at the peak; TTFT, TPOT, tokens/s."""
        from gpuscope.estimate.infer import estimate_infer
        from gpuscope.report.estimate_view import render, to_json_text
        from gpuscope.specs.hardware import load_hardware
        from gpuscope.specs.models import load_model

        est = estimate_infer(load_model(model), load_hardware(gpu), batch=batch, prompt=prompt, gen=gen,
                             dtype=dtype, kv_dtype=kv_dtype, engine=engine, num_gpus=num_gpus, tp=tp, with_ops=ops)
        typer.echo(to_json_text(est)) if as_json else render(est, _console(), show_ops=ops)

    @plan.command("train")
    def train(
        model: str = typer.Option(..., "--model", help="Preset name, config.json, or a directory holding one."),
        gpu: str = typer.Option(..., "--gpu", help="Catalog name or alias, or a hardware TOML."),
        micro_batch: int = typer.Option(1, "--micro-batch"),
        seq: int = typer.Option(2048, "--seq"),
        precision: str = typer.Option("amp-bf16", "--precision", help="amp-bf16|amp-fp16|bf16|fp32|fp8"),
        optimizer: str = typer.Option("adamw", "--optimizer", help="adamw|adam|sgd|adamw-8bit"),
        recompute: str = typer.Option("none", "--recompute", help="none|selective|full"),
        grad_accum: int = typer.Option(1, "--grad-accum"),
        offload: str = typer.Option("none", "--offload", help="none|optimizer|params"),
        fused: bool = typer.Option(True, "--fused/--foreach", help="Fused optimizer step (default) or foreach."),
        num_gpus: int = typer.Option(1, "--num-gpus"),
        ops: bool = typer.Option(False, "--ops", help="Show the per-operation breakdown."),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Training on one GPU: memory per phase (forward, backward, optimizer), step time, tokens/s, MFU."""
        from gpuscope.errors import UserError
        from gpuscope.estimate.train import estimate_train
        from gpuscope.report.estimate_view import render, to_json_text
        from gpuscope.specs.hardware import load_hardware
        from gpuscope.specs.models import load_model

        if num_gpus != 1:
            raise UserError("--num-gpus: multi-GPU training plans (TP/PP/ZeRO/FSDP) are not built yet; use 1.")
        est = estimate_train(load_model(model), load_hardware(gpu), micro_batch=micro_batch, seq=seq,
                             precision=precision, optimizer=optimizer, recompute=recompute, grad_accum=grad_accum,
                             offload=offload, fused=fused, num_gpus=num_gpus, with_ops=ops)
        typer.echo(to_json_text(est)) if as_json else render(est, _console(), show_ops=ops)

    app.add_typer(plan)
