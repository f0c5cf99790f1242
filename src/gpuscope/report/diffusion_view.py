"""Render a diffusion plan (DiffusionPlan.to_json()) and a diffusion hardware comparison as rich tables or Markdown.
Computes nothing new."""

from __future__ import annotations

from rich.table import Table

GIB = 2**30


def _gib(x) -> str:
    return "-" if x is None else f"{x / GIB:,.2f} GiB"


def _s(x) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def plan_lines(d: dict) -> list[tuple[str, str]]:
    i, m, t = d["inputs"], d["memory"], d["time"]
    video = i["frames"] > 1
    rows = [("model", f"{d['model']} ({i['pipeline']}) on {d['hardware']}"),
            ("call", f"{i['component']}: batch {i['batch']}, {i['height']}x{i['width']}"
                     + (f", {i['frames']} frames" if video else "") + f", {i['steps']} steps, "
                     f"CFG {'on' if i['cfg'] else 'off'} (denoiser batch {i['denoiser_batch']}), {i['dtype']}, "
                     f"attention {i['attention']}, offload {i['offload']}"),
            ("fits", f"{'yes' if d['fits'] else 'NO'}: peak {_gib(m['peak_bytes_per_gpu'])} + runtime "
                     f"{_gib(sum(m['runtime_overhead_bytes'].values()))} of {_gib(m['device_total_bytes'])}")]
    for phase, v in m["phases_bytes"].items():
        rows.append((f"  {phase.replace('_', ' ')}", _gib(v)))
    for name, c in d["components"].items():
        rows.append((f"{name}", f"{c['class']}: {c['params'] / 1e9:,.3f} B params, weights {_gib(c['weight_bytes'])}, "
                               f"activations {_gib(c['activation_peak_bytes'])} (at {c['activation_peak_at']}), "
                               f"{_s(c['forward_s'])} per forward ({c['bound']}-bound, {c['kernels']:,} kernels)"))
    per_step = "the pipeline's kernels" + (" and offload copies" if i["offload"] == "sequential" else "")
    rows += [("step", f"{_s(t['step_s'])} per denoiser forward (+ {_s(t['step_overhead_s'])} a step: {per_step})"),
             ("text encode", _s(t["text_encode_s"])), ("VAE decode", _s(t["vae_decode_s"])),
             ("total", _s(t["total_s"]) + (f" (of which offload copies {_s(t['offload_transfer_s'])})"
                                           if t["offload_transfer_s"] else ""))]
    th, e = d.get("throughput") or {}, d.get("energy") or {}
    if "images_per_s" in th:
        rows.append(("throughput", f"{th['images_per_s']:,.3f} images/s"))
    if "s_per_clip" in th:
        rows.append(("throughput", f"{th['s_per_clip']:,.2f} s per clip ({th['frames_per_s']:,.2f} frames/s)"))
    for k in ("j_per_image", "j_per_clip"):
        if k in e:
            rows.append(("energy", f"{e[k]:,.0f} J {k[2:].replace('_', ' ')} at {e['avg_power_w']:,.0f} W"))
    lim = d.get("limits") or {}
    if lim:
        rows.append(("largest that fits", ", ".join(f"{k.replace('max_', '')} {v}" for k, v in lim.items())))
    return rows


def render_plan(d: dict, console) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for k, v in plan_lines(d):
        table.add_row(k, v)
    console.print(table)
    for a in d.get("assumptions", []):
        console.print(f"[dim]- {a}[/dim]")


def _usd(x) -> str:
    return "-" if x is None else f"{x:,.2f}"


def compare_grid(rows: list[dict], video: bool) -> tuple[list[str], list[list[str]]]:
    unit = "clip" if video else "image"
    header = ["GPU", "fits", "peak", "step", "call", "s/clip" if video else "images/s",
              f"$ / 1k {unit}s cloud", f"$ / 1k {unit}s owned", f"J / {unit}", "step bound"]
    grid = []
    for r in rows:
        thr = r.get("s_per_clip") if video else r.get("images_per_s")
        fit = "yes" if r["fits"] else ("with fix" if r.get("fits_with") else "NO")
        grid.append([r["gpu"], fit, _gib(r["peak_bytes"]), _s(r["step_s"]), _s(r["total_s"]),
                     "-" if thr is None else f"{thr:,.3f}",
                     _usd(r.get("usd_per_1k_cloud")), _usd(r.get("usd_per_1k_owned")),
                     "-" if r.get("j_per_unit") is None else f"{r['j_per_unit']:,.0f}", r["step_bound"]])
    return header, grid


def render_compare(d: dict, console) -> None:
    header, grid = compare_grid(d["rows"], d["video"])
    table = Table(title=d["title"])
    for h in header:
        table.add_column(h)
    for row in grid:
        table.add_row(*row)
    console.print(table)
    for n in d.get("notes", []):
        console.print(f"[dim]- {n}[/dim]")


def compare_markdown(d: dict) -> str:
    header, grid = compare_grid(d["rows"], d["video"])
    lines = [f"**{d['title']}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in grid]
    lines += [""] + [f"- {n}" for n in d.get("notes", [])]
    return "\n".join(lines)


# --- the HTML views of `plan diffusion --html` (report/html/views.sections_for picks them by kind) ---------------

PHASE_TIMES = (("text_encode_s", "text encoders"), ("denoise_s", "denoiser steps"), ("vae_decode_s", "VAE decode"))


def call_time_figure(d: dict) -> dict:
    """One call stacked by phase (text encoders, the steps, the decode: each with its offload copies), the copies'
    sum beside it, and one denoiser step (its forward, and the per-step overhead: the pipeline's kernels and
    sequential offload's copies), in ms (plan JSON: time.*)."""
    from gpuscope.report.html.figures import layout

    t, i = d["time"], d["inputs"]
    data = [{"type": "bar", "name": label, "x": ["one call"], "y": [t[k] * 1e3],
             "hovertemplate": f"{label}: %{{y:,.1f}} ms<extra></extra>"} for k, label in PHASE_TIMES if t.get(k)]
    if t.get("offload_transfer_s"):  # already inside the phases: drawn beside them, not stacked on them
        data.append({"type": "bar", "name": "of which offload copies", "x": ["offload copies"],
                     "y": [t["offload_transfer_s"] * 1e3], "hovertemplate": "offload copies (inside the phases): "
                     "%{y:,.1f} ms<extra></extra>"})
    if t.get("step_s"):
        for k, label in (("step_s", "denoiser forward"), ("step_overhead_s", "per-step overhead")):
            data.append({"type": "bar", "name": label, "x": ["one step"], "y": [t[k] * 1e3], "yaxis": "y2",
                         "hovertemplate": f"{label}: %{{y:,.2f}} ms<extra></extra>"})
    title = (f"Time of one {i['component']} call: {_s(t['total_s'])} ({i['steps']} steps, denoiser batch "
             f"{i['denoiser_batch']})")
    return {"data": data, "layout": layout(title, barmode="stack", yaxis={"title": {"text": "ms, one call"}},
                                           yaxis2={"title": {"text": "ms, one step"}, "overlaying": "y",
                                                   "side": "right"}, legend={"orientation": "h", "y": -0.12})}


def component_time_figure(d: dict) -> dict | None:
    """Each component's forward: the planner's GPU time, the host's time to launch it, and the forward as the two
    overlap on one stream (plan JSON: components.*.gpu_s, host_s, forward_s), in ms."""
    from gpuscope.report.html.figures import layout

    comps = d.get("components") or {}
    if not comps:
        return None
    names = list(comps)
    data = [{"type": "bar", "name": label, "x": names, "y": [comps[n][k] * 1e3 for n in names],
             "hovertemplate": f"{label} (%{{x}}): %{{y:,.2f}} ms<extra></extra>"}
            for k, label in (("gpu_s", "GPU"), ("host_s", "host (launches)"), ("forward_s", "forward"))]
    return {"data": data, "layout": layout("One forward per component: GPU, host and the forward (ms)",
                                           barmode="group", yaxis={"title": {"text": "ms"}})}


def ops_figures(d: dict) -> list[dict]:
    """Per component, the planner's largest operations of one forward by GPU time (plan JSON: top_ops), in ms."""
    from gpuscope.report.html.figures import layout

    out = []
    for name, ops in (d.get("top_ops") or {}).items():
        if not ops:
            continue
        gpu = (d.get("components") or {}).get(name, {}).get("gpu_s")
        data = [{"type": "bar", "orientation": "h", "name": name, "y": [o["op"] for o in ops],
                 "x": [o["gpu_s"] * 1e3 for o in ops], "customdata": [o.get("kernels", 0) for o in ops],
                 "hovertemplate": "%{y}: %{x:,.3f} ms, %{customdata} kernels<extra></extra>"}]
        title = f"{name}: largest operations of one forward" + (f" (GPU {_s(gpu)})" if gpu else "")
        out.append({"data": data, "layout": layout(title, height=max(300, 26 * len(ops) + 120), showlegend=False,
                                                   margin={"l": 330, "r": 30, "t": 60, "b": 50},
                                                   yaxis={"autorange": "reversed"},
                                                   xaxis={"title": {"text": "ms (GPU)"}})})
    return out


def _limit_rows(d: dict) -> list[list]:
    m = d["memory"]
    rows = [["fits", "yes" if d["fits"] else "no"],
            ["required / device", f"{_gib(m['required_bytes_per_gpu'])} / {_gib(m['device_total_bytes'])}"]]
    labels = {"max_batch": "largest batch", "max_square_side": "largest square side (px)",
              "max_frames": "most frames"}
    rows += [[labels.get(k, k.replace("_", " ")), f"{v:,}"] for k, v in (d.get("limits") or {}).items()]
    return rows


def html_sections(d: dict) -> list:
    """The sections of a diffusion plan's page: the plan's figures, memory per phase, time of a call and a step,
    each component's forward and its largest operations, what fits."""
    from gpuscope.report.html import figures as f
    from gpuscope.report.html.page import Section, table

    head = Section(f"Diffusion plan: {d['model']} on {d['hardware']}", id="diffusion",
                   html=table(["figure", "value"], [list(r) for r in plan_lines(d)]))
    mem = Section("Memory per phase", [f.memory_figure(d)], id="diffusion-memory",
                  notes=["The peak allocated stacked by weights and each component's activations (runtime "
                         "overheads hatched), and the allocator's peak in each phase of the call."])
    time = Section("Step time breakdown", [call_time_figure(d), component_time_figure(d), *ops_figures(d)],
                   id="diffusion-time",
                   notes=["A forward is its ops walked on one stream: an op starts when its kernels are launched "
                          "and the op before it has finished, so it lies between the GPU time and the sum of GPU "
                          "and host time."])
    lim = Section("Limits", id="diffusion-limits", html=table(["figure", "value"], _limit_rows(d), numeric=(1,)),
                  notes=["The largest batch, square resolution and frame count whose peak plus runtime overheads "
                         "fit the device (memory only), the rest of the call as planned."])
    notes = Section("Assumptions", notes=list(d.get("assumptions", [])), id="assumptions")
    return [head, mem, time, lim, notes]
