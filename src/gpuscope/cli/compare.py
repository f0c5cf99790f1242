"""`gpuscope compare [--model M --gpu A --gpu B] infer|train [options]`: hardware side by side."""

from __future__ import annotations

from typing import List, Optional

import typer

from gpuscope.estimate.cost import (DEFAULT_HOURS_PER_YEAR, DEFAULT_PUE, DEFAULT_USD_PER_KWH, DEFAULT_UTILISATION,
                                    DEFAULT_YEARS, IDLE_FRACTION)

MODEL_HELP = "Preset name, config.json, or a directory holding one."
GPU_HELP = "Catalog name/alias or hardware TOML; repeat (or comma-separate) for several."
PRICES_HELP = "TOML of prices overriding the packaged table (see specs/data/prices.toml)."
MEASURED_HELP = ('JSON {"<gpu>": {"decode_tokens_per_s": .., "power_w": ..}} of measured results replacing estimates '
                 "(wins over the results database).")
DB_HELP = ("Results database to take measured numbers from (rows of the same workload, newest per GPU); default: "
           "the store's default path ($GPUSCOPE_DB, else $XDG_DATA_HOME/gpuscope/results.sqlite) if that file exists.")
NO_DB_HELP = "Do not read measured numbers from any results database."

# Options every compare/advise command shares (one definition of their defaults and help).
OPT_ELECTRICITY = typer.Option(DEFAULT_USD_PER_KWH, "--electricity", help="USD per kWh.")
OPT_PUE = typer.Option(DEFAULT_PUE, "--pue", help="Power usage effectiveness (1.2-1.5 typical).")
OPT_HOURS_PER_YEAR = typer.Option(DEFAULT_HOURS_PER_YEAR, "--hours-per-year")
OPT_YEARS = typer.Option(DEFAULT_YEARS, "--years", help="TCO horizon and amortisation period.")
OPT_UTILISATION = typer.Option(DEFAULT_UTILISATION, "--utilisation", help="Busy fraction of the hours.")
OPT_IDLE_FRACTION = typer.Option(IDLE_FRACTION, "--idle-fraction", help="Idle power / TDP.")
OPT_PRICES = typer.Option(None, "--prices", help=PRICES_HELP)
OPT_MEASURED = typer.Option(None, "--measured", help=MEASURED_HELP)
OPT_DB = typer.Option(None, "--db", help=DB_HELP)
OPT_NO_DB = typer.Option(False, "--no-db", help=NO_DB_HELP)
OPT_MARKDOWN = typer.Option(False, "--markdown", help="Print Markdown.")



def _console():
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=max(c.width, 160))


def econ_from(electricity, pue, hours_per_year, years, utilisation, idle_fraction):
    from gpuscope.estimate.cost import Economics

    return Economics(usd_per_kwh=electricity, pue=pue, hours_per_year=hours_per_year, years=years,
                     utilisation=utilisation, idle_fraction=idle_fraction)


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


def measured_from(path: str | None) -> dict:
    """Read a measured-results JSON: {gpu name or alias: {metric: value}} (the store's numbers: gather_measured)."""
    if not path:
        return {}
    import json
    from pathlib import Path

    from gpuscope.errors import UserError
    from gpuscope.specs.hardware import load_hardware

    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"--measured file '{p}' does not exist.")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"--measured file '{p}' is not valid JSON ({exc}).") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"--measured file '{p}' must map GPU names to objects of metric values.")
    return {load_hardware(k).key: v for k, v in data.items()}


def store_path(db: str | None, no_db: bool):
    """The results database to read: --db as given (it must exist), else the default one if it exists, else None."""
    from pathlib import Path

    from gpuscope.errors import UserError

    if no_db:
        if db:
            raise UserError("--db and --no-db contradict each other; give one of them.")
        return None
    if db:
        return Path(db).expanduser()
    from gpuscope.store.db import default_db_path

    p = default_db_path()
    return p if p.is_file() else None


def gather_measured(model, workload, measured: str | None, db: str | None, no_db: bool):
    """(values for compare(measured=...), origin per GPU and metric, the store's MeasuredSet or None)."""
    from gpuscope.explain.measured_source import from_store, merge

    file_values = measured_from(measured)
    path = store_path(db, no_db)
    store = from_store(path, model, workload) if path is not None else None
    values, origin = merge(store, file_values, measured)
    return values, origin, store


def with_measured_sources(cmp, origin: dict, store, measured: str | None) -> dict:
    """Note in each row where its measured numbers came from; the JSON gets them per row (``measured_from``) and
    for the whole table (``measured_sources``)."""
    from gpuscope.explain.measured_source import note_for
    from gpuscope.report.compare_view import compare_to_json

    for r in cmp.rows:
        n = note_for(r.hardware, origin.get(r.hardware) or {}, store)
        if n and any(r.sources.get(m) == "measured" for m in origin.get(r.hardware) or {}):
            r.notes.append(n)
    j = compare_to_json(cmp)
    for rd in j["rows"]:
        used = {m: o for m, o in (origin.get(rd["hardware"]) or {}).items() if rd["sources"].get(m) == "measured"}
        rd["measured_from"] = used
    j["measured_sources"] = {
        "db": store.db if store is not None else None,
        "db_rows": {k: v for k, v in (store.origin if store is not None else {}).items()
                    if any(rd["hardware"] == k and rd["measured_from"] for rd in j["rows"])},
        "file": measured,
    }
    return j


def emit(obj_json: dict, markdown: str | None, as_json: bool, as_md: bool, render) -> None:
    from gpuscope.report.compare_view import dumps

    if as_json:
        typer.echo(dumps(obj_json))
    elif as_md:
        typer.echo(markdown)
    else:
        render(_console())


def register(app: typer.Typer) -> None:
    cmp_app = typer.Typer(name="compare", no_args_is_help=True,
                          help="Hardware side by side: fit, speed, energy, cost per token, TCO, training budget.")
    state: dict = {}

    @cmp_app.callback()
    def _common(
        model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
        gpu: Optional[List[str]] = typer.Option(None, "--gpu", help=GPU_HELP),
    ) -> None:
        state["model"], state["gpu"] = model, list(gpu or [])

    def _inputs(model, gpu):
        from gpuscope.errors import UserError
        from gpuscope.specs.models import load_model

        model = model or state.get("model")
        names = list(gpu or []) or state.get("gpu") or []
        if not model:
            raise UserError("--model is required (a preset name, a config.json or a directory holding one).")
        if not names:
            raise UserError("--gpu is required: give one or more GPUs to compare (`gpuscope hardware` lists them).")
        return load_model(model), gpus_from(names)

    def _run(model, gpu, w, econ, prices, measured, db, no_db, as_json, as_md) -> None:
        """One comparison: the workload on every GPU asked, with stored or given measurements beside it."""
        from gpuscope.explain.compare_hw import compare
        from gpuscope.report.compare_view import compare_markdown, render_compare
        from gpuscope.specs.prices import load_prices

        table = load_prices(prices)
        m, gpus = _inputs(model, gpu)
        meas, origin, store = gather_measured(m, w, measured, db, no_db)
        c = compare(m, gpus, w, prices=table, econ=econ, measured=meas)
        j = with_measured_sources(c, origin, store, measured)
        emit(j, compare_markdown(c) if as_md else None, as_json, as_md, lambda con: render_compare(c, con))

    @cmp_app.command("infer")
    def infer(
        model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
        gpu: Optional[List[str]] = typer.Option(None, "--gpu", help=GPU_HELP),
        batch: int = typer.Option(1, "--batch"),
        prompt: int = typer.Option(512, "--prompt"),
        gen: int = typer.Option(128, "--gen"),
        dtype: str = typer.Option("auto", "--dtype",
                                  help="auto (bf16, else int8, else int4) | bf16|fp16|fp32|fp8|int8|int4"),
        kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype"),
        engine: str = typer.Option("graph", "--engine", help="graph (default here: hardware-bound decode; "
                                     "measured rows: gs-compile) | hf-graph (HF generate, compiled) | eager"),
        max_gpus: int = typer.Option(8, "--max-gpus", help="Most cards (tensor parallel) to try for a fit."),
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
        as_json: bool = typer.Option(False, "--json", help="Print JSON (schema gpuscope.compare/1)."),
        as_md: bool = OPT_MARKDOWN,
    ) -> None:
        """Inference: fewest cards per dtype, TTFT, tokens/s, tokens/J, $ per 1M tokens, TCO."""
        from gpuscope.explain.compare_hw import InferWorkload

        w = InferWorkload(batch=batch, prompt=prompt, gen=gen, dtype=dtype, kv_dtype=kv_dtype, engine=engine,
                          max_gpus=max_gpus)
        _run(model, gpu, w, econ_from(electricity, pue, hours_per_year, years, utilisation, idle_fraction), prices,
             measured, db, no_db, as_json, as_md)

    @cmp_app.command("train")
    def train(
        model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
        gpu: Optional[List[str]] = typer.Option(None, "--gpu", help=GPU_HELP),
        micro_batch: int = typer.Option(1, "--micro-batch"),
        seq: int = typer.Option(2048, "--seq"),
        precision: str = typer.Option("amp-bf16", "--precision", help="amp-bf16|amp-fp16|bf16|fp32|fp8"),
        optimizer: str = typer.Option("adamw", "--optimizer"),
        recompute: str = typer.Option("none", "--recompute"),
        grad_accum: int = typer.Option(1, "--grad-accum"),
        offload: str = typer.Option("none", "--offload"),
        tokens: float = typer.Option(1e9, "--tokens", help="Token budget D for the 6ND cost (e.g. 1e9)."),
        num_gpus: int = typer.Option(1, "--num-gpus", help="Cards the budget runs on (data parallel)."),
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
        as_json: bool = typer.Option(False, "--json", help="Print JSON (schema gpuscope.compare/1)."),
        as_md: bool = OPT_MARKDOWN,
    ) -> None:
        """Training on one card: fit, tokens/s, MFU, energy, cost, and a 6ND token budget on N cards."""
        from gpuscope.explain.compare_hw import TrainWorkload

        w = TrainWorkload(micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer,
                          recompute=recompute, grad_accum=grad_accum, offload=offload, tokens=tokens,
                          num_gpus=num_gpus)
        _run(model, gpu, w, econ_from(electricity, pue, hours_per_year, years, utilisation, idle_fraction), prices,
             measured, db, no_db, as_json, as_md)

    app.add_typer(cmp_app)
