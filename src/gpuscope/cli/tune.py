"""`gpuscope tune batch|precision infer|train`: search the batch size and the precision on the user's model;
`gpuscope tune plan`: the planner's single-GPU training configurations that fit (no GPU)."""

from __future__ import annotations

import typer

from gpuscope.cli import options as o
from gpuscope.errors import UserError

JSON_HELP = "Print JSON (schemas gpuscope.tune.batch/1, gpuscope.tune.precision/1)."
KIND_HELP = "infer | train"
MODES = "fp32,tf32,bf16,fp16,fp8"
# `tune batch`'s defaults on an accelerator and on a CPU (said on stderr there; a value given is kept). A CPU trial
# of gpt2 at batch 32 with a 128-token prompt and 16 tokens ran tens of seconds, and the doubling to 256 did not end
# in 5 minutes on the loaded 2-core host; bench's CPU sizes (cli/bench_cpu.py: fp32, 32 + 8 tokens, 128-token
# training sequences) and a 60 s budget of trials (measure/tune/batch.search_batch) keep it to about a minute
BATCH_ACCEL = {"prompt": 128, "gen": 16, "dtype": "bf16", "seq": 512, "precision": "amp-bf16", "max_batch": 256,
               "budget": None}
BATCH_CPU = {"prompt": 32, "gen": 8, "dtype": "fp32", "seq": 128, "precision": "fp32", "max_batch": 64,
             "budget": 60.0}

tune = typer.Typer(name="tune", help="Find the batch size and precision that suit your model on this device.",
                   no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(tune)


def _emit(res: dict, as_json: bool, markdown: bool, md_fn, render_fn) -> None:
    from gpuscope.report.doctor_view import to_json_text

    o.emit(res, as_json, markdown, to_json_text, md_fn, render_fn)


def _batch_defaults(kind: str, device, given: dict) -> tuple[dict, str | None]:
    """``given`` (None where not given) with the device's defaults (BATCH_ACCEL / BATCH_CPU), and the line that
    says the CPU's defaults taken (None elsewhere)."""
    from gpuscope.cli.bench_cpu import on_cpu

    cpu = on_cpu(device)
    table = BATCH_CPU if cpu else BATCH_ACCEL
    used = ("prompt", "gen", "dtype") if kind == "infer" else ("seq", "precision")
    taken = {k: table[k] for k, v in given.items() if v is None}
    shown = {k: v for k, v in taken.items() if k in used + ("max_batch", "budget")}
    note = ("tune batch on a CPU: " + ", ".join(f"--{k.replace('_', '-')} {v:g}" if isinstance(v, float) else
                                                f"--{k.replace('_', '-')} {v}" for k, v in shown.items())
            + " (CPU defaults: fp32 and small inputs finish there, a CPU swaps instead of raising out-of-memory; "
            "pass them to choose)") if cpu and shown else None
    return {**given, **taken}, note


def _batch_workload(kind: str, prompt: int, gen: int, dtype: str, seq: int, precision: str) -> dict:
    """The workload keys of `tune batch KIND`, checked."""
    from gpuscope.specs.axes import MEASURED_PRECISIONS, InferDtype, Precision

    if kind == "infer":
        return dict(prompt=prompt, gen=gen, dtype=o.axis(InferDtype, dtype, "dtype").value)
    return dict(seq=seq, precision=o.axis(Precision, precision, "precision", among=MEASURED_PRECISIONS).value)


@tune.command("batch")
def batch(
    kind: str = typer.Argument(..., help=KIND_HELP),
    model: str = o.model(required=False),
    config: str = o.config(),
    prompt: int = typer.Option(None, "--prompt", help="infer: prompt tokens per sequence (default 128, 32 on a CPU)."),
    gen: int = typer.Option(None, "--gen", help="infer: generated tokens per sequence (default 16, 8 on a CPU)."),
    dtype: str = o.dtype(None, help="infer: bf16|fp16|fp32 (default bf16, fp32 on a CPU)."),
    seq: int = typer.Option(None, "--seq", help="train: tokens per sequence (default 512, 128 on a CPU)."),
    precision: str = o.precision(None, help="train: amp-bf16|amp-fp16|bf16|fp32 (default amp-bf16, fp32 on a CPU)."),
    start: int = typer.Option(1, "--start", help="First batch tried."),
    max_batch: int = typer.Option(None, "--max-batch", help="Upper limit of the search (default 256, 64 on a CPU; "
                                  "lower where the planner says the batch would not fit in --mem-fraction of the "
                                  "free memory)."),
    budget: float = typer.Option(None, "--budget", help="Seconds of trials: no batch is tried that would end past "
                                 "it (default none, 60 on a CPU)."),
    knee: float = typer.Option(0.10, "--knee", help="Knee: tokens/s gain per doubling below this fraction."),
    fixed: int = typer.Option(1, "--fixed", help="Your current batch, compared with the others."),
    util_threshold: float = typer.Option(0.9, "--util-threshold",
                                         help="Dynamic policy: stop growing at this utilisation (0..1)."),
    mem_fraction: float = typer.Option(0.9, "--mem-fraction", help="Memory headroom: the search's cap (the "
                                       "planner's peak vs free memory) and the dynamic policy's limit."),
    upper: int = typer.Option(None, "--upper", help="Dynamic policy: upper bound (default --max-batch)."),
    device: str = o.device(),
    markdown: bool = o.markdown(),
    as_json: bool = o.json_out(help=JSON_HELP),
) -> None:
    """Largest batch that fits, the throughput knee, and the dynamic policy's choice, with a table."""
    from gpuscope.report.doctor_view import batch_markdown, render_batch

    o.kind(kind)
    o.positive(start=start, fixed=fixed, knee=knee, util_threshold=util_threshold, mem_fraction=mem_fraction,
               **{k: v for k, v in (("prompt", prompt), ("gen", gen), ("seq", seq), ("max_batch", max_batch),
                                    ("budget", budget)) if v is not None})
    o.require_torch()
    v, note = _batch_defaults(kind, device, dict(prompt=prompt, gen=gen, dtype=dtype, seq=seq, precision=precision,
                                                 max_batch=max_batch, budget=budget))
    if v["max_batch"] < start:
        raise UserError(f"--max-batch ({v['max_batch']}) must be at least --start ({start}).")
    kw = _batch_workload(kind, v["prompt"], v["gen"], v["dtype"], v["seq"], v["precision"])
    cfg, name = o.resolve_config(model, config)
    dev = o.open_device(device)
    if note:  # after the checks: bad input stays one sentence
        typer.echo(note, err=True)
    from gpuscope.measure.tune.batch import tune_batch

    res = tune_batch(kind, cfg, dev, start=start, max_batch=v["max_batch"], knee_gain=knee, fixed=fixed,
                     util_threshold=util_threshold, mem_fraction=mem_fraction, upper=upper, budget_s=v["budget"],
                     on_row=None if as_json else _say_row, **kw)
    res["model"] = name
    _emit(res, as_json, markdown, batch_markdown, render_batch)


def _say_row(r: dict) -> None:
    """One line per batch size tried, on stderr as it finishes."""
    what = (f"{r['tokens_per_s']:.1f} tokens/s" if r["status"] == "ok" else "out of memory")
    typer.echo(f"  batch {r['batch']}: {what} ({r['trial_s']:.1f} s)", err=True)


@tune.command("precision")
def precision_cmd(
    kind: str = typer.Argument(..., help=KIND_HELP),
    model: str = o.model(required=False),
    config: str = o.config(),
    batch: int = typer.Option(2, "--batch"),
    seq: int = typer.Option(128, "--seq"),
    modes: str = typer.Option(MODES, "--modes", help=f"Comma-separated subset of {MODES} (fp32 is always measured: "
                              "the reference)."),
    steps: int = typer.Option(3, "--steps", help="train: optimizer steps per mode."),
    device: str = o.device(),
    markdown: bool = o.markdown(),
    as_json: bool = o.json_out(help=JSON_HELP),
) -> None:
    """Speed, memory and deviation from fp32 per precision, and a recommendation with its trade-off."""
    from gpuscope.report.doctor_view import precision_markdown, render_precision

    o.kind(kind)
    o.positive(batch=batch, seq=seq, steps=steps)
    o.require_torch()
    from gpuscope.measure.tune.precision import PRECISION_MODES, precision_sweep

    ms = ["fp32"] + [m for m in o.choices("modes", modes, PRECISION_MODES) if m != "fp32"]
    cfg, name = o.resolve_config(model, config)
    dev = o.open_device(device)
    res = precision_sweep(kind, cfg, dev, batch=batch, seq=seq, modes=tuple(ms), steps=steps)
    res["model"] = name
    _emit(res, as_json, markdown, precision_markdown, render_precision)


@tune.command("plan")
def plan_cmd(
    model: str = o.model(),
    gpu: str = o.gpu(),
    seq: int = typer.Option(2048, "--seq"),
    tokens_per_step: int = typer.Option(None, "--tokens-per-step", help="Tokens per optimizer step to keep "
                                        "(gradient accumulation fills it; default seq x max micro-batch)."),
    max_micro_batch: int = typer.Option(64, "--max-micro-batch"),
    as_json: bool = typer.Option(False, "--json"),
    lora_r: int = typer.Option(None, "--lora-r", help="LoRA fine-tuning: rank seq x micro-batch x checkpointing x "
                               "optimizer (8-bit, paged) for adapters of this rank (explain/lora_tune.py)."),
    lora_targets: str = typer.Option(None, "--lora-targets", help="With --lora-r: all-linear or module names."),
    qlora: bool = typer.Option(False, "--qlora", help="With --lora-r: the frozen base in 4-bit NF4."),
    allow_pure_bf16: bool = typer.Option(False, "--allow-pure-bf16", help="Rank pure bf16 (bf16 weights and AdamW "
                                         "states; small-LR updates are lost) beside the fp32-master ones."),
) -> None:
    """Planner-only: the single-GPU training configurations that fit, fastest first (no GPU needed)."""
    from gpuscope.explain.recommend import PURE_BF16_NOTE, recommend_train
    from gpuscope.report.recommend_view import recommend_json_text, render_recommend

    m, hw = o.load_model_spec(model), o.hardware(gpu)
    if lora_r is not None or qlora or lora_targets:
        from gpuscope.explain.lora_tune import tune_lora
        from gpuscope.report.lora_view import print_tune

        return print_tune(tune_lora(m, hw, r=lora_r, targets=lora_targets, qlora=qlora, seq=seq,
                                    tokens_per_step=tokens_per_step, max_micro_batch=max_micro_batch), as_json,
                          o.console(160))
    choices = recommend_train(m, hw, seq=seq, tokens_per_step=tokens_per_step, max_micro_batch=max_micro_batch,
                              allow_pure_bf16=allow_pure_bf16)
    notes = () if allow_pure_bf16 else (PURE_BF16_NOTE,)
    if as_json:
        typer.echo(recommend_json_text(choices, m.name, hw.key, seq, notes))
    else:
        render_recommend(choices, m.name, hw.name, seq, o.console(160), notes)
