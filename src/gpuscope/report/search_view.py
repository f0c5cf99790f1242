"""Render a layout search (`gpuscope plan train --search`) as JSON (schema gpuscope.search/1) or a rich table."""

from __future__ import annotations

import json

SEARCH_SCHEMA = "gpuscope.search/1"
COLUMNS = ("#", "tp", "pp", "dp", "ep", "zero", "sp", "v", "mb", "recompute", "tok/s", "step", "MFU", "GiB/GPU")


def rows(search) -> list[dict]:
    return [{"tp": e.layout.tp, "pp": e.layout.pp, "dp": e.layout.dp, "ep": e.layout.ep, "zero": e.layout.zero,
             "sp": e.layout.sp, "virtual": e.layout.virtual, "micro_batch": e.layout.micro_batch,
             "recompute": e.layout.recompute, "tokens_per_s": e.tokens_per_s, "step_s": e.step_s, "mfu": e.mfu,
             "peak_bytes_per_gpu": e.peak_bytes}
            for e in search.result.ranked]


def search_to_json(search) -> dict:
    res = search.result
    return {"schema": SEARCH_SCHEMA, "model": search.model, "hardware": search.hardware, "num_gpus": search.num_gpus,
            "global_batch": search.global_batch, "seq": search.seq, "considered": res.considered,
            "rejected_memory": res.rejected_memory, "seconds": search.seconds, "ranked": rows(search)}


def search_json_text(search) -> str:
    return json.dumps(search_to_json(search), indent=2)


def render_search(search, console) -> None:
    from rich.table import Table

    res = search.result
    t = Table(title=f"{search.model} on {search.num_gpus} x {search.hardware}: {res.considered:,} layouts in "
                    f"{search.seconds:.2f} s, {res.rejected_memory:,} over memory", header_style="bold")
    for c in COLUMNS:
        t.add_column(c, justify="right")
    ranked = rows(search)
    for i, r in enumerate(ranked, 1):
        t.add_row(str(i), str(r["tp"]), str(r["pp"]), str(r["dp"]), str(r["ep"]), str(r["zero"]),
                  "y" if r["sp"] else "", str(r["virtual"]), str(r["micro_batch"]), r["recompute"],
                  f"{r['tokens_per_s']:,.0f}", f"{r['step_s']:.2f} s", f"{r['mfu']:.1%}",
                  f"{r['peak_bytes_per_gpu'] / 2**30:.1f}")
    console.print(t)
    if not ranked:
        console.print("[red]No layout fits: more GPUs, a shorter --seq or a smaller --global-batch.[/]")
