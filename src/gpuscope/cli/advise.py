"""`gpuscope advise infer|train --model M [constraints]`: rank the catalog and explain the choice."""

from __future__ import annotations

from typing import List, Optional

import typer

from gpuscope.cli.compare import (GPU_HELP, MODEL_HELP, OPT_DB, OPT_ELECTRICITY, OPT_HOURS_PER_YEAR,
                                  OPT_IDLE_FRACTION, OPT_MARKDOWN, OPT_MEASURED, OPT_NO_DB, OPT_PRICES, OPT_PUE,
                                  OPT_UTILISATION, OPT_YEARS, econ_from, emit, gather_measured, gpus_from)


def _constraints(budget, max_power_w, max_ttft_ms, max_tpot_ms, min_tokens_per_s, stack, min_memory_gb, objective,
                 pricing):
    from gpuscope.explain.advise import Constraints

    stacks = tuple(s.strip().lower() for x in (stack or []) for s in x.split(",") if s.strip())
    return Constraints(budget_usd=budget, max_power_w=max_power_w,
                       max_ttft_s=None if max_ttft_ms is None else max_ttft_ms / 1e3,
                       max_tpot_s=None if max_tpot_ms is None else max_tpot_ms / 1e3,
                       min_tokens_per_s=min_tokens_per_s, stacks=stacks, min_memory_gb=min_memory_gb,
                       objective=objective, pricing=pricing)


def _run(model, gpu, workload, cons, econ, prices, measured, as_json, as_md, db=None, no_db=False):
    from gpuscope.errors import UserError
    from gpuscope.explain.advise import advise
    from gpuscope.report.compare_view import advise_markdown, advise_to_json, render_advise
    from gpuscope.specs.models import load_model
    from gpuscope.specs.prices import load_prices

    table = load_prices(prices)
    if not model:
        raise UserError("--model is required (a preset name, a config.json or a directory holding one).")
    m = load_model(model)
    meas, origin, store = gather_measured(m, workload, measured, db, no_db)
    a = advise(m, gpus_from(gpu or []), workload, cons, prices=table, econ=econ, measured=meas)
    j = advise_to_json(a)
    used = {k: v for k, v in origin.items() if any(c.row.hardware == k for c in [*a.ranked, *a.ruled_out])}
    j["measured_sources"] = {"db": store.db if store is not None else None, "file": measured,
                             "db_rows": {k: v for k, v in (store.origin if store is not None else {}).items()
                                         if k in used},
                             "metrics": used}
    emit(j, advise_markdown(a) if as_md else None, as_json, as_md, lambda con: render_advise(a, con))


def register(app: typer.Typer) -> None:
    adv = typer.Typer(name="advise", no_args_is_help=True,
                      help="Rank hardware for a workload under constraints, with the decision path.")

    @adv.command("infer")
    def infer(
        model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
        gpu: Optional[List[str]] = typer.Option(None, "--gpu",
                                                help="Candidates (default: the whole catalog). " + GPU_HELP),
        batch: int = typer.Option(1, "--batch"),
        prompt: int = typer.Option(512, "--prompt"),
        gen: int = typer.Option(128, "--gen"),
        dtype: str = typer.Option("auto", "--dtype",
                                  help="auto (bf16, else int8, else int4) | bf16|fp16|fp32|fp8|int8|int4"),
        engine: str = typer.Option("graph", "--engine"),
        max_gpus: int = typer.Option(8, "--max-gpus"),
        budget: Optional[float] = typer.Option(None, "--budget", help="Purchase budget in USD for all cards needed."),
        max_power_w: Optional[float] = typer.Option(None, "--max-power-w", help="Power envelope (busy W, all cards)."),
        max_ttft_ms: Optional[float] = typer.Option(None, "--max-ttft-ms", help="Latency SLO: time to first token."),
        max_tpot_ms: Optional[float] = typer.Option(None, "--max-tpot-ms", help="Latency SLO: time per output token."),
        min_tokens_per_s: Optional[float] = typer.Option(None, "--min-tokens-per-s", help="Decode tokens/s target."),
        stack: Optional[List[str]] = typer.Option(None, "--stack", help="cuda|rocm|oneapi|synapseai|xla (repeat)."),
        min_memory_gb: Optional[float] = typer.Option(None, "--min-memory-gb", help="Minimum memory per card."),
        objective: str = typer.Option("cost", "--objective", help="cost | speed | efficiency"),
        pricing: str = typer.Option("own", "--pricing", help="own (purchase + energy) | cloud ($/GPU-hour)"),
        electricity: float = OPT_ELECTRICITY,
        pue: float = OPT_PUE,
        hours_per_year: float = OPT_HOURS_PER_YEAR,
        years: float = OPT_YEARS,
        utilisation: float = OPT_UTILISATION,
        idle_fraction: float = OPT_IDLE_FRACTION,
        prices: Optional[str] = OPT_PRICES,
        measured: Optional[str] = OPT_MEASURED,
        db: Optional[str] = OPT_DB,
        no_db: bool = OPT_NO_DB,
        as_json: bool = typer.Option(False, "--json", help="Print JSON (schema gpuscope.advise/1)."),
        as_md: bool = OPT_MARKDOWN,
    ) -> None:
        """Inference: which hardware, with what dtype and how many cards, and why."""
        from gpuscope.explain.compare_hw import InferWorkload

        econ = econ_from(electricity, pue, hours_per_year, years, utilisation, idle_fraction)
        cons = _constraints(budget, max_power_w, max_ttft_ms, max_tpot_ms, min_tokens_per_s, stack, min_memory_gb,
                            objective, pricing)
        w = InferWorkload(batch=batch, prompt=prompt, gen=gen, dtype=dtype, engine=engine, max_gpus=max_gpus)
        _run(model, gpu, w, cons, econ, prices, measured, as_json, as_md, db, no_db)

    @adv.command("train")
    def train(
        model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
        gpu: Optional[List[str]] = typer.Option(None, "--gpu",
                                                help="Candidates (default: the whole catalog). " + GPU_HELP),
        micro_batch: int = typer.Option(1, "--micro-batch"),
        seq: int = typer.Option(2048, "--seq"),
        precision: str = typer.Option("amp-bf16", "--precision"),
        optimizer: str = typer.Option("adamw", "--optimizer"),
        recompute: str = typer.Option("none", "--recompute"),
        grad_accum: int = typer.Option(1, "--grad-accum"),
        offload: str = typer.Option("none", "--offload"),
        tokens: float = typer.Option(1e9, "--tokens", help="Token budget D for the 6ND cost."),
        num_gpus: int = typer.Option(1, "--num-gpus", help="Cards the budget runs on (data parallel)."),
        budget: Optional[float] = typer.Option(None, "--budget", help="Purchase budget in USD per card."),
        max_power_w: Optional[float] = typer.Option(None, "--max-power-w"),
        min_tokens_per_s: Optional[float] = typer.Option(None, "--min-tokens-per-s", help="Per-card tokens/s target."),
        stack: Optional[List[str]] = typer.Option(None, "--stack", help="cuda|rocm|oneapi|synapseai|xla (repeat)."),
        min_memory_gb: Optional[float] = typer.Option(None, "--min-memory-gb"),
        objective: str = typer.Option("cost", "--objective", help="cost | speed | efficiency"),
        pricing: str = typer.Option("own", "--pricing", help="own | cloud"),
        electricity: float = OPT_ELECTRICITY,
        pue: float = OPT_PUE,
        hours_per_year: float = OPT_HOURS_PER_YEAR,
        years: float = OPT_YEARS,
        utilisation: float = OPT_UTILISATION,
        idle_fraction: float = OPT_IDLE_FRACTION,
        prices: Optional[str] = OPT_PRICES,
        measured: Optional[str] = OPT_MEASURED,
        db: Optional[str] = OPT_DB,
        no_db: bool = OPT_NO_DB,
        as_json: bool = typer.Option(False, "--json", help="Print JSON (schema gpuscope.advise/1)."),
        as_md: bool = OPT_MARKDOWN,
    ) -> None:
        """Training on one card: which hardware fits and trains cheapest, fastest or most efficiently."""
        from gpuscope.explain.compare_hw import TrainWorkload

        econ = econ_from(electricity, pue, hours_per_year, years, utilisation, idle_fraction)
        cons = _constraints(budget, max_power_w, None, None, min_tokens_per_s, stack, min_memory_gb, objective,
                            pricing)
        w = TrainWorkload(micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer,
                          recompute=recompute, grad_accum=grad_accum, offload=offload, tokens=tokens,
                          num_gpus=num_gpus)
        _run(model, gpu, w, cons, econ, prices, measured, as_json, as_md, db, no_db)

    app.add_typer(adv)
