"""`gpuscope advise infer|train --model M [constraints]`: rank the catalog and explain the choice (explain/advise.py;
the views are report/compare_view.py's)."""

from __future__ import annotations

from typing import List, Optional

import typer

from gpuscope.cli import options as o
from gpuscope.cli.compare import (ECONOMICS, GPU_HELP, INFER_WORKLOAD, MODEL_HELP, SOURCES, TRAIN_WORKLOAD, Sources,
                                  gpus_from)
from gpuscope.explain.measured_inputs import gather_measured

CANDIDATES_HELP = "Candidates (default: the whole catalog). " + GPU_HELP
STACK_HELP = "cuda|rocm|oneapi|synapseai|xla (repeat)."
OBJECTIVE_HELP = "cost | speed | efficiency"


def _constraints(budget, max_power_w, max_ttft_ms, max_tpot_ms, min_tokens_per_s, stack, min_memory_gb, objective,
                 pricing):
    from gpuscope.explain.advise import Constraints

    stacks = tuple(s.strip().lower() for x in (stack or []) for s in x.split(",") if s.strip())
    return Constraints(budget_usd=budget, max_power_w=max_power_w,
                       max_ttft_s=None if max_ttft_ms is None else max_ttft_ms / 1e3,
                       max_tpot_s=None if max_tpot_ms is None else max_tpot_ms / 1e3,
                       min_tokens_per_s=min_tokens_per_s, stacks=stacks, min_memory_gb=min_memory_gb,
                       objective=objective, pricing=pricing)


def _run(model, gpu, workload, cons, econ, src: Sources, as_json, as_md):
    from gpuscope.errors import UserError
    from gpuscope.explain.advise import advise
    from gpuscope.report.compare_view import advise_markdown, advise_with_sources, dumps, render_advise
    from gpuscope.specs.prices import load_prices

    table = load_prices(src.prices)
    if not model:
        raise UserError("--model is required (a preset name, a config.json or a directory holding one).")
    m = o.load_model_spec(model)
    meas, origin, store = gather_measured(m, workload, src.measured, src.db, src.no_db)
    a = advise(m, gpus_from(gpu or []), workload, cons, prices=table, econ=econ, measured=meas)
    j = advise_with_sources(a, origin, store, src.measured)
    o.emit(a, as_json, as_md, lambda _a: dumps(j), advise_markdown, render_advise, 160)


adv = typer.Typer(name="advise", no_args_is_help=True,
                  help="Rank hardware for a workload under constraints, with the decision path.")


def register(app: typer.Typer) -> None:
    app.add_typer(adv)


@adv.command("infer")
@ECONOMICS
@SOURCES
@INFER_WORKLOAD
def infer(
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    gpu: Optional[List[str]] = typer.Option(None, "--gpu", help=CANDIDATES_HELP),
    workload=None,
    budget: Optional[float] = typer.Option(None, "--budget", help="Purchase budget in USD for all cards needed."),
    max_power_w: Optional[float] = typer.Option(None, "--max-power-w", help="Power envelope (busy W, all cards)."),
    max_ttft_ms: Optional[float] = typer.Option(None, "--max-ttft-ms", help="Latency SLO: time to first token."),
    max_tpot_ms: Optional[float] = typer.Option(None, "--max-tpot-ms", help="Latency SLO: time per output token."),
    min_tokens_per_s: Optional[float] = typer.Option(None, "--min-tokens-per-s", help="Decode tokens/s target."),
    stack: Optional[List[str]] = typer.Option(None, "--stack", help=STACK_HELP),
    min_memory_gb: Optional[float] = typer.Option(None, "--min-memory-gb", help="Minimum memory per card."),
    objective: str = typer.Option("cost", "--objective", help=OBJECTIVE_HELP),
    pricing: str = typer.Option("own", "--pricing", help="own (purchase + energy) | cloud ($/GPU-hour)"),
    econ=None,
    sources=None,
    as_json: bool = o.json_out("gpuscope.advise/1"),
    as_md: bool = o.markdown(),
) -> None:
    """Inference: which hardware, with what dtype and how many cards, and why."""
    from gpuscope.explain.compare_hw import InferWorkload

    cons = _constraints(budget, max_power_w, max_ttft_ms, max_tpot_ms, min_tokens_per_s, stack, min_memory_gb,
                        objective, pricing)
    _run(model, gpu, InferWorkload(**workload), cons, econ, sources, as_json, as_md)


@adv.command("train")
@ECONOMICS
@SOURCES
@TRAIN_WORKLOAD
def train(
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    gpu: Optional[List[str]] = typer.Option(None, "--gpu", help=CANDIDATES_HELP),
    workload=None,
    budget: Optional[float] = typer.Option(None, "--budget", help="Purchase budget in USD per card."),
    max_power_w: Optional[float] = typer.Option(None, "--max-power-w"),
    min_tokens_per_s: Optional[float] = typer.Option(None, "--min-tokens-per-s", help="Per-card tokens/s target."),
    stack: Optional[List[str]] = typer.Option(None, "--stack", help=STACK_HELP),
    min_memory_gb: Optional[float] = typer.Option(None, "--min-memory-gb"),
    objective: str = typer.Option("cost", "--objective", help=OBJECTIVE_HELP),
    pricing: str = typer.Option("own", "--pricing", help="own | cloud"),
    econ=None,
    sources=None,
    as_json: bool = o.json_out("gpuscope.advise/1"),
    as_md: bool = o.markdown(),
) -> None:
    """Training on one card: which hardware fits and trains cheapest, fastest or most efficiently."""
    cons = _constraints(budget, max_power_w, None, None, min_tokens_per_s, stack, min_memory_gb, objective, pricing)
    _run(model, gpu, workload, cons, econ, sources, as_json, as_md)
