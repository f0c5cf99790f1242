"""The sections of one command's result, from the JSON document that command prints with --json: an estimate
(`plan infer|train`), a hardware comparison (`compare`), an advice (`advise`). `--html` writes them as a page and
`gpuscope ui` shows the same sections under its forms."""

from __future__ import annotations

from gpuscope.report.html import figures as f
from gpuscope.report.html.page import Section, table

GIB = 2**30


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:,.3f} ms"


def _summary_rows(est: dict) -> list[list]:
    mem, t, th = est["memory"], est["time"], est["throughput"]
    rows = [["fits", "yes" if est["fits"] else "no"],
            ["peak allocated per GPU", f"{mem['peak_bytes_per_gpu'] / GIB:,.2f} GiB"],
            ["required / device",
             f"{mem['required_bytes_per_gpu'] / GIB:,.2f} / {mem['device_total_bytes'] / GIB:,.2f} GiB"]]
    if est["kind"] == "infer":
        rows += [["time to first token", _ms(t.get("prefill_s"))], ["decode per token (TPOT)",
                                                                     _ms(t.get("decode_s_per_token"))],
                 ["decode tokens/s", f"{th['decode_tokens_per_s']:,.1f}"], ["end to end", _ms(t.get("e2e_s"))]]
    else:
        rows += [["step", _ms(t.get("step_s"))], ["tokens/s (all GPUs)", f"{th['tokens_per_s']:,.0f}"]]
        if est.get("mfu") is not None:
            rows.append(["MFU", f"{est['mfu']:.1%}"])
    return rows


TIME_NOTE = {"infer": "The planner's GPU time per operation (prefill: the whole prompt; decode: one step), and the "
                       "host's time for one decode step beside it (a step takes the slower of the two).",
             "train": "The planner's GPU time per operation of one micro-batch (forward, backward), the optimizer "
                      "step, and the host's time for one micro-batch beside them (a micro-batch takes the slower)."}


def estimate_sections(est: dict) -> list[Section]:
    """An estimate (schema gpuscope.estimate/1): its headline figures, memory breakdown and time by phase."""
    inputs = ", ".join(f"{k}={v}" for k, v in est.get("inputs", {}).items())
    head = Section(f"Estimate: {est['model']} on {est['hardware']} ({est['kind']})", id="estimate",
                   notes=[est.get("verdict") or "", f"inputs: {inputs}"]
                   + [f"-> {s}" for s in est.get("suggestions", [])],
                   html=table(["figure", "value"], _summary_rows(est), numeric=(1,)))
    mem = Section("Memory breakdown", [f.memory_figure(est)], id="memory",
                  notes=["The peak allocated on the busiest GPU, stacked by component (runtime overheads hatched), "
                         "and the allocator's peak in each phase."])
    time = Section("Time by phase and operation", [f.time_figure(est)], id="time",
                   notes=[TIME_NOTE.get(est["kind"], TIME_NOTE["train"]) if est.get("ops") else
                          "The planner's time per phase (with --ops: per operation)."])
    notes = Section("Assumptions", notes=list(est.get("assumptions", [])), id="assumptions")
    return [head, mem, time, notes]


def _hardware_rows(doc: dict, rows: list[dict]) -> list[list]:
    key, _label = f.speed_key(doc["kind"])
    out = []
    for r in rows:
        m = r.get("metrics", {})
        out.append([r["name"], "yes" if r.get("fits") else "no", r.get("verdict", ""),
                    "-" if m.get(key) is None else f"{m[key]:,.1f}",
                    "-" if m.get("tokens_per_j") is None else f"{m['tokens_per_j']:.3g}",
                    "-" if m.get("usd_per_m_tokens_cloud") is None else f"${m['usd_per_m_tokens_cloud']:.3f}",
                    "-" if m.get("usd_per_m_tokens_owned") is None else f"${m['usd_per_m_tokens_owned']:.3f}"])
    return out


HW_COLUMNS = ["hardware", "fits", "verdict", "tokens/s", "tokens/J", "$ / 1M tokens, cloud", "$ / 1M tokens, own"]


def compare_sections(doc: dict) -> list[Section]:
    """A comparison (schema gpuscope.compare/1): tokens/s against $ per 1M tokens, tokens per joule, the table."""
    rows = doc.get("rows", [])
    return [Section(f"Compare: {doc['model']} ({doc['kind']})", id="compare",
                    figures=[f.cost_speed_figure(doc, rows), f.tokens_per_joule_figure(doc, rows)],
                    notes=list(doc.get("assumptions", [])),
                    html=table(HW_COLUMNS, _hardware_rows(doc, rows), numeric=(3, 4, 5, 6)))]


def advise_sections(doc: dict) -> list[Section]:
    """An advice (schema gpuscope.advise/1): the recommendation, the ranking, cost against speed."""
    rows = [r["row"] for r in doc.get("ranked", []) if r.get("row")]
    ruled = [[r.get("name", r.get("hardware")), "; ".join(r.get("ruled_out_by") or [])]
             for r in doc.get("ruled_out", [])]
    return [Section(f"Advise: {doc['model']} ({doc['kind']})", id="advise",
                    notes=[doc.get("recommendation", "")] + list(doc.get("what_would_change", [])),
                    figures=[f.advise_score_figure(doc), f.cost_speed_figure(doc, rows),
                             f.tokens_per_joule_figure(doc, rows)],
                    html=table(HW_COLUMNS, _hardware_rows(doc, rows), numeric=(3, 4, 5, 6))
                    + (table(["ruled out", "why"], ruled) if ruled else ""))]


def serve_sections(doc: dict) -> list[Section]:
    """A serving plan (plan serve --json: schema gpuscope.estimate/1, kind serve): throughput, latency, capacity,
    the latency-throughput curve (--curve) and the engine's memory."""
    th, lat, cap = doc["throughput"], doc["latency"], doc["capacity"]
    rows = [["output tokens/s", f"{th['output_tokens_per_s']:,.1f}"], ["requests/s", f"{th['requests_per_s']:,.2f}"],
            ["TTFT p50 / p99", f"{_ms(lat.get('ttft_p50_s'))} / {_ms(lat.get('ttft_p99_s'))}"],
            ["TPOT p50 / p99", f"{_ms(lat.get('tpot_p50_s'))} / {_ms(lat.get('tpot_p99_s'))}"],
            ["max concurrent sequences", f"{cap['max_concurrent_sequences']:,}"],
            ["KV cache",
             f"{doc['memory']['kv_cache_bytes'] / GIB:,.2f} GiB ({cap.get('kv_cache_tokens', 0):,} tokens)"]]
    inputs = ", ".join(f"{k}={v}" for k, v in doc.get("inputs", {}).items() if v not in (None, False, 0.0))
    return [Section(f"Serving: {doc['model']} on {doc['hardware']}", id="serve", notes=[f"inputs: {inputs}"],
                    html=table(["figure", "value"], rows, numeric=(1,))),
            Section("Latency vs throughput", [f.serve_curve_figure(doc)], id="serve-curve",
                    notes=["Each point a Poisson arrival rate the plan simulated (plan serve --curve)."
                           if doc.get("curve") else "The one load planned (plan serve --curve draws a curve)."]),
            Section("Serving memory", [f.serve_memory_figure(doc)], id="serve-memory"),
            Section("Assumptions", notes=list(doc.get("assumptions", [])), id="assumptions")]


def sections_for(doc: dict) -> list[Section]:
    """The sections of any of the documents, chosen by its schema (and kind)."""
    schema = doc.get("schema", "")
    if schema.startswith("gpuscope.estimate") and doc.get("kind") == "serve":
        return serve_sections(doc)
    if schema.startswith("gpuscope.estimate") and doc.get("kind") == "diffusion":
        from gpuscope.report.diffusion_view import html_sections

        return html_sections(doc)
    if schema.startswith("gpuscope.estimate"):
        return estimate_sections(doc)
    if schema.startswith("gpuscope.compare"):
        return compare_sections(doc)
    if schema.startswith("gpuscope.advise"):
        return advise_sections(doc)
    if schema.startswith("gpuscope.search"):
        return [Section(f"Layout search: {doc['model']} on {doc['num_gpus']} x {doc['hardware']}",
                        [f.search_figure(doc)], id="search",
                        notes=[f"{doc['considered']} layouts considered, {doc['rejected_memory']} over the memory."])]
    return []


def write_result(doc: dict, path: str) -> None:
    """One command's result as a page (plan, compare, advise)."""
    from gpuscope.report.html.page import write_page

    title = f"gpuscope {doc.get('kind', '')}: {doc.get('model', '')}"
    write_page(path, title, sections_for(doc), intro=[f"schema {doc.get('schema')}"])
