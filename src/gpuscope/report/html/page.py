"""One self-contained HTML page: sections of figures (plotly.js inlined once, so the file opens with no network),
tables and notes, all text escaped. ``render_page`` writes the whole file; ``render_sections`` the body alone,
which the local web page (gpuscope ui) inserts and draws with the same ``gsDraw``.

plotly (the Python package) is used only for the plotly.js bundle it ships; it is imported here, when a page is
written, never by `gpuscope plan` itself.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from gpuscope.errors import UserError

NEEDS_PLOTLY = "HTML reports need plotly (pip install 'gpuscope[report]'): it ships the plotly.js the page inlines."
NO_ICON = '<link rel="icon" href="data:,">'  # the browser asks for no favicon (a 404 is a console error)
CONFIG = {"responsive": True, "displaylogo": False}
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px;
color:#222}
h1{font-size:1.6em;margin-top:1em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:2em}
.gs-note{color:#555;font-size:.92em;margin:.3em 0}.gs-chart{width:100%;min-height:420px}
table.gs-table{border-collapse:collapse;font-size:.85em;margin:.6em 0;width:100%}
table.gs-table th,table.gs-table td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
table.gs-table th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.gs-scroll{overflow-x:auto}summary{cursor:pointer;color:#235;margin:.4em 0}
.gs-error{color:#a00;font-weight:600}pre.gs-json{background:#f7f7f7;padding:8px;overflow:auto;max-height:360px}
"""
# draws every chart under ``root`` once: the page calls it on load, the ui after inserting a result
BOOT = """
function gsDraw(root){root.querySelectorAll('.gs-chart').forEach(function(el){if(el.dataset.drawn)return;
var f=JSON.parse(el.dataset.figure);Plotly.newPlot(el,f.data,f.layout,%s);el.dataset.drawn='1';});}
document.addEventListener('DOMContentLoaded',function(){gsDraw(document);});
""" % json.dumps(CONFIG)


@dataclass
class Section:
    """A heading, its figures (plotly dicts; None entries are left out), notes (sentences) and ready HTML
    (tables made by ``table``)."""

    title: str
    figures: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    html: str = ""
    id: str = ""


def esc(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def table(columns: list[str], rows: list[list], numeric: tuple[int, ...] = (), fold: str | None = None) -> str:
    """An HTML table of already formatted cells (escaped here); ``numeric``: column indexes aligned right;
    ``fold``: a summary line the table is folded under (a long table, opened on a click)."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td class=\"num\">{esc(c)}</td>" if i in numeric else f"<td>{esc(c)}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    out = (f'<div class="gs-scroll"><table class="gs-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
           "</table></div>")
    return f"<details><summary>{esc(fold)}</summary>{out}</details>" if fold else out


def finite(x):
    """``x`` with every NaN or infinity (a figure of a division by a zero time) as None, which plotly leaves out:
    JSON has no NaN, and the browser's JSON.parse refuses it."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def chart(fig: dict) -> str:
    """A chart's placeholder: the figure's JSON in an attribute, drawn by gsDraw."""
    return f'<div class="gs-chart" data-figure="{esc(json.dumps(finite(fig), default=float, allow_nan=False))}"></div>'


def render_sections(sections: list[Section]) -> str:
    out = []
    for s in sections:
        figs = [f for f in s.figures if f]
        if not (figs or s.notes or s.html):
            continue
        sid = f' id="{esc(s.id)}"' if s.id else ""
        out.append(f'<section class="gs-section"{sid}><h2>{esc(s.title)}</h2>')
        out += [f'<p class="gs-note">{esc(n)}</p>' for n in s.notes]
        out += [chart(f) for f in figs]
        out.append(s.html + "</section>")
    return "\n".join(out)


def plotly_js() -> str:
    """The plotly.js bundle plotly's Python package ships (minified), safe to inline in a <script>."""
    try:
        from importlib.resources import files

        js = (files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    except (ImportError, FileNotFoundError, ModuleNotFoundError):
        raise UserError(NEEDS_PLOTLY) from None
    return js.replace("</script", "<\\/script")


def render_page(title: str, sections: list[Section], intro: list[str] | None = None) -> str:
    """The whole page: styles, plotly.js and the drawing script inlined, then the sections."""
    intro_html = "".join(f'<p class="gs-note">{esc(t)}</p>' for t in intro or [])
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{NO_ICON}<title>{esc(title)}</title>"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><style>{STYLE}</style>"
            f"<script>{plotly_js()}</script><script>{BOOT}</script></head><body><h1>{esc(title)}</h1>{intro_html}"
            f"{render_sections(sections)}</body></html>\n")


def write_page(path: str, title: str, sections: list[Section], intro: list[str] | None = None) -> Path:
    """Write the page to ``path`` (one sentence if it cannot be written); the path."""
    p = Path(path).expanduser()
    text = render_page(title, sections, intro)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--html/--out '{path}' cannot be written ({exc.strerror}).") from None
    return p
