"""`gpuscope results list|show|export`: read the results database (no torch)."""

from __future__ import annotations

import json

import typer

DB_HELP = "Results database (default: $GPUSCOPE_DB, else $XDG_DATA_HOME/gpuscope/results.sqlite)."


def _store(db: str | None):
    from gpuscope.errors import UserError
    from gpuscope.store.db import Store, default_db_path

    from pathlib import Path

    p = Path(db).expanduser() if db else default_db_path()
    if not p.exists():
        raise UserError(f"results database '{p}' does not exist yet; run `gpuscope bench ...` first or pass --db.")
    return Store.open(p)


def register(app: typer.Typer) -> None:
    res = typer.Typer(name="results", help="Stored measurements: list, show one, export CSV or JSON, compare with "
                      "the planner.",
                      no_args_is_help=True)

    @res.command("list")
    def list_cmd(
        kind: str = typer.Option(None, "--kind", help="micro | infer | train | host (a calibration's host fits)."),
        limit: int = typer.Option(50, "--limit", help="Newest N (0 = all)."),
        db: str = typer.Option(None, "--db", help=DB_HELP),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """The newest measurements, one line each."""
        from gpuscope.cli.bench_run import _console
        from gpuscope.cli.bench_report import headline

        with _store(db) as st:
            rows = st.list(kind, limit or None)
        if as_json:
            typer.echo(json.dumps({"schema": "gpuscope.results/1", "measurements": rows}, indent=1))
            return
        from rich.table import Table

        t = Table()
        for c in ("id", "created (UTC)", "name", "status", "device", "result"):
            t.add_column(c)
        for r in rows:
            t.add_row(str(r["id"]), r["created_utc"], r["name"], r["status"], r["device_name"] or "-",
                      headline(r["result"]) if r["status"] == "ok" else (r["result"].get("reason") or
                                                                         r["result"].get("error") or "")[:60])
        _console().print(t)

    @res.command("show")
    def show_cmd(
        mid: int = typer.Argument(..., help="Measurement id (see `gpuscope results list`)."),
        db: str = typer.Option(None, "--db", help=DB_HELP),
    ) -> None:
        """One measurement as JSON: configuration, result and provenance."""
        with _store(db) as st:
            typer.echo(json.dumps(st.get(mid), indent=1))

    @res.command("export")
    def export_cmd(
        csv: bool = typer.Option(False, "--csv", help="CSV: one line per measurement, scalars flattened."),
        as_json: bool = typer.Option(False, "--json", help="JSON: every measurement in full."),
        kind: str = typer.Option(None, "--kind", help="micro | infer | train | host (a calibration's host fits)."),
        out: str = typer.Option(None, "--out", help="Write to this file instead of stdout."),
        db: str = typer.Option(None, "--db", help=DB_HELP),
    ) -> None:
        """Every measurement as CSV or JSON."""
        from gpuscope.errors import UserError

        if csv == as_json:
            raise UserError("results export needs exactly one of --csv or --json.")
        with _store(db) as st:
            text = st.export_csv(kind) if csv else st.export_json(kind) + "\n"
        if out:
            from pathlib import Path

            try:
                Path(out).write_text(text)
            except OSError as exc:
                raise UserError(f"--out '{out}' cannot be written ({exc.strerror}).") from None
        else:
            typer.echo(text, nl=False)

    @res.command("compare")
    def compare_cmd(
        gpu: str = typer.Option(None, "--gpu", help="Hardware to plan for (default: each row's own device)."),
        calibrated: bool = typer.Option(False, "--calibrated", help="Use `hardware calibrate --save` ceilings."),
        as_json: bool = typer.Option(False, "--json"),
        db: str = typer.Option(None, "--db", help=DB_HELP),
    ) -> None:
        """The planner beside every stored inference and training measurement: peak memory and time, with the
        error of each (closing the loop between `gpuscope plan` and `gpuscope bench`)."""
        from gpuscope.errors import UserError
        from gpuscope.explain.compare import compare_record
        from gpuscope.specs.hardware import hardware_for_device as hardware_for

        with _store(db) as st:
            rows = [r for r in st.list() if r["kind"] in ("infer", "train") and r.get("status") == "ok"]
            full = [st.get(r["id"]) for r in rows]
        out, skipped = [], []
        for rec in full:
            try:
                if gpu:
                    from gpuscope.specs.calibration import load_calibrated
                    from gpuscope.specs.hardware import load_hardware

                    hw = load_calibrated(gpu) if calibrated else load_hardware(gpu)
                else:
                    hw = hardware_for(rec.get("device_name") or "")
                for row in compare_record({"case": rec["config"], "result": rec["result"],
                                           "case_id": rec["name"]}, hw):
                    out.append({"id": rec["id"], "case": row.case, "metric": row.metric,
                                "estimated": row.estimated, "measured": row.measured, "error": row.error})
            except UserError as exc:
                skipped.append({"id": rec["id"], "why": str(exc)})
        from gpuscope.explain.compare import accuracy_lines, accuracy_summary

        summary = accuracy_summary(out)
        if as_json:
            typer.echo(json.dumps({"schema": "gpuscope.results-compare/1", "rows": out, "skipped": skipped,
                                   "summary": summary}, indent=1))
            return
        if not out and not skipped:
            typer.echo("no inference or training measurements in the database yet; run `gpuscope bench infer|train`.")
            return
        from rich.console import Console
        from rich.table import Table

        t = Table(title="planner vs measured", header_style="bold")
        for c in ("id", "case", "metric", "estimated", "measured", "error"):
            t.add_column(c, justify="right" if c in ("id", "estimated", "measured", "error") else "left")
        for r in out:
            scale, unit = (2**30, " GiB") if r["metric"].endswith("bytes") else (1e-3, " ms")
            t.add_row(str(r["id"]), r["case"], r["metric"], f"{r['estimated'] / scale:,.2f}{unit}",
                      f"{r['measured'] / scale:,.2f}{unit}", f"{r['error']:+.1%}")
        console = Console()
        (console if console.is_terminal else Console(width=160)).print(t)
        for line in accuracy_lines(summary):
            typer.echo(line)
        for sk in skipped:
            typer.echo(f"skipped measurement {sk['id']}: {sk['why']}", err=True)

    app.add_typer(res)
