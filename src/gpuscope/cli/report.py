"""`gpuscope report [--db X | --records FILE ...] [--run ID] [--kind K] --out report.html`: one self-contained HTML
page of a results database (report/html/store_report.py draws it; --records loads results files first:
report/html/records.py)."""

from __future__ import annotations

from typing import List, Optional

import typer

from gpuscope.cli import options as o

RECORDS_HELP = ("Results files (JSON lines of measurement records, e.g. research/results/<folder>/measurements.jsonl)"
                " to draw instead of a database; repeat for several.")
GPU_HELP = "Plan every stored workload on this hardware (default: the catalog entry of the device that ran it)."
KIND_HELP = ("Only measurements of this kind: micro | infer | train | train-dist | collective | compression | host | serve | "
             "diffusion.")


def register(app: typer.Typer) -> None:
    app.command("report")(report)


def _db_path(db: str | None):
    from pathlib import Path

    from gpuscope.errors import UserError
    from gpuscope.store.db import default_db_path

    p = Path(db).expanduser() if db else default_db_path()
    if not p.exists():
        raise UserError(f"results database '{p}' does not exist yet; run `gpuscope bench ...` first or pass --db.")
    return p


def report(
    out: str = typer.Option(..., "--out", help="The HTML file to write."),
    db: str = o.db(),
    records: Optional[List[str]] = typer.Option(None, "--records", help=RECORDS_HELP),
    run: str = typer.Option(None, "--run", help="Only this run (`gpuscope results list --json` shows run ids)."),
    kind: str = typer.Option(None, "--kind", help=KIND_HELP),
    gpu: str = o.gpu(required=False, help=GPU_HELP),
    calibrated: bool = o.calibrated(),
    title: str = typer.Option("gpuscope report", "--title", help="The page's title."),
) -> None:
    """Write an HTML report (plots, provenance) of stored measurements: predicted vs measured with the 5%/15%
    bands, each device's roofline, multi-GPU scaling, collectives, and each run's provenance."""
    import tempfile
    from pathlib import Path

    from gpuscope.errors import UserError
    from gpuscope.report.html.page import plotly_js
    from gpuscope.report.html.store_report import write_store_report

    kind = o.stored_kind(kind)
    if not calibrated:
        o.known_gpu(gpu)
    if records and db:
        raise UserError("give --db or --records, not both.")
    plotly_js()
    if not records:
        write_store_report(str(_db_path(db)), out, run, kind, gpu, calibrated, title)
    else:
        from gpuscope.report.html.records import records_db

        with tempfile.TemporaryDirectory(prefix="gpuscope-report-") as tmp:
            path = records_db(list(records), Path(tmp) / "records.sqlite")
            write_store_report(str(path), out, run, kind, gpu, calibrated, title,
                               source=f"{len(records)} results file(s) (one run each)")
    typer.echo(f"wrote {out} ({Path(out).stat().st_size / 1e6:.1f} MB)")

