"""`gpuscope report`: the page of a results database (or one run, or one kind of it): predicted vs measured with
the target bands, each device's roofline, multi-GPU scaling, collectives, the runs and each measurement's
provenance. `bench ... --html` writes the same page for the run it just made."""

from __future__ import annotations

import json

from gpuscope.pipeline.accuracy import TARGET, by_metric
from gpuscope.report.html import measured as m
from gpuscope.report.html import store_data as d
from gpuscope.report.html.page import Section, table

PROVENANCE_KEYS = (("torch", "torch"), ("cuda", "cuda"), ("driver", None), ("nccl", "nccl"),
                   ("transformers", "transformers"), ("python", "python"))


def _driver(prov: dict):
    return (prov.get("nvml") or {}).get("driver_version") if isinstance(prov.get("nvml"), dict) else None


def provenance_section(rows: list[dict], runs: list[dict]) -> Section:
    """The runs (command, arguments, host) and, per measurement, the versions, device, git sha and benchmark
    version it was recorded with."""
    by_run = []
    for r in runs:
        mine = [x for x in rows if x["run_id"] == r["run_id"]]
        when = sorted((x.get("provenance") or {}).get("timestamp_utc") or x["created_utc"] for x in mine)
        by_run.append([r["run_id"], f"{when[0]} .. {when[-1]}" if when else r["started_utc"], r["command"],
                       " ".join(r["argv"])[:160], r["hostname"], len(mine)])
    cells = []
    for r in rows:
        p = r.get("provenance") or {}
        versions = [(_driver(p) if key is None else p.get(key)) for _, key in PROVENANCE_KEYS]
        sha = (r.get("git_sha") or p.get("git_sha") or "")[:10] + (" (dirty)" if p.get("git_dirty") else "")
        cells.append([r["id"], r["run_id"], r["name"], r["status"], r["device_name"] or "-", r["hostname"],
                      p.get("timestamp_utc") or r["created_utc"], *[v or "-" for v in versions], sha or "-",
                      r.get("benchmark_version") or "-"])
    cols = ["id", "run", "measurement", "status", "device", "host", "measured (UTC)",
            *[k for k, _ in PROVENANCE_KEYS], "git sha", "benchmark"]
    html = (table(["run", "measured (UTC, first .. last)", "command", "arguments", "host", "measurements"], by_run,
                  numeric=(5,))
            + table(cols, cells, numeric=(0,), fold=f"each measurement's provenance ({len(cells)} rows)"))
    return Section("Provenance", id="provenance", html=html,
                   notes=["Each run's command, and each measurement's device, software versions, git commit and "
                          "benchmark version as recorded when it ran (`gpuscope results show ID` has them all)."])


def _accuracy_table(rows: list[dict]) -> str:
    cells = [[r["id"], r["case"], r["metric"], f"{r['estimated']:.4g}", f"{r['measured']:.4g}",
              "-" if r["error"] is None else f"{r['error']:+.1%}", r["hardware"]] for r in rows]
    return table(["id", "case", "metric", "estimated", "measured", "error", "planned on"], cells, numeric=(0, 3, 4, 5),
                 fold=f"every row ({len(cells)}: bytes and seconds)")


def accuracy_section(rows: list[dict], gpu: str | None, calibrated: bool) -> Section:
    acc, skipped = d.accuracy_rows(rows, gpu, calibrated)
    summary = by_metric(acc)
    notes = [f"Target: {TARGET} (pipeline/accuracy.py). Each stored workload planned again on "
             + (f"{gpu}{' (calibrated)' if calibrated else ''}" if gpu else "the catalog entry of the device that "
                "ran it") + "; error = (estimated - measured) / measured."]
    notes += [f"{k}: {v['within']} of {v['of']} within {v['band']:.0%}" for k, v in summary.items()]
    whys = sorted({s["why"] for s in skipped})
    notes += [f"{sum(1 for s in skipped if s['why'] == w)} measurement(s) without an estimate: {w}" for w in whys]
    return Section("Predicted vs measured", [m.accuracy_figure(acc), m.error_figure(acc)], notes,
                   _accuracy_table(acc) if acc else "",
                   id="accuracy")


def roofline_sections(rows: list[dict], gpu: str | None) -> list[Section]:
    ceil, mm, wl = d.ceilings(rows), d.matmul_points(rows), d.workload_points(rows, gpu)
    out = []
    for dev in sorted(set(ceil) | set(wl)):
        c = ceil.get(dev, {})
        fig = m.roofline_figure(dev, c, mm.get(dev, []) + wl.get(dev, []))
        notes = ["Ceilings: the best `bench micro` matmul TFLOP/s of each dtype and the best device-memory GB/s "
                 "stored for this device. Points: each matmul shape measured, and each LLM phase at the planner's "
                 "FLOPs over the measured time (x: the planner's FLOPs over its bytes)."]
        if not c.get("matmul_tflops"):
            notes.append("No `bench micro` rows for this device: the points have no measured ceilings.")
        out.append(Section(f"Roofline: {dev}", [fig], notes, id=f"roofline-{len(out)}"))
    return out


def scaling_sections(rows: list[dict]) -> list[Section]:
    dist, coll = d.dist_runs(rows), d.collective_points(rows)
    out = []
    if dist:
        out.append(Section("Multi-GPU scaling", [m.scaling_figure(dist)], id="scaling",
                           notes=["Measured tokens/s of each distributed training step (`bench train-dist`) and its "
                                  "one-GPU baseline; dotted: linear scaling from the baseline."]))
    if coll:
        out.append(Section("Collectives", [m.collectives_figure(coll)], id="collectives",
                           notes=["`bench collectives`: bus bandwidth (nccl-tests' convention) measured, and the "
                                  "planner's for the same call."]))
    return out


def store_sections(store, run: str | None = None, kind: str | None = None, gpu: str | None = None,
                   calibrated: bool = False, source: str | None = None) -> tuple[list[Section], list[str]]:
    """(sections, intro lines) of the page of ``store`` (one run and/or kind of it; ``source``: what the intro
    names as where the measurements come from, default the database's path)."""
    rows = d.select(store, run, kind)
    run_ids = {r["run_id"] for r in rows}
    runs = [dict(r, argv=json.loads(r["argv_json"])) for r in
            store.conn.execute("SELECT * FROM runs ORDER BY started_utc") if r["run_id"] in run_ids]
    kinds = sorted({r["kind"] for r in rows})
    intro = [f"{len(rows)} measurements ({', '.join(kinds)}) of {len(run_ids)} run(s) from {source or store.path}"
             + (f", run {run}" if run else "") + (f", kind {kind}" if kind else "") + "."]
    sections = [accuracy_section(rows, gpu, calibrated), *roofline_sections(rows, gpu), *scaling_sections(rows),
                provenance_section(rows, runs)]
    return sections, intro


def write_store_report(db: str | None, out: str, run: str | None = None, kind: str | None = None,
                       gpu: str | None = None, calibrated: bool = False, title: str = "gpuscope report",
                       source: str | None = None) -> None:
    """Write the page of the results database ``db`` to ``out``."""
    from gpuscope.report.html.page import plotly_js, write_page
    from gpuscope.store.db import Store

    plotly_js()  # says plotly is missing before any work
    with Store.open(db) as st:
        sections, intro = store_sections(st, run, kind, gpu, calibrated, source)
    write_page(out, title, sections, intro)
