"""Render LoRA / QLoRA planning results: `tune plan --lora-r` (ranked configurations and the longest sequences;
schema gpuscope.tune.lora/1) and `compare train --lora-r` (cards side by side; schema gpuscope.compare.lora/1) as
JSON, Markdown or a rich table. Renders value objects; computes nothing new."""

from __future__ import annotations

import json

TUNE_SCHEMA = "gpuscope.tune.lora/1"
GIB = 2**30
TUNE_COLUMNS = ("#", "seq", "micro-batch", "accum", "checkpointing", "optimizer", "tok/s", "MFU", "GiB", "needs")
COMPARE_COLUMNS = ("GPU", "GiB", "best at seq", "tok/s", "GiB used", "longest seq", "GPU-hours", "cloud $",
                   "power $", "notes")


def tune_json(ranked, longest, model: str, hardware: str, lora: dict) -> dict:
    return {"schema": TUNE_SCHEMA, "model": model, "hardware": hardware, "lora": lora,
            "ranked": [c.to_json() for c in ranked], "longest_seq": [c.to_json() for c in longest]}


def tune_json_text(doc: dict) -> str:
    return json.dumps(doc, indent=2)


def _rc(recompute: str) -> str:
    return "on" if recompute == "full" else "off"


def render_tune(doc: dict, title: str, console) -> None:
    from rich.table import Table

    t = Table(title=title, header_style="bold")
    for c in TUNE_COLUMNS:
        t.add_column(c, justify="right")
    for i, c in enumerate(doc["ranked"], 1):
        t.add_row(str(i), str(c["seq"]), str(c["micro_batch"]), str(c["grad_accum"]), _rc(c["recompute"]),
                  c["optimizer"], f"{c['tokens_per_s']:,.0f}", f"{c['mfu']:.1%}", f"{c['required_bytes'] / GIB:.1f}",
                  c["needs"] or "-")
    if doc["ranked"]:
        console.print(t)
    else:
        console.print(f"{title}: nothing fits at --seq {doc['lora']['seq']} (`gpuscope doctor train --plan-only "
                      "--lora-r ...` lists the levers)")
    for c in doc["longest_seq"]:
        console.print(f"longest sequence, micro-batch 1, checkpointing {_rc(c['recompute'])}, {c['optimizer']}: "
                      f"{c['seq']:,} tokens ({c['required_bytes'] / GIB:.1f} GiB, {c['tokens_per_s']:,.0f} tok/s)")


def _money(x) -> str:
    return "-" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def _compare_row(card: dict) -> list[str]:
    b, lg, bud = card["best"], card["longest"], card["budget"]
    best = (f"mb{b['micro_batch']} x{b['grad_accum']} ckpt {_rc(b['recompute'])} {b['optimizer']}" if b
            else "does not fit")
    return [card["name"], f"{card['memory_bytes'] / GIB:.0f}", best, f"{b['tokens_per_s']:,.0f}" if b else "-",
            f"{b['required_bytes'] / GIB:.1f}" if b else "-", f"{lg['seq']:,}" if lg else "none",
            f"{bud['gpu_hours']:,.1f}" if bud else "-", _money(bud and bud["cloud_usd"]),
            _money(bud and bud["electricity_usd"]), "; ".join(card["notes"]) or "-"]


def _compare_title(doc: dict) -> str:
    kind = "QLoRA" if doc["qlora"] else "LoRA"
    return (f"{doc['model']} {kind} r{doc['r']} ({doc['trainable_params'] / 1e6:.1f}M trainable), seq {doc['seq']}, "
            f"budget {doc['tokens']:.3g} tokens on one card")


def render_compare(doc: dict, console) -> None:
    from rich.table import Table

    t = Table(title=_compare_title(doc), header_style="bold")
    for c in COMPARE_COLUMNS:
        t.add_column(c, justify="right")
    for card in doc["cards"]:
        t.add_row(*_compare_row(card))
    console.print(t)
    console.print("longest seq: micro-batch 1 with gradient checkpointing; GPU-hours and cost at the best "
                  "configuration's tokens/s; power $: the board at its TDP.")


def compare_markdown(doc: dict) -> str:
    lines = [f"**{_compare_title(doc)}**", "", "| " + " | ".join(COMPARE_COLUMNS) + " |",
             "|" + "---|" * len(COMPARE_COLUMNS)]
    lines += ["| " + " | ".join(_compare_row(card)) + " |" for card in doc["cards"]]
    return "\n".join(lines)


def tune_markdown(doc: dict) -> str:
    lines = ["| " + " | ".join(TUNE_COLUMNS) + " |", "|" + "---|" * len(TUNE_COLUMNS)]
    for i, c in enumerate(doc["ranked"], 1):
        lines.append(f"| {i} | {c['seq']} | {c['micro_batch']} | {c['grad_accum']} | {_rc(c['recompute'])} | "
                     f"{c['optimizer']} | {c['tokens_per_s']:,.0f} | {c['mfu']:.1%} | "
                     f"{c['required_bytes'] / GIB:.1f} | {c['needs'] or '-'} |")
    lines += [f"- longest sequence (micro-batch 1, checkpointing {_rc(c['recompute'])}, {c['optimizer']}): "
              f"{c['seq']:,} tokens" for c in doc["longest_seq"]]
    return "\n".join(lines)


def print_tune(doc: dict, as_json: bool, console) -> None:
    """`tune plan --lora-r`: JSON, or the table and the longest sequences."""
    kind = "QLoRA" if doc["lora"]["qlora"] else "LoRA"
    if as_json:
        print(tune_json_text(doc))
        return
    render_tune(doc, f"{doc['model']} {kind} r{doc['lora']['r']} on {doc['hardware']}, seq {doc['lora']['seq']}: "
                     "configurations that fit, fastest first", console)


def print_compare(doc: dict, as_json: bool, as_md: bool, console) -> None:
    """`compare train --lora-r`: JSON, Markdown or the table."""
    if as_json:
        print(json.dumps(doc, indent=2))
    elif as_md:
        print(compare_markdown(doc))
    else:
        render_compare(doc, console)
