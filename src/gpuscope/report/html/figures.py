"""Plotly figures (plain ``{"data": [...], "layout": {...}}`` dicts, drawn in the page by plotly.js) of an estimate
and of a hardware comparison. Each takes the JSON document the CLI prints (``plan --json``, ``compare --json``,
``advise --json``) and computes nothing new: it only picks and labels the figures that document holds.

Plain dicts rather than plotly.graph_objects: nothing here imports plotly (the page inlines its JavaScript), so
building a figure costs no start-up; tests/test_report_html.py validates every figure against plotly's schema.
"""

from __future__ import annotations

GIB = 2**30
DEVICE_LINE = 0.4  # the device's memory is drawn as a line when the estimate needs at least this share of it
LABELLED = 8  # points of a scatter named beside them; more are named on hover only (labels would overlap)
TOP_OPS = 8  # operations named in the time chart of each phase; the rest summed as "other"


def layout(title: str, **kw) -> dict:
    """The common layout: a title, room for the legend, white background."""
    out = {"title": {"text": title}, "template": "plotly_white", "margin": {"l": 70, "r": 30, "t": 60, "b": 60},
           "height": 420, "legend": {"orientation": "v"}}
    out.update(kw)
    return out


def _label(key: str) -> str:
    return key.replace("_", " ")


def memory_figure(est: dict) -> dict:
    """Memory of one GPU: the peak stacked by component (and the runtime overheads on top), each phase's peak
    beside it, and the device's memory as a line (estimate JSON: memory.breakdown_bytes, phases_bytes,
    runtime_overhead_bytes, device_total_bytes)."""
    mem = est["memory"]
    peak_x = "at the peak"
    data = []
    for k, v in mem["breakdown_bytes"].items():
        if v:
            data.append({"type": "bar", "name": _label(k), "x": [peak_x], "y": [v / GIB],
                         "hovertemplate": f"{_label(k)}: %{{y:.2f}} GiB<extra></extra>"})
    for k, v in mem.get("runtime_overhead_bytes", {}).items():
        if v:
            data.append({"type": "bar", "name": f"+ {_label(k)} (runtime)", "x": [peak_x], "y": [v / GIB],
                         "marker": {"pattern": {"shape": "/"}},
                         "hovertemplate": f"{_label(k)}: %{{y:.2f}} GiB<extra></extra>"})
    phases = mem.get("phases_bytes") or {}
    if phases:
        data.append({"type": "bar", "name": "phase peak (allocated)", "x": [f"phase: {_label(p)}" for p in phases],
                     "y": [v / GIB for v in phases.values()], "marker": {"color": "#888"},
                     "hovertemplate": "%{x}: %{y:.2f} GiB<extra></extra>"})
    total = mem["device_total_bytes"] / GIB
    xs = [peak_x] + [f"phase: {_label(p)}" for p in phases]
    if mem["required_bytes_per_gpu"] >= DEVICE_LINE * mem["device_total_bytes"]:  # else it flattens the bars
        data.append({"type": "scatter", "mode": "lines", "name": f"device memory {total:.1f} GiB", "x": xs,
                     "y": [total] * len(xs), "line": {"dash": "dash", "color": "#c00"}})
    title = (f"Memory per GPU: {est['model']} on {est['hardware']} ({est['kind']}): "
             f"{mem['required_bytes_per_gpu'] / GIB:.1f} of {total:.1f} GiB")
    return {"data": data, "layout": layout(title, barmode="stack", yaxis={"title": {"text": "GiB"}})}


def _op_traces(ops: list[dict]) -> list[dict]:
    """One bar trace per operation name, stacked over the phases; the smaller ones of each phase as "other"."""
    phases: dict[str, dict[str, float]] = {}
    for o in ops:
        p = phases.setdefault(o["phase"], {})
        p[o["name"]] = p.get(o["name"], 0.0) + o["gpu_s"]
    named: dict[str, dict[str, float]] = {}
    for phase, times in phases.items():
        top = sorted(times.items(), key=lambda kv: -kv[1])
        for name, t in top[:TOP_OPS]:
            named.setdefault(name, {})[phase] = t
        rest = sum(t for _, t in top[TOP_OPS:])
        if rest:
            named.setdefault("other", {})[phase] = rest
    return [{"type": "bar", "name": name, "x": list(by.keys()), "y": [t * 1e3 for t in by.values()],
             "hovertemplate": f"{name} (%{{x}}): %{{y:.3f}} ms<extra></extra>"} for name, by in named.items()]


def _bar(name: str, x: str, seconds: float, color: str) -> dict:
    return {"type": "bar", "name": name, "x": [x], "y": [seconds * 1e3], "marker": {"color": color},
            "hovertemplate": f"{name}: %{{y:.3f}} ms<extra></extra>"}


def _beside_ops(est: dict) -> list[dict]:
    """What the GPU's operations leave out: the host's time for the same step (its launches; the step waits for
    whichever is slower) and training's optimizer step."""
    t = est["time"]
    if est["kind"] == "infer":
        return [_bar("host (launches + Python), one decode step", "decode host", t["decode_host_s"], "#999")] \
            if t.get("decode_host_s") else []
    out = [_bar("optimizer step", "optimizer", t["optimizer_s"], "#555")] if t.get("optimizer_s") else []
    if t.get("host_s_per_micro_batch"):
        out.append(_bar("host (launches), one micro-batch", "host", t["host_s_per_micro_batch"], "#999"))
    return out


INFER_PARTS = (("prefill (GPU)", "prefill_gpu_s"), ("decode per token (GPU)", "decode_gpu_s"),
               ("decode per token (host)", "decode_host_s"))


def time_figure(est: dict) -> dict:
    """Time by phase and operation: with the estimate's ``ops`` (plan --ops), each phase's GPU time stacked by
    operation (decode: one step); without, the phases the estimate's ``time`` names."""
    title = f"Time by phase{' and operation' if est.get('ops') else ''}: {est['model']} on {est['hardware']}"
    if est.get("ops"):
        data = _op_traces(est["ops"]) + _beside_ops(est)
        what = "decode: one step" if est["kind"] == "infer" else "one micro-batch; the optimizer once a step"
        return {"data": data, "layout": layout(title, barmode="stack", yaxis={"title": {"text": "ms"}},
                                                xaxis={"title": {"text": f"phase ({what})"}})}
    t = est["time"]
    if est["kind"] == "infer":
        parts = [(n, t[k]) for n, k in INFER_PARTS if t.get(k)]
    else:
        parts = [(_label(k.removesuffix("_s")), v) for k, v in t.items() if k.endswith("_s") and k != "step_s" and v]
    data = [{"type": "bar", "name": "time", "x": [n for n, _ in parts], "y": [v * 1e3 for _, v in parts],
             "hovertemplate": "%{x}: %{y:.3f} ms<extra></extra>"}]
    return {"data": data, "layout": layout(title, yaxis={"title": {"text": "ms"}}, showlegend=False)}


PER_M = (("usd_per_m_tokens_cloud", "cloud"), ("usd_per_m_tokens_owned", "own"))


def speed_key(kind: str) -> tuple[str, str]:
    return ("e2e_tokens_per_s", "end-to-end tokens/s") if kind == "infer" else \
        ("tokens_per_s_per_gpu", "tokens/s per card")


def cost_speed_figure(doc: dict, rows: list[dict]) -> dict | None:
    """Tokens/s against $ per 1M tokens, one point per card (and pricing: cloud, own) that fits and has a price
    (compare/advise JSON rows' metrics). None when no card has both."""
    key, label = speed_key(doc["kind"])
    data = []
    for price_key, pricing in PER_M:
        pts = [r for r in rows if r.get("fits") and (r["metrics"].get(price_key) is not None)
               and r["metrics"].get(key) is not None]
        if pts:
            data.append({"type": "scatter", "mode": "markers+text", "name": f"$ / 1M tokens, {pricing}",
                         "x": [r["metrics"][price_key] for r in pts], "y": [r["metrics"][key] for r in pts],
                         "text": [r["hardware"] for r in pts] if len(pts) <= LABELLED else None,
                         "textposition": "top center",
                         "hovertext": [r["name"] for r in pts], "marker": {"size": 11},
                         "hovertemplate": "%{hovertext}<br>$%{x:.3f} / 1M tokens<br>%{y:,.1f} tok/s<extra></extra>"})
    if not data:
        return None
    return {"data": data, "layout": layout(f"{label} vs $ per 1M tokens: {doc['model']}",
                                           xaxis={"title": {"text": "USD per 1M tokens"}, "type": "log"},
                                           yaxis={"title": {"text": label}})}


def tokens_per_joule_figure(doc: dict, rows: list[dict]) -> dict | None:
    """Tokens per joule of each card that fits (compare/advise JSON rows)."""
    pts = [r for r in rows if r.get("fits") and r["metrics"].get("tokens_per_j") is not None]
    if not pts:
        return None
    pts.sort(key=lambda r: -r["metrics"]["tokens_per_j"])
    data = [{"type": "bar", "name": "tokens/J", "x": [r["hardware"] for r in pts],
             "y": [r["metrics"]["tokens_per_j"] for r in pts], "hovertext": [r["name"] for r in pts],
             "hovertemplate": "%{hovertext}: %{y:.3g} tokens/J<extra></extra>"}]
    return {"data": data, "layout": layout(f"Tokens per joule: {doc['model']}", showlegend=False,
                                           yaxis={"title": {"text": "tokens / J (busy power)"}})}


def advise_score_figure(doc: dict) -> dict | None:
    """The ranked candidates' score (the objective's metric, lower is better for cost) from advise JSON."""
    ranked = [r for r in doc.get("ranked") or [] if r.get("score") is not None]
    if not ranked:
        return None
    data = [{"type": "bar", "name": doc.get("objective_metric", "score"), "x": [r["hardware"] for r in ranked],
             "y": [r["score"] for r in ranked], "hovertext": [r["name"] for r in ranked],
             "hovertemplate": "%{hovertext}: %{y:.4g}<extra></extra>"}]
    return {"data": data, "layout": layout(f"Ranked by {_label(doc.get('objective_metric', 'score'))}",
                                           showlegend=False, yaxis={"title": {"text": doc.get("objective_metric",
                                                                                              "score")}})}


def search_figure(doc: dict, top: int = 20) -> dict | None:
    """The best layouts of a layout search (plan train --search JSON) by tokens/s, MFU and memory in the hover."""
    ranked = doc.get("ranked", [])[:top]
    if not ranked:
        return None
    names = [f"#{i + 1} tp{r['tp']} pp{r['pp']} dp{r['dp']} z{r['zero']} mb{r['micro_batch']} {r['recompute']}"
             for i, r in enumerate(ranked)]
    data = [{"type": "bar", "name": "tokens/s", "x": names, "y": [r["tokens_per_s"] for r in ranked],
             "customdata": [[(r["mfu"] or 0) * 100, r["peak_bytes_per_gpu"] / GIB] for r in ranked],
             "hovertemplate": "%{x}: %{y:,.0f} tokens/s, MFU %{customdata[0]:.1f}%, %{customdata[1]:.1f} GiB/GPU"
                              "<extra></extra>"}]
    return {"data": data, "layout": layout(f"Best {len(ranked)} layouts by tokens/s", showlegend=False,
                                           yaxis={"title": {"text": "tokens/s (all GPUs)"}})}


SERVE_LATENCY = (("ttft_p50_s", "TTFT p50", "solid"), ("ttft_p99_s", "TTFT p99", "dash"),
                 ("tpot_p50_s", "TPOT p50", "solid"), ("tpot_p99_s", "TPOT p99", "dash"))


def serve_curve_figure(doc: dict) -> dict | None:
    """Serving latency against throughput (plan serve --json): each Poisson rate of its ``curve`` (--curve) as a
    point of output tokens/s and TTFT / TPOT percentiles, TTFT on the left panel and TPOT on the right; without a
    curve, the one load the plan simulated."""
    pts = doc.get("curve") or [{"output_tokens_per_s": doc["throughput"]["output_tokens_per_s"],
                                "rate_requests_per_s": doc["inputs"].get("rate"),
                                **{k: doc["latency"].get(k) for k, _, _ in SERVE_LATENCY}}]
    data = []
    for key, name, dash in SERVE_LATENCY:
        axis = "" if key.startswith("ttft") else "2"
        xs = [p["output_tokens_per_s"] for p in pts if p.get(key) is not None]
        ys = [p[key] * 1e3 for p in pts if p.get(key) is not None]
        rates = [p.get("rate_requests_per_s") or 0 for p in pts if p.get(key) is not None]
        data.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": xs, "y": ys,
                     "xaxis": f"x{axis}", "yaxis": f"y{axis}", "line": {"dash": dash}, "customdata": rates,
                     "hovertemplate": f"{name}: %{{y:.1f}} ms at %{{x:,.0f}} output tok/s "
                                      "(%{customdata:.2f} req/s)<extra></extra>"})
    axes = {"xaxis": {"title": {"text": "output tokens/s"}, "domain": [0, 0.46], "anchor": "y"},
            "yaxis": {"title": {"text": "TTFT (ms)"}, "anchor": "x"},
            "xaxis2": {"title": {"text": "output tokens/s"}, "domain": [0.54, 1], "anchor": "y2"},
            "yaxis2": {"title": {"text": "TPOT (ms)"}, "anchor": "x2"}}
    return {"data": data, "layout": layout(f"Serving latency vs throughput: {doc['model']} on {doc['hardware']} "
                                           f"({doc['inputs'].get('engine')})", **axes)}


def serve_memory_figure(doc: dict) -> dict:
    """Where a serving engine's memory goes (plan serve --json memory): weights, KV cache, activation reserve."""
    mem = doc["memory"]
    parts = [("weights", mem.get("weights_bytes")), ("KV cache", mem.get("kv_cache_bytes")),
             ("activation reserve", mem.get("activation_reserve_bytes"))]
    data = [{"type": "bar", "name": n, "x": ["engine memory"], "y": [v / GIB],
             "hovertemplate": f"{n}: %{{y:.2f}} GiB<extra></extra>"} for n, v in parts if v]
    total = mem["device_total_bytes"] / GIB
    return {"data": data, "layout": layout(f"Serving memory per GPU: of {total:.1f} GiB", barmode="stack",
                                           yaxis={"title": {"text": "GiB"}})}
