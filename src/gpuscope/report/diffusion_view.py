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
    rows += [("step", f"{_s(t['step_s'])} per denoiser forward (+ {_s(t['step_overhead_s'])} pipeline)"),
             ("text encode", _s(t["text_encode_s"])), ("VAE decode", _s(t["vae_decode_s"])),
             ("total", _s(t["total_s"]) + (f" (offload transfers {_s(t['offload_transfer_s'])})"
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
