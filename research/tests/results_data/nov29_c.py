"""research/results/2026-11-29-h200-c (README.md there): batch-1 decode of 7B-class models on the graph engine with and
without fused projections, the copy bandwidth of the same run, and DDP gradient compression on two H200s. The
records, calibrations and selections the tests read."""

from __future__ import annotations

from pathlib import Path

from gpuscope.explain.compare import read_records

RESULTS = Path(__file__).resolve().parents[2] / "results" / "2026-11-29-h200-c" / "measurements.jsonl"
RECORDS = read_records(RESULTS)


def by(pred) -> list[dict]:
    return [r for r in RECORDS if pred(r["case"])]


def copy_gbs() -> float:
    (rec,) = by(lambda c: c.get("kind") == "micro" and c.get("bench") == "memory" and c.get("op") == "copy")
    return rec["result"]["gbs"]


def decode(model: str, prompt: int, fused: bool) -> dict:
    (rec,) = by(lambda c: c.get("kind") == "infer" and c["model"] == model and c["prompt"] == prompt
                 and c.get("engine") == "gs-compile" and bool(c.get("fuse_proj")) == fused
                 and c.get("attn", "sdpa") == "sdpa")
    return rec["result"]
