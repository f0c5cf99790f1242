"""Render doctor reports and tuning results (value dicts built elsewhere) as terminal tables, Markdown and JSON."""

from __future__ import annotations

import json

from gpuscope.explain.doctor_report import DOCTOR_SCHEMA  # noqa: F401  (one definition)


def _plain(obj):
    if hasattr(obj, "to_json"):
        return _plain(obj.to_json())
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def to_json_text(report: dict) -> str:
    return json.dumps(_plain(report), indent=1, default=str)


def _b(v) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    return f"{v / 2**30:.2f} GiB" if abs(v) >= 2**26 else f"{v / 2**20:.1f} MiB"


def _s(v) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    return f"{v:.3f} s" if v >= 1 else f"{v * 1e3:.2f} ms" if v >= 1e-3 else f"{v * 1e6:.1f} us"


def _pct(v) -> str:
    return f"{v:.0%}" if isinstance(v, (int, float)) else "-"


def _ev(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list):
        return "; ".join(_ev(x) for x in v[:3])
    if isinstance(v, dict):
        return "(" + ", ".join(f"{k}={_ev(x)}" for k, x in v.items()) + ")"
    return str(v)


# --- doctor ----------------------------------------------------------------------------------------------------
def _timing(est: dict) -> str:
    """How the measured time beside the estimate was taken (explain/findings.bare_time)."""
    return {"bare": " (time: bare run, no profiler)", "profiled": " (time: under the profiler)"}.get(
        est.get("measured_timing"), "")


def _profile_lines(p: dict) -> list[tuple[str, str]]:
    if not p or "wall_s" not in p:
        return []
    m = p.get("memory") or {}
    rows = [("device", f"{p.get('device_name')} ({p.get('device')})"), ("wall time", _s(p.get("wall_s"))),
            ("steps", f"{p.get('steps')} (median {_s(p.get('step_s_median'))})"),
            (f"busy ({p.get('timeline')})", f"{_s(p.get('busy_s'))}, idle {_pct(p.get('idle_fraction'))}"),
            ("kernels", f"{p.get('kernel_count')}, mean {_s(p.get('kernel_mean_s'))}, "
                        f"mean gap {_s(p.get('gap_mean_s'))}"),
            ("data loader", f"{_s(p.get('dataloader_s'))} ({_pct(p.get('dataloader_fraction'))} of the window "
                            "without the profiler's own time)"),
            ("profiler's own time", f"{_s(p.get('profiler_overhead_s'))} ("
             + {"bare_run": "measured: the workload timed bare first",
                "bare_steps": f"measured: bare median step {_s(p.get('bare_step_s'))}",
                "per_event": "estimated per CPU event; --bare-run measures it"}.get(
                    p.get("profiler_overhead_source"), "not recorded") + ")"),
            ("memory", f"peak allocated {_b(m.get('peak_allocated_bytes'))}, peak reserved "
                       f"{_b(m.get('peak_reserved_bytes'))}, device {_b(m.get('device_total_bytes'))}")]
    sy = p.get("syncs")
    if sy:
        gain = f", of it recoverable {_s(sy['recoverable_s'])}" if sy.get("recoverable_s") is not None else ""
        rows.append(("host syncs", f"{sy.get('calls')}, GPU idle after them {_s(sy.get('refill_s'))}{gain}"))
    mr = p.get("moe_routing")
    if mr:
        rows.append(("MoE routing", f"busiest expert / mean rows: median {mr['imbalance_median']:.2f}, max "
                                    f"{mr['imbalance_max']:.2f} over {mr['layers']} layers of {mr['experts']} experts"))
    nv = p.get("nvml") or {}
    if nv.get("unavailable"):
        rows.append(("NVML", str(nv["unavailable"])))
    elif nv:
        rows.append(("NVML", f"power {nv.get('power_w_median')} W, SM {nv.get('sm_clock_mhz_median')} MHz, "
                             f"util {nv.get('gpu_util_pct_median')}%, throttled {_pct(nv.get('throttled_fraction'))}"))
    if p.get("script"):
        rows.append(("script", " ".join(p["script"]) + f" -> {p.get('script_status')}"
                     + (f" ({p['script_error']})" if p.get("script_error") else "")))
    return rows


def script_failed(r: dict) -> bool:
    """A profiled script that did not end by itself with code 0 (an error, a non-zero exit, a timeout, a stop)."""
    return (r.get("target") or {}).get("kind") == "script" and r.get("status") not in ("ok", None)


def failure_lines(r: dict) -> list[str]:
    """What a failed script said last (its traceback's last lines), under a line with its status and exit code."""
    if not script_failed(r):
        return []
    p = r.get("profile") or {}
    code = p.get("script_exit_code")
    head = f"The script did not finish: {r.get('status')}" + (f", exit code {code}" if code is not None else "")
    if p.get("wall_s") and r.get("status") in ("interrupted", "timeout"):
        head += f" (the profile above covers its first {p.get('wall_s'):.1f} s)"
    return [head + ". Its last lines:"] + ["  " + ln for ln in (p.get("script_traceback") or [p.get("script_error")])
                                            if ln]


def _headline(r: dict) -> str:
    t = r.get("target") or {}
    n = len(r.get("findings") or [])
    return f"gpuscope doctor: {t.get('name', t.get('kind', '?'))} - status {r.get('status')}, {n} finding(s)"


def render_doctor(r: dict, console) -> None:
    from rich.table import Table

    console.print(f"[bold]{_headline(r)}[/bold]", highlight=False)
    rows = _profile_lines(r.get("profile") or {})
    if rows:
        t = Table(title="profile", show_header=False)
        t.add_column("what")
        t.add_column("value")
        for k, v in rows:
            t.add_row(k, v)
        console.print(t)
    est = r.get("estimate") or {}
    if est.get("rows"):
        t = Table(title=f"planner estimate on {est.get('hardware')} vs measured{_timing(est)}")
        for c in ("metric", "estimated", "measured", "ratio"):
            t.add_column(c, justify="left" if c == "metric" else "right")
        for x in est["rows"]:
            f = _b if x["metric"].endswith("bytes") else _s
            ratio = f"{x['measured'] / x['estimated']:.2f}x" if x.get("estimated") and x.get("measured") else "-"
            t.add_row(x["metric"], f(x.get("estimated")), f(x.get("measured")), ratio)
        console.print(t)
    elif est.get("unavailable"):
        console.print(f"planner estimate: {est['unavailable']}", highlight=False)
    for i, f in enumerate(r.get("findings") or [], 1):
        f = _plain(f)
        console.print(f"\n[bold]{i}. [{f['severity']}] {f['title']}[/bold]  ({f['code']})", highlight=False)
        console.print("   evidence: " + ", ".join(f"{k}={_ev(v)}" for k, v in f["evidence"].items()),
                      highlight=False)
        console.print(f"   fix: {f['fix']}", highlight=False)
        console.print(f"   effect: {f['estimated_effect']}", highlight=False)
    if not r.get("findings") and rows and not script_failed(r):
        console.print("\nNo finding fired: nothing in the profile crossed a rule's threshold.", highlight=False)
    for line in failure_lines(r):
        console.print(line, highlight=False, markup=False)
    if r.get("oom"):
        console.print(oom_table(r["oom"]))


def oom_table(oom: dict):
    from rich.table import Table

    base = oom["base"]
    t = Table(title=f"Out of memory: levers for {oom['model']} on {oom['hardware']} (needs "
                    f"{_b(base['required_bytes'])} of {_b(base['device_total_bytes'])}), ranked")
    for c in ("#", "tier", "lever", "GPUs", "peak/GPU", "saved", "slowdown", "fits"):
        t.add_column(c, justify="left" if c == "lever" else "right")
    for x in oom["tiers"]:
        x = _plain(x)
        t.add_row(str(x["rank"]), str(x["tier"]), x["lever"], str(x["num_gpus"]), _b(x["peak_bytes"]),
                  _b(x["saved_bytes"]), f"{x['slowdown']:.2f}x", "yes" if x["fits"] else "no")
    return t


def doctor_markdown(r: dict) -> str:
    out = [f"# {_headline(r)}", ""]
    rows = _profile_lines(r.get("profile") or {})
    if rows:
        out += ["## Profile", "", "| what | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows] + [""]
    est = r.get("estimate") or {}
    if est.get("rows"):
        out += [f"## Planner estimate on {est.get('hardware')} vs measured{_timing(est)}", "",
                "| metric | estimated | measured |", "|---|---:|---:|"]
        for x in est["rows"]:
            f = _b if x["metric"].endswith("bytes") else _s
            out.append(f"| {x['metric']} | {f(x.get('estimated'))} | {f(x.get('measured'))} |")
        out.append("")
    elif est.get("unavailable"):
        out += [f"Planner estimate: {est['unavailable']}", ""]
    out += ["## Findings", ""]
    for i, f in enumerate(r.get("findings") or [], 1):
        f = _plain(f)
        out += [f"### {i}. {f['title']} ({f['severity']}, `{f['code']}`)", "",
                "- Evidence: " + ", ".join(f"{k} = {_ev(v)}" for k, v in f["evidence"].items()),
                f"- Fix: {f['fix']}", f"- Estimated effect: {f['estimated_effect']}", ""]
    if failure_lines(r):
        out += ["```"] + failure_lines(r) + ["```", ""]
    elif not r.get("findings"):
        out += ["No finding fired." if rows else "Nothing was profiled (plan only).", ""]
    if r.get("oom"):
        oom = r["oom"]
        out += ["## Out of memory: levers ranked", "",
                "| # | tier | lever | GPUs | peak/GPU | saved | slowdown | fits |",
                "|---:|---:|---|---:|---:|---:|---:|---|"]
        for x in oom["tiers"]:
            x = _plain(x)
            out.append(f"| {x['rank']} | {x['tier']} | {x['lever']} | {x['num_gpus']} | {_b(x['peak_bytes'])} | "
                       f"{_b(x['saved_bytes'])} | {x['slowdown']:.2f}x | {'yes' if x['fits'] else 'no'} |")
        out.append("")
    return "\n".join(out)


# --- tune ------------------------------------------------------------------------------------------------------
def _cap_note(r: dict) -> str:
    cap = r.get("memory_cap") or {}
    note = f" Search capped at batch {cap['batch']}: {cap['stop_reason']}." if cap.get("stop_reason") else ""
    return note + (f" Search stopped by its {r['budget_stop']}." if r.get("budget_stop") else "")


def _knee(r: dict) -> str:
    """The knee, or '>= B (not reached: ...)' where it is the largest batch measured (measure/tune/batch.py)."""
    if r.get("knee_reached", True) or r.get("knee_batch") is None:
        return str(r.get("knee_batch"))
    ran = sum(1 for x in r.get("rows") or [] if x.get("status") == "ok")
    return f">= {r['knee_batch']} (not reached: " + ("tokens/s still rose at the largest batch tried)" if ran > 1
                                                     else "no other batch measured)")


def batch_markdown(r: dict) -> str:
    out = [f"# Batch search ({r['kind']}) on {r.get('device_name')}", "",
           f"Largest batch that fits: **{r.get('max_batch')}**; throughput knee (gain < {r['knee_gain']:.0%} per "
           f"doubling): **{_knee(r)}**; dynamic policy: **{r['dynamic'].get('batch')}** "
           f"({r['dynamic'].get('stop_reason')})." + _cap_note(r), "", "| batch | status | tokens/s | peak memory |",
           "|---:|---|---:|---:|"]
    for x in r["rows"]:
        tps = f"{x['tokens_per_s']:.1f}" if x.get("tokens_per_s") else "-"
        out.append(f"| {x['batch']} | {x['status']} | {tps} | {_b(x.get('peak_bytes'))} |")
    out += ["", "| policy | batch | tokens/s | vs optimal |", "|---|---:|---:|---:|"]
    for c in r.get("comparison") or []:
        out.append(f"| {c['policy']} | {c['batch']} | {c['tokens_per_s']:.1f} | {_pct(c.get('vs_optimal'))} |")
    return "\n".join(out) + "\n"


def render_batch(r: dict, console) -> None:
    from rich.table import Table

    t = Table(title=f"batch search ({r['kind']}) on {r.get('device_name')}")
    for c in ("batch", "status", "tokens/s", "peak memory", "util"):
        t.add_column(c, justify="right")
    for x in r["rows"]:
        tps = f"{x['tokens_per_s']:.1f}" if x.get("tokens_per_s") else "-"
        t.add_row(str(x["batch"]), x["status"], tps, _b(x.get("peak_bytes")), _pct(x.get("util")))
    console.print(t)
    c = Table(title="policies")
    for col in ("policy", "batch", "tokens/s", "vs optimal"):
        c.add_column(col, justify="left" if col == "policy" else "right")
    for x in r.get("comparison") or []:
        c.add_row(x["policy"], str(x["batch"]), f"{x['tokens_per_s']:.1f}", _pct(x.get("vs_optimal")))
    console.print(c)
    d = r["dynamic"]
    console.print(f"largest that fits: {r.get('max_batch')}  knee: {_knee(r)}  dynamic policy: "
                  f"{d.get('batch')} ({d.get('stop_reason')})", highlight=False)
    if (r.get("memory_cap") or {}).get("stop_reason"):
        console.print(f"search capped at batch {r['memory_cap']['batch']}: {r['memory_cap']['stop_reason']}",
                      highlight=False)
    if r.get("budget_stop"):
        console.print(f"search stopped: {r['budget_stop']}", highlight=False)


def precision_markdown(r: dict) -> str:
    out = [f"# Precision sweep ({r['kind']}) on {r.get('device_name')}", "",
           "| mode | status | tokens/s | vs fp32 | peak memory | deviation from fp32 |", "|---|---|---:|---:|---:|---|"]
    for x in r["rows"]:
        out.append(_prec_cells(x, sep=" | ", wrap=True))
    out += ["", f"Recommendation: {r['recommendation']['text']}"] + [f"Note: {n}" for n in r.get("notes", [])]
    return "\n".join(out) + "\n"


def _prec_cells(x: dict, sep: str = " | ", wrap: bool = False):
    cells = _prec_row(x)
    return ("| " + sep.join(cells) + " |") if wrap else cells


def _prec_row(x: dict) -> list[str]:
    if x.get("status") != "ok":
        return [x["mode"], x.get("status", "?"), "-", "-", "-", x.get("reason", "")]
    d = x.get("deviation") or {}
    dv = ", ".join(f"{k} {v:.2e}" if "top1" not in k else f"{k} {v:.1%}" for k, v in d.items())
    return [x["mode"], "ok", f"{x['tokens_per_s']:.1f}", f"{x.get('speed_vs_fp32', 1):.2f}x",
            _b(x.get("peak_bytes")), dv]


def render_precision(r: dict, console) -> None:
    from rich.table import Table

    t = Table(title=f"precision sweep ({r['kind']}) on {r.get('device_name')}")
    for c in ("mode", "status", "tokens/s", "vs fp32", "peak memory", "deviation from fp32"):
        t.add_column(c, justify="left" if c in ("mode", "deviation from fp32") else "right")
    for x in r["rows"]:
        t.add_row(*_prec_row(x))
    console.print(t)
    console.print(f"recommendation: {r['recommendation']['text']}", highlight=False)
    for n in r.get("notes", []):
        console.print(f"note: {n}", highlight=False)
