"""Render the planner's ranked single-GPU training configurations (`gpuscope tune plan`): JSON (schema
gpuscope.recommend/1) or a rich table."""

from __future__ import annotations

import json

RECOMMEND_SCHEMA = "gpuscope.recommend/1"
COLUMNS = ("#", "precision", "optimizer", "recompute", "micro-batch", "accum", "tok/s", "MFU", "GiB", "needs",
           "numerics")


def recommend_json_text(choices, model: str, hardware: str, seq: int, notes: tuple[str, ...] = ()) -> str:
    return json.dumps({"schema": RECOMMEND_SCHEMA, "model": model, "hardware": hardware, "seq": seq,
                       "ranked": [c.to_json() for c in choices], "notes": list(notes)}, indent=2)


def render_recommend(choices, model: str, hardware_name: str, seq: int, console, notes: tuple[str, ...] = ()) -> None:
    from rich.table import Table

    t = Table(title=f"{model} on {hardware_name}, seq {seq}: configurations that fit, fastest first",
              header_style="bold")
    for c in COLUMNS:
        t.add_column(c, justify="right")
    for i, c in enumerate(choices, 1):
        t.add_row(str(i), c.precision, c.optimizer, c.recompute, str(c.micro_batch), str(c.grad_accum),
                  f"{c.tokens_per_s:,.0f}", f"{c.mfu:.1%}", f"{c.required_bytes / 2**30:.1f}", c.needs or "-",
                  c.numerics.split(":")[0])
    console.print(t)
    for precision, line in dict((c.precision, c.numerics) for c in choices).items():
        console.print(f"- {precision}: {line}")
    for n in notes:
        console.print(f"- {n}")
