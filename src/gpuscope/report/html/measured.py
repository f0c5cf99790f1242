"""Plotly figures of stored measurements: predicted vs measured with the target bands, the roofline of measured
ceilings with measured workloads as points, multi-GPU scaling, and collectives' bus bandwidth. Each takes the rows
report/html/store_data.py gathers (plain dicts) and only draws them.
"""

from __future__ import annotations

from gpuscope.pipeline.accuracy import MEMORY_TOLERANCE, TIME_TOLERANCE, group
from gpuscope.report.html.figures import GIB, layout

PANELS = (("memory", "GiB", 1 / GIB, MEMORY_TOLERANCE), ("time", "ms", 1e3, TIME_TOLERANCE))


def _band_traces(lo: float, hi: float, tol: float, axis: str, color: str) -> list[dict]:
    """y = x and the band y = x (1 +- tol) from lo to hi (filled between), on subplot ``axis`` ("" or "2")."""
    xs = [lo, hi]
    common = {"type": "scatter", "mode": "lines", "xaxis": f"x{axis}", "yaxis": f"y{axis}", "hoverinfo": "skip",
              "showlegend": axis == ""}
    return [dict(common, x=xs, y=[x * (1 - tol) for x in xs], line={"width": 0}, name="band low",
                 showlegend=False),
            dict(common, x=xs, y=[x * (1 + tol) for x in xs], fill="tonexty", fillcolor=color, line={"width": 0},
                 name=f"within target ({MEMORY_TOLERANCE:.0%} memory, {TIME_TOLERANCE:.0%} time)"),
            dict(common, x=xs, y=xs, line={"dash": "dot", "color": "#444"}, name="estimated = measured")]


def accuracy_figure(rows: list[dict]) -> dict | None:
    """Estimated against measured, every row (``{case, metric, estimated, measured, error, id}``), memory on the
    left (band 5%), times on the right (band 15%), log axes; hover names case, metric and error."""
    data: list[dict] = []
    axes: dict = {}
    for i, (name, unit, scale, tol) in enumerate(PANELS):
        axis = "" if i == 0 else "2"
        mine = [r for r in rows if r.get("error") is not None and group(r["metric"]) == name]
        axes[f"xaxis{axis}"] = {"type": "log", "title": {"text": f"measured {name} ({unit})"},
                                "domain": [0, 0.46] if i == 0 else [0.54, 1], "anchor": f"y{axis}"}
        axes[f"yaxis{axis}"] = {"type": "log", "title": {"text": f"estimated ({unit})"}, "anchor": f"x{axis}"}
        if not mine:
            continue
        vals = [v * scale for r in mine for v in (r["estimated"], r["measured"]) if v and v > 0]
        data += _band_traces(min(vals) / 1.2, max(vals) * 1.2, tol, axis,
                             "rgba(60,160,60,0.18)" if i == 0 else "rgba(60,120,200,0.18)")
        for metric in sorted({r["metric"] for r in mine}):
            pts = [r for r in mine if r["metric"] == metric]
            data.append({"type": "scatter", "mode": "markers", "name": metric, "xaxis": f"x{axis}",
                         "yaxis": f"y{axis}", "x": [r["measured"] * scale for r in pts],
                         "y": [r["estimated"] * scale for r in pts],
                         "customdata": [[r["case"], r["error"] * 100, r.get("id", "")] for r in pts],
                         "hovertemplate": (f"%{{customdata[0]}} (id %{{customdata[2]}})<br>{metric}: estimated "
                                           f"%{{y:.4g}} {unit}, measured %{{x:.4g}} {unit}<br>error "
                                           "%{customdata[1]:+.1f}%<extra></extra>")})
    if not data:
        return None
    within = sum(abs(r["error"]) <= (MEMORY_TOLERANCE if group(r["metric"]) == "memory" else TIME_TOLERANCE)
                 for r in rows if r.get("error") is not None and group(r["metric"]))
    counted = sum(1 for r in rows if r.get("error") is not None and group(r["metric"]))
    title = f"Predicted vs measured: {within} of {counted} rows within target"
    return {"data": data, "layout": layout(title, height=480, **axes)}


def roofline_figure(device: str, ceilings: dict, points: list[dict]) -> dict | None:
    """The roofline of one device: each measured matmul ceiling (TFLOP/s per dtype) meeting the measured memory
    bandwidth (GB/s) as min(peak, bw x intensity), and the measured workloads as points (``{name, intensity,
    tflops, kind}``: FLOP per byte and achieved TFLOP/s)."""
    bw = ceilings.get("memory_gbs")
    peaks = ceilings.get("matmul_tflops") or {}
    if not (bw and peaks) and not points:
        return None
    xs = [2 ** (k / 4) for k in range(-8, 61)]  # 1/4 .. 2**15 FLOP/byte
    data = []
    for dtype, peak in sorted(peaks.items(), key=lambda kv: -kv[1]):
        if bw:
            data.append({"type": "scatter", "mode": "lines", "name": f"{dtype} {peak:.4g} TFLOP/s, {bw:.4g} GB/s",
                         "x": xs, "y": [min(peak, bw * x / 1e3) for x in xs],
                         "hovertemplate": f"{dtype} ceiling at %{{x:.3g}} FLOP/B: %{{y:.4g}} TFLOP/s<extra></extra>"})
    for kind in sorted({p["kind"] for p in points}):
        pts = [p for p in points if p["kind"] == kind]
        data.append({"type": "scatter", "mode": "markers", "name": kind, "marker": {"size": 9},
                     "x": [p["intensity"] for p in pts], "y": [p["tflops"] for p in pts],
                     "text": [p["name"] for p in pts],
                     "hovertemplate": "%{text}<br>%{x:.3g} FLOP/B, %{y:.4g} TFLOP/s<extra></extra>"})
    title = f"Roofline of {device}: measured ceilings, measured workloads"
    return {"data": data, "layout": layout(title, height=480,
                                           xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"}},
                                           yaxis={"type": "log", "title": {"text": "TFLOP/s"}})}


def scaling_figure(runs: list[dict]) -> dict | None:
    """Distributed training: tokens/s against GPUs for each measured case (``{name, world_size, tokens_per_s,
    baseline_tokens_per_s, scaling_efficiency}``) with the linear scaling of its one-GPU baseline."""
    if not runs:
        return None
    data = []
    for r in runs:
        xs, ys = [r["world_size"]], [r["tokens_per_s"]]
        if r.get("baseline_tokens_per_s"):
            xs, ys = [1] + xs, [r["baseline_tokens_per_s"]] + ys
            data.append({"type": "scatter", "mode": "lines", "name": f"{r['name']}: linear",
                         "x": [1, r["world_size"]], "y": [r["baseline_tokens_per_s"],
                                                          r["baseline_tokens_per_s"] * r["world_size"]],
                         "line": {"dash": "dot"}, "hoverinfo": "skip"})
        eff = r.get("scaling_efficiency")
        data.append({"type": "scatter", "mode": "lines+markers", "name": r["name"], "x": xs, "y": ys,
                     "hovertemplate": ("%{x} GPUs: %{y:,.0f} tokens/s" + (f" (scaling {eff:.1%})" if eff else "")
                                       + "<extra></extra>")})
    return {"data": data, "layout": layout("Multi-GPU scaling (measured)", xaxis={"title": {"text": "GPUs"},
                                                                                  "dtick": 1},
                                           yaxis={"title": {"text": "tokens/s (all GPUs)"}})}


def collectives_figure(points: list[dict]) -> dict | None:
    """Bus bandwidth against message size per collective (``{op, world_size, nbytes, busbw_gbs,
    predicted_busbw_gbs}``), measured (solid) and the planner's (dotted)."""
    if not points:
        return None
    data = []
    for key in sorted({(p["op"], p["world_size"]) for p in points}):
        pts = sorted((p for p in points if (p["op"], p["world_size"]) == key), key=lambda p: p["nbytes"])
        name = f"{key[0]} x{key[1]}"
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"{name} measured",
                     "x": [p["nbytes"] for p in pts], "y": [p["busbw_gbs"] for p in pts],
                     "hovertemplate": f"{name}: %{{x:.3s}}B, %{{y:.1f}} GB/s<extra></extra>"})
        if any(p.get("predicted_busbw_gbs") for p in pts):
            data.append({"type": "scatter", "mode": "lines", "name": f"{name} planner", "line": {"dash": "dot"},
                         "x": [p["nbytes"] for p in pts], "y": [p.get("predicted_busbw_gbs") for p in pts]})
    return {"data": data, "layout": layout("Collectives: bus bandwidth by message size",
                                           xaxis={"type": "log", "title": {"text": "message bytes"}},
                                           yaxis={"type": "log", "title": {"text": "bus bandwidth (GB/s)"}})}


def error_figure(rows: list[dict]) -> dict | None:
    """Each row's error (estimated - measured) / measured in percent, one strip per metric (every row a point,
    hover naming it), over the 5% (memory) and 15% (time) target bands."""
    mine = [r for r in rows if r.get("error") is not None and group(r["metric"])]
    if not mine:
        return None
    metrics = sorted({r["metric"] for r in mine}, key=lambda m: (group(m), m))
    data = []
    for metric in metrics:
        pts = [r for r in mine if r["metric"] == metric]
        data.append({"type": "box", "name": metric, "orientation": "h", "boxpoints": "all", "jitter": 0.6,
                     "pointpos": 0, "fillcolor": "rgba(0,0,0,0)", "line": {"color": "rgba(0,0,0,0.35)"},
                     "x": [r["error"] * 100 for r in pts], "y": [metric] * len(pts),
                     "text": [f"{r['case']} (id {r.get('id', '')})" for r in pts],
                     "hovertemplate": "%{text}<br>error %{x:+.1f}%<extra></extra>"})
    bands = [{"type": "rect", "xref": "x", "yref": "paper", "x0": -100 * tol, "x1": 100 * tol, "y0": 0, "y1": 1,
              "fillcolor": color, "line": {"width": 0}, "layer": "below"}
             for tol, color in ((TIME_TOLERANCE, "rgba(60,120,200,0.12)"), (MEMORY_TOLERANCE, "rgba(60,160,60,0.2)"))]
    return {"data": data, "layout": layout(f"Error of every row: bands {MEMORY_TOLERANCE:.0%} (memory) and "
                                           f"{TIME_TOLERANCE:.0%} (time)", showlegend=False, shapes=bands,
                                           height=max(300, 60 * len(metrics) + 120),
                                           xaxis={"title": {"text": "error (%): (estimated - measured) / measured"},
                                                  "zeroline": True}, yaxis={"automargin": True})}
