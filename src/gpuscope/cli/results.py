"""`gpuscope results list|show|export|compare`: read the results database (no torch). `results compare` puts the
planner beside every stored workload with the same estimate and the same accuracy summary as `gpuscope bench`
(pipeline/estimate.py, pipeline/accuracy.py)."""

from __future__ import annotations

import json

import typer

from gpuscope.cli import options

results = typer.Typer(name="results", help="Stored measurements: list, show one, export CSV or JSON, compare with "
                      "the planner.", no_args_is_help=True)
KIND_HELP = ("micro | infer | train | train-dist | collective | compression | host (a calibration's host fits) | serve | "
             "diffusion.")
COMPARE_SCHEMA = "gpuscope.results-compare/1"


def _store(db: str | None):
    from pathlib import Path

    from gpuscope.errors import UserError
    from gpuscope.store.db import Store, default_db_path

    p = Path(db).expanduser() if db else default_db_path()
    if not p.exists():
        raise UserError(f"results database '{p}' does not exist yet; run `gpuscope bench ...` first or pass --db.")
    return Store.open(p)


@results.command("list")
def list_cmd(
    kind: str = typer.Option(None, "--kind", help=KIND_HELP),
    limit: int = typer.Option(50, "--limit", help="Newest N (0 = all)."),
    db: str = options.db(), as_json: bool = options.json_out(),
) -> None:
    """The newest measurements, one line each."""
    from rich.table import Table

    from gpuscope.workloads import headline

    options.non_negative(limit=limit)
    kind = options.stored_kind(kind)
    with _store(db) as st:
        rows = st.list(kind, limit or None)
    if as_json:
        typer.echo(json.dumps({"schema": "gpuscope.results/1", "measurements": rows}, indent=1))
        return
    t = Table()
    for c in ("id", "created (UTC)", "name", "status", "device", "result"):
        t.add_column(c)
    for r in rows:
        t.add_row(str(r["id"]), r["created_utc"], r["name"], r["status"], r["device_name"] or "-",
                  headline(r["result"]) if r["status"] == "ok" else (r["result"].get("reason") or
                                                                     r["result"].get("error") or "")[:60])
    options.console().print(t)


@results.command("show")
def show_cmd(mid: int = typer.Argument(..., help="Measurement id (see `gpuscope results list`)."),
             db: str = options.db()) -> None:
    """One measurement as JSON: configuration, result and provenance."""
    with _store(db) as st:
        typer.echo(json.dumps(st.get(mid), indent=1))


@results.command("export")
def export_cmd(
    csv: bool = typer.Option(False, "--csv", help="CSV: one line per measurement, scalars flattened."),
    as_json: bool = typer.Option(False, "--json", help="JSON: every measurement in full."),
    kind: str = typer.Option(None, "--kind", help=KIND_HELP),
    out: str = typer.Option(None, "--out", help="Write to this file instead of stdout."),
    db: str = options.db(),
) -> None:
    """Every measurement as CSV or JSON."""
    from gpuscope.errors import UserError

    if csv == as_json:
        raise UserError("results export needs exactly one of --csv or --json.")
    kind = options.stored_kind(kind)
    with _store(db) as st:
        _check_out_is_not_the_store(out, st.path)
        text = st.export_csv(kind) if csv else st.export_json(kind) + "\n"
    if not out:
        typer.echo(text, nl=False)
        return
    from pathlib import Path

    try:
        Path(out).write_text(text)
    except OSError as exc:
        raise UserError(f"--out '{out}' cannot be written ({exc.strerror}).") from None


def _check_out_is_not_the_store(out: str | None, db_path) -> None:
    """--out must not name the database itself (or its WAL journal files): the export would overwrite it."""
    from pathlib import Path

    from gpuscope.errors import UserError

    if not out:
        return
    o, d = Path(out).expanduser().resolve(), Path(db_path).expanduser().resolve()
    if o in (d, d.with_name(d.name + "-wal"), d.with_name(d.name + "-shm")):
        raise UserError(f"--out '{out}' is the results database itself; choose another file (nothing was "
                        "written).")


def compare_rows(stored: list[dict], gpu: str | None, calibrated: bool,
                 sources: dict | None = None) -> tuple[list[dict], list[dict]]:
    """(rows, skipped) of `results compare`: each stored ok workload's estimate rows (bench's, without the derived
    MFU and scaling-efficiency rows), or why it has none; ``sources`` collects the hardware a CPU row is planned
    on (its source line -> the ids planned on it: pipeline/host_ceilings.py)."""
    from gpuscope.pipeline.estimate import estimate_beside, stored_record

    out, skipped = [], []
    for rec in stored:
        est = estimate_beside(stored_record(rec), gpu, derived=False, calibrated=calibrated)
        if "unavailable" in est:
            skipped.append({"id": rec["id"], "why": est["unavailable"]})
            continue
        if sources is not None and est.get("hardware_source"):
            sources.setdefault(est["hardware_source"], []).append(rec["id"])
        case = rec["name"].split("#")[0]
        out += [{"id": rec["id"], "case": case, "metric": r["metric"], "estimated": r["estimated"],
                 "measured": r["measured"], "error": r["error"]} for r in est["rows"]]
    return out, skipped


def _compare_table(rows: list[dict]):
    from rich.table import Table

    t = Table(title="planner vs measured", header_style="bold")
    for c in ("id", "case", "metric", "estimated", "measured", "error"):
        t.add_column(c, justify="right" if c in ("id", "estimated", "measured", "error") else "left")
    for r in rows:
        scale, unit = (2**30, " GiB") if r["metric"].endswith("bytes") else (1e-3, " ms")
        t.add_row(str(r["id"]), r["case"], r["metric"], _scaled(r["estimated"], scale, unit),
                  _scaled(r["measured"], scale, unit), "-" if r["error"] is None else f"{r['error']:+.1%}")
    return t


def _scaled(value, scale: float, unit: str) -> str:
    """A figure of the table, or "-" where there is none (a CPU run measures no device memory)."""
    return "-" if value is None else f"{value / scale:,.2f}{unit}"


@results.command("compare")
def compare_cmd(
    gpu: str = options.gpu(required=False, help="Hardware to plan for (default: each row's own device)."),
    calibrated: bool = options.calibrated(help="Use `hardware calibrate --save` ceilings."),
    as_json: bool = options.json_out(), db: str = options.db(),
) -> None:
    """The planner beside every stored workload measurement (inference, training, distributed training): peak
    memory and time, with the error of each (closing the loop between `gpuscope plan` and `gpuscope bench`)."""
    from gpuscope.pipeline.accuracy import by_metric
    from gpuscope.report.bench_view import accuracy_lines
    from gpuscope.workloads import estimated_kinds

    if not calibrated:
        options.known_gpu(gpu)
    kinds = estimated_kinds()
    with _store(db) as st:
        stored = [st.get(r["id"]) for r in st.list() if r["kind"] in kinds and r.get("status") == "ok"]
    sources: dict = {}
    rows, skipped = compare_rows(stored, gpu, calibrated, sources)
    summary = by_metric(rows)
    if as_json:
        doc = {"schema": COMPARE_SCHEMA, "rows": rows, "skipped": skipped, "summary": summary}
        typer.echo(json.dumps({**doc, "hardware_sources": sources} if sources else doc, indent=1))
        return
    if not rows and not skipped:
        typer.echo("no workload measurements in the database yet; run `gpuscope bench infer|train`.")
        return
    options.console(160).print(_compare_table(rows))
    for line in accuracy_lines(summary):
        typer.echo(line)
    for src, ids in sources.items():
        typer.echo(f"CPU rows ({', '.join(map(str, ids))}): estimate on {src}")
    for sk in skipped:
        typer.echo(f"skipped measurement {sk['id']}: {sk['why']}", err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(results)
