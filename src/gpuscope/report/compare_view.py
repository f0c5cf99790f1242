"""Render a hardware Comparison and an Advice: rich tables, Markdown, JSON. Computes nothing new.

JSON schemas: "gpuscope.compare/1" and "gpuscope.advise/1". Every metric comes with its source in ``sources``
("estimated", "measured", "mixed" or "datasheet"); text and Markdown mark measured numbers with "(m)" and mixed
ones with "(m~)".
"""

from __future__ import annotations

import json

COMPARE_SCHEMA = "gpuscope.compare/1"
ADVISE_SCHEMA = "gpuscope.advise/1"
_MARK = {"measured": " (m)", "mixed": " (m~)"}


def _usd(x):
    if x is None:
        return "-"
    return f"${x:,.0f}" if abs(x) >= 100 else f"${x:,.2f}" if abs(x) >= 0.1 else f"${x:.4f}"


def _num(fmt):
    return lambda x: "-" if x is None else fmt.format(x)


_INFER_ROWS = [
    ("memory per card (GiB)", None, None),
    ("peak allocated per card (GiB)", "peak_gib_per_gpu", _num("{:.2f}")),
    ("TTFT", "ttft_s", lambda x: "-" if x is None else f"{x * 1e3:,.0f} ms"),
    ("TPOT", "tpot_s", lambda x: "-" if x is None else f"{x * 1e3:,.1f} ms"),
    ("decode tok/s", "decode_tokens_per_s", _num("{:,.1f}")),
    ("end-to-end tok/s", "e2e_tokens_per_s", _num("{:,.1f}")),
    ("busy power (all cards)", "power_w", _num("{:,.0f} W")),
    ("tokens per joule", "tokens_per_j", _num("{:.3g}")),
    ("peak TFLOPS per W (16-bit)", "peak_tflops_per_w", _num("{:.3f}")),
    ("price (all cards)", "price_usd", _usd),
    ("$ / 1M tokens, own", "usd_per_m_tokens_owned", _usd),
    ("$ / 1M tokens, cloud", "usd_per_m_tokens_cloud", _usd),
    ("energy $ / 1M tokens", "energy_usd_per_m_tokens", _usd),
    ("TCO (hardware + energy)", "tco_usd", _usd),
    ("  of which energy", "tco_energy_usd", _usd),
]
_TRAIN_ROWS = [
    ("memory per card (GiB)", None, None),
    ("peak allocated per card (GiB)", "peak_gib_per_gpu", _num("{:.2f}")),
    ("tokens/s per card", "tokens_per_s_per_gpu", _num("{:,.0f}")),
    ("MFU", "mfu", lambda x: "-" if x is None else f"{x:.1%}"),
    ("busy power", "power_w", _num("{:,.0f} W")),
    ("tokens per joule", "tokens_per_j", _num("{:.3g}")),
    ("peak TFLOPS per W", "peak_tflops_per_w", _num("{:.3f}")),
    ("price", "price_usd", _usd),
    ("$ / 1M tokens, own", "usd_per_m_tokens_owned", _usd),
    ("$ / 1M tokens, cloud", "usd_per_m_tokens_cloud", _usd),
    ("TCO (hardware + energy)", "tco_usd", _usd),
    ("  of which energy", "tco_energy_usd", _usd),
    ("budget: GPU-hours", "budget_gpu_hours", _num("{:,.1f}")),
    ("budget: days on N cards", "budget_wall_days", _num("{:,.2f}")),
    ("budget: cost, cloud", "budget_usd_cloud", _usd),
    ("budget: cost, own", "budget_usd_owned", _usd),
]


def _fit_text(row) -> str:
    c = row.config
    if not row.fits:
        return "no"
    if "dtype" in c:
        return f"{c['dtype']} on {c['num_gpus']}"
    return f"{c['precision']} on 1"


def _matrix_text(row) -> str:
    parts = []
    for d, v in row.fit_matrix.items():
        parts.append(f"{d}:{v}" if isinstance(v, int) else f"{d}:-" if v is None else f"{d}:n/a")
    return " ".join(parts)


def comparison_grid(cmp) -> tuple[list[str], list[list[str]]]:
    """Header (metric, one column per hardware) and rows of display strings."""
    header = ["", *[r.hardware for r in cmp.rows]]
    grid = [["fits (dtype on N cards)", *[_fit_text(r) for r in cmp.rows]]]
    if cmp.kind == "infer":
        grid.append(["fewest cards per dtype", *[_matrix_text(r) for r in cmp.rows]])
    spec = _INFER_ROWS if cmp.kind == "infer" else _TRAIN_ROWS
    for label, key, fmt in spec:
        if key is None:
            grid.append([label, *[
                "-" if "required_gib_per_gpu" not in r.metrics else
                f"{r.metrics['required_gib_per_gpu']:.1f} / {r.metrics['device_gib']:.1f}" for r in cmp.rows]])
            continue
        if all(r.metrics.get(key) is None for r in cmp.rows):
            continue
        grid.append([label, *[fmt(r.metrics.get(key)) + (_MARK.get(r.sources.get(key), "")
                                                         if r.metrics.get(key) is not None else "")
                              for r in cmp.rows]])
    return header, grid


def compare_to_json(cmp) -> dict:
    return {"schema": COMPARE_SCHEMA, "kind": cmp.kind, "model": cmp.model, "workload": cmp.workload,
            "economics": cmp.economics, "assumptions": cmp.assumptions, "rows": [r.to_dict() for r in cmp.rows]}


def advise_to_json(adv) -> dict:
    return {"schema": ADVISE_SCHEMA, "kind": adv.kind, "model": adv.model, "workload": adv.workload,
            "constraints": adv.constraints, "economics": adv.economics, "objective_metric": adv.objective_metric,
            "recommendation": adv.recommendation, "what_would_change": adv.changes,
            "ranked": [c.to_dict() for c in adv.ranked], "ruled_out": [c.to_dict() for c in adv.ruled_out],
            "assumptions": adv.assumptions}


def compare_with_sources(cmp, origin: dict, store, measured: str | None) -> dict:
    """The comparison's JSON with where each row's measured numbers came from (``measured_from`` per row,
    ``measured_sources`` for the table); each row that used them gets a note saying so (shown by the views)."""
    from gpuscope.explain.measured_source import note_for

    for r in cmp.rows:
        n = note_for(r.hardware, origin.get(r.hardware) or {}, store)
        if n and any(r.sources.get(m) == "measured" for m in origin.get(r.hardware) or {}):
            r.notes.append(n)
    j = compare_to_json(cmp)
    for rd in j["rows"]:
        rd["measured_from"] = {m: o for m, o in (origin.get(rd["hardware"]) or {}).items()
                               if rd["sources"].get(m) == "measured"}
    j["measured_sources"] = {
        "db": store.db if store is not None else None,
        "db_rows": {k: v for k, v in (store.origin if store is not None else {}).items()
                    if any(rd["hardware"] == k and rd["measured_from"] for rd in j["rows"])},
        "file": measured,
    }
    return j


def advise_with_sources(adv, origin: dict, store, measured: str | None) -> dict:
    """The advice's JSON with the measured numbers' sources of the GPUs it ranked or ruled out."""
    j = advise_to_json(adv)
    used = {k: v for k, v in origin.items() if any(c.row.hardware == k for c in [*adv.ranked, *adv.ruled_out])}
    j["measured_sources"] = {"db": store.db if store is not None else None, "file": measured,
                             "db_rows": {k: v for k, v in (store.origin if store is not None else {}).items()
                                         if k in used},
                             "metrics": used}
    return j


def dumps(d: dict) -> str:
    return json.dumps(d, indent=2, default=float)


def _notes(cmp) -> list[str]:
    out = []
    for r in cmp.rows:
        for n in r.notes:
            out.append(f"{r.hardware}: {n}")
        for which in ("purchase_usd", "cloud_usd_per_hour"):
            p = (r.prices or {}).get(which)
            if p:
                out.append(f"{r.hardware} {which.replace('_usd', '').replace('_', ' ')}: {_usd(p['value'])}"
                           f"{'/h' if 'hour' in which else ''} ({p['source']}, {p['date']})")
    return out


def _md_table(header, grid) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in grid]
    return "\n".join(lines)


def compare_markdown(cmp, title: str | None = None) -> str:
    header, grid = comparison_grid(cmp)
    wl = ", ".join(f"{k} {v}" for k, v in cmp.workload.items() if v is not None)
    out = [f"### {title or f'{cmp.kind}: {cmp.model}'}", "", f"Workload: {wl}.", "", _md_table(header, grid), ""]
    out += [f"- {a}" for a in cmp.assumptions]
    out += [f"- {n}" for n in _notes(cmp)]
    out.append("- (m) measured, (m~) derived from measured and estimated numbers; all others estimated.")
    return "\n".join(out) + "\n"


def render_compare(cmp, console) -> None:
    from rich.table import Table

    header, grid = comparison_grid(cmp)
    t = Table(title=f"{cmp.kind}: {cmp.model}", header_style="bold")
    t.add_column(header[0])
    for h in header[1:]:
        t.add_column(h, justify="right")
    for row in grid:
        t.add_row(*row)
    console.print(t)
    for a in cmp.assumptions:
        console.print(f"[dim]- {a}[/]")
    for n in _notes(cmp):
        console.print(f"[dim]- {n}[/]")
    console.print("[dim]- (m) measured, (m~) derived from measured and estimated; all others estimated.[/]")


def _advise_lines(adv) -> list[tuple[str, str]]:
    """(style, text) lines shared by text and Markdown."""
    lines = [("bold", f"Recommendation: {adv.recommendation}")]
    lines.append(("h", "Ranked"))
    for c in adv.ranked:
        cfg = c.row.config
        how = f"{cfg.get('dtype') or cfg.get('precision')} x{cfg.get('num_gpus')}"
        score = "no value" if c.score is None else _fmt(adv.objective_metric, c.score)
        path = "; ".join(s.detail for s in c.path)
        lines.append(("", f"{c.rank}. {c.row.hardware} ({how}): {score} - {path}"))
    lines.append(("h", "Ruled out"))
    for c in adv.ruled_out:
        lines.append(("dim", f"{c.row.hardware}: " + "; ".join(f"{s.check}: {s.detail}" for s in c.failed)))
    lines.append(("h", "What would change the decision"))
    lines += [("", x) for x in adv.changes]
    lines += [("dim", f"assumption: {a}") for a in adv.assumptions]
    return lines


def _fmt(metric: str, v: float) -> str:
    if metric.startswith("usd"):
        return f"{_usd(v)} per 1M tokens"
    if metric == "tokens_per_j":
        return f"{v:.3g} tokens/J"
    return f"{v:,.1f} tok/s"


def advise_markdown(adv) -> str:
    out = []
    for style, text in _advise_lines(adv):
        if style == "h":
            out += ["", f"#### {text}", ""]
        elif style == "bold":
            out.append(f"**{text}**")
        else:
            out.append(f"- {text}")
    return "\n".join(out) + "\n"


def render_advise(adv, console) -> None:
    from rich.markup import escape

    for style, text in _advise_lines(adv):
        if style == "h":
            console.print(f"\n[bold underline]{escape(text)}[/]")
        elif style:
            console.print(f"[{style}]{escape(text)}[/]")
        else:
            console.print(escape(text))
