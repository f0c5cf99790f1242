"""`gpuscope compare [--model M --gpu A --gpu B] infer|train [options]`: hardware side by side.

The comparison is explain/compare_hw.py's, the measured numbers beside it explain/measured_inputs.py's, the views
report/compare_view.py's. The economics and measured-source options, shared with `advise`, are defined once here
(``ECONOMICS``, ``SOURCES``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import typer

from gpuscope.cli import options as o
from gpuscope.estimate.cost import (DEFAULT_HOURS_PER_YEAR, DEFAULT_PUE, DEFAULT_USD_PER_KWH, DEFAULT_UTILISATION,
                                    DEFAULT_YEARS, IDLE_FRACTION)
from gpuscope.explain.measured_inputs import gather_measured
from gpuscope.report.html.option import html_option, write_html

MODEL_HELP = o.MODEL_HELP
GPU_HELP = "Catalog name/alias or hardware TOML; repeat (or comma-separate) for several."
PRICES_HELP = "TOML of prices overriding the packaged table (see specs/data/prices.toml)."
MEASURED_HELP = ('JSON {"<gpu>": {"decode_tokens_per_s": .., "power_w": ..}} of measured results replacing estimates '
                 "(wins over the results database).")
DB_HELP = ("Results database to take measured numbers from (rows of the same workload, newest per GPU); default: "
           "the store's default path ($GPUSCOPE_DB, else $XDG_DATA_HOME/gpuscope/results.sqlite) if that file exists.")
NO_DB_HELP = "Do not read measured numbers from any results database."
INFER_DTYPE_HELP = "auto (bf16, else int8, else int4) | bf16|fp16|fp32|fp8|int8|int4"
ENGINE_HELP = ("graph (default here: hardware-bound decode; measured rows: gs-compile) | hf-graph (HF generate, "
               "compiled) | eager")


def econ_from(electricity, pue, hours_per_year, years, utilisation, idle_fraction):
    from gpuscope.estimate.cost import Economics

    return Economics(usd_per_kwh=electricity, pue=pue, hours_per_year=hours_per_year, years=years,
                     utilisation=utilisation, idle_fraction=idle_fraction)


@dataclass
class Sources:
    """Where the measured numbers and prices come from (--prices, --measured, --db, --no-db)."""

    prices: Optional[str]
    measured: Optional[str]
    db: Optional[str]
    no_db: bool


# The options every compare/advise command shares: one definition of their defaults and help.
ECONOMICS = o.option_group("econ", {
    "electricity": (float, typer.Option(DEFAULT_USD_PER_KWH, "--electricity", help="USD per kWh.")),
    "pue": (float, typer.Option(DEFAULT_PUE, "--pue", help="Power usage effectiveness (1.2-1.5 typical).")),
    "hours_per_year": (float, typer.Option(DEFAULT_HOURS_PER_YEAR, "--hours-per-year")),
    "years": (float, typer.Option(DEFAULT_YEARS, "--years", help="TCO horizon and amortisation period.")),
    "utilisation": (float, typer.Option(DEFAULT_UTILISATION, "--utilisation", help="Busy fraction of the hours.")),
    "idle_fraction": (float, typer.Option(IDLE_FRACTION, "--idle-fraction", help="Idle power / TDP.")),
}, econ_from)
SOURCES = o.option_group("sources", {
    "prices": (Optional[str], typer.Option(None, "--prices", help=PRICES_HELP)),
    "measured": (Optional[str], typer.Option(None, "--measured", help=MEASURED_HELP)),
    "db": (Optional[str], typer.Option(None, "--db", help=DB_HELP)),
    "no_db": (bool, typer.Option(False, "--no-db", help=NO_DB_HELP)),
}, Sources)


def _train_workload(**kw):
    from gpuscope.explain.compare_hw import TrainWorkload

    return TrainWorkload(**kw)


# The workload options of `compare` and `advise` (infer: a dict of InferWorkload's fields; train: a TrainWorkload).
INFER_WORKLOAD = o.option_group("workload", {
    "batch": (int, typer.Option(1, "--batch")),
    "prompt": (int, typer.Option(512, "--prompt")),
    "gen": (int, typer.Option(128, "--gen")),
    "dtype": (str, typer.Option("auto", "--dtype", help=INFER_DTYPE_HELP)),
    "engine": (str, typer.Option("graph", "--engine", help=ENGINE_HELP)),
    "max_gpus": (int, typer.Option(8, "--max-gpus", help="Most cards (tensor parallel) to try for a fit.")),
}, dict)
TRAIN_WORKLOAD = o.option_group("workload", {
    "micro_batch": (int, typer.Option(1, "--micro-batch")),
    "seq": (int, typer.Option(2048, "--seq")),
    "precision": (str, o.precision()),
    "optimizer": (str, o.optimizer()),
    "recompute": (str, o.recompute()),
    "grad_accum": (int, typer.Option(1, "--grad-accum")),
    "offload": (str, o.offload()),
    "tokens": (float, typer.Option(1e9, "--tokens", help="Token budget D for the 6ND cost (e.g. 1e9).")),
    "num_gpus": (int, typer.Option(1, "--num-gpus", help="Cards the budget runs on (data parallel).")),
}, _train_workload)


def gpus_from(names: list[str]):
    from gpuscope.specs.hardware import load_hardware

    out, seen = [], set()
    for n in names or []:
        for part in str(n).split(","):
            if part.strip():
                hw = load_hardware(part.strip())
                if hw.key not in seen:
                    seen.add(hw.key)
                    out.append(hw)
    return out


cmp_app = typer.Typer(name="compare", no_args_is_help=True,
                      help="Hardware side by side: fit, speed, energy, cost per token, TCO, training budget.")


def register(app: typer.Typer) -> None:
    app.add_typer(cmp_app)


@cmp_app.callback()
def _common(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    gpu: Optional[List[str]] = typer.Option(None, "--gpu", help=GPU_HELP),
) -> None:
    ctx.obj = {"model": model, "gpu": list(gpu or [])}


def _inputs(ctx: typer.Context, model, gpu):
    from gpuscope.errors import UserError

    common = ctx.obj or {}
    model = model or common.get("model")
    names = list(gpu or []) or common.get("gpu") or []
    if not model:
        raise UserError("--model is required (a preset name, a config.json or a directory holding one).")
    if not names:
        raise UserError("--gpu is required: give one or more GPUs to compare (`gpuscope hardware` lists them).")
    return o.load_model_spec(model), gpus_from(names)


def _run(ctx, model, gpu, w, econ, src: Sources, as_json, as_md, html=None) -> None:
    """One comparison: the workload on every GPU asked, with stored or given measurements beside it."""
    from gpuscope.explain.compare_hw import compare
    from gpuscope.report.compare_view import compare_markdown, compare_with_sources, dumps, render_compare
    from gpuscope.specs.prices import load_prices

    table = load_prices(src.prices)
    m, gpus = _inputs(ctx, model, gpu)
    meas, origin, store = gather_measured(m, w, src.measured, src.db, src.no_db)
    c = compare(m, gpus, w, prices=table, econ=econ, measured=meas)
    j = compare_with_sources(c, origin, store, src.measured)
    write_html(j, html)
    o.emit(c, as_json, as_md, lambda _c: dumps(j), compare_markdown, render_compare, 160)


@cmp_app.command("infer")
@ECONOMICS
@SOURCES
@INFER_WORKLOAD
def infer(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    gpu: Optional[List[str]] = typer.Option(None, "--gpu", help=GPU_HELP),
    workload=None,
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype"),
    econ=None,
    sources=None,
    as_json: bool = o.json_out("gpuscope.compare/1"),
    as_md: bool = o.markdown(),
    html: Optional[str] = html_option(),
) -> None:
    """Inference: fewest cards per dtype, TTFT, tokens/s, tokens/J, $ per 1M tokens, TCO."""
    from gpuscope.explain.compare_hw import InferWorkload

    _run(ctx, model, gpu, InferWorkload(**workload, kv_dtype=kv_dtype), econ, sources, as_json, as_md, html)


@cmp_app.command("train")
@ECONOMICS
@SOURCES
@TRAIN_WORKLOAD
def train(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    gpu: Optional[List[str]] = typer.Option(None, "--gpu", help=GPU_HELP),
    workload=None,
    econ=None,
    sources=None,
    as_json: bool = o.json_out("gpuscope.compare/1"),
    as_md: bool = o.markdown(),
    html: Optional[str] = html_option(),
    lora_r: Optional[int] = typer.Option(None, "--lora-r", help="LoRA fine-tuning with adapters of this rank: per "
                                         "card the longest sequence, the fastest fit at --seq, GPU-hours and cost."),
    lora_targets: Optional[str] = typer.Option(None, "--lora-targets", help="With --lora-r: all-linear or names."),
    qlora: bool = typer.Option(False, "--qlora", help="With --lora-r: the frozen base in 4-bit NF4."),
) -> None:
    """Training on one card: fit, tokens/s, MFU, energy, cost, and a 6ND token budget on N cards."""
    if lora_r is not None or qlora or lora_targets:
        return _lora(ctx, model, gpu, workload, econ, sources, (lora_r, lora_targets, qlora), as_json, as_md)
    _run(ctx, model, gpu, workload, econ, sources, as_json, as_md, html)


def _lora(ctx, model, gpu, w, econ, src: Sources, lora, as_json, as_md) -> None:
    """`compare train --lora-r`: explain/lora_compare.py's cards (micro-batch, checkpointing, optimizer searched)."""
    from gpuscope.errors import UserError
    from gpuscope.explain.lora_compare import compare_lora
    from gpuscope.report.lora_view import compare_markdown, print_compare
    from gpuscope.specs.prices import load_prices

    r, targets, qlora = lora
    if r is None:
        raise UserError("--qlora and --lora-targets need --lora-r (the adapters' rank, e.g. --lora-r 16).")
    m, gpus = _inputs(ctx, model, gpu)
    c = compare_lora(m, gpus, r=r, targets=targets, qlora=qlora, seq=w.seq, precision=w.precision,
                     optimizer=w.optimizer, tokens=w.tokens, prices=load_prices(src.prices),
                     usd_per_kwh=econ.usd_per_kwh, pue=econ.pue)
    print_compare(c.to_json(), as_json, as_md, o.console(160))
__import__("gpuscope.cli.compare_diffusion", fromlist=["register"]).register(cmp_app)  # `compare diffusion`
