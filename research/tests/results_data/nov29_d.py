"""research/results/2026-11-29-h200-d (README.md there): bf16 matmul ceilings, copy and `bench all` time, Mixtral
decode and prefill, the doctor's loader findings, and the training host fits. The records, calibrations and
selections the tests read."""

from __future__ import annotations

from pathlib import Path

from gpuscope.explain.compare import read_records

HERE = Path(__file__).resolve().parents[2] / "results" / "2026-11-29-h200-d"
RECORDS = read_records(HERE / "measurements.jsonl")


def by(pred) -> list[dict]:
    return [r for r in RECORDS if pred(r["case"], r)]


def matmul(argv_has: str) -> dict:
    (rec,) = by(lambda c, r: c.get("bench") == "matmul" and c.get("dtype") == "bf16"
                 and argv_has in " ".join(r["provenance"].get("argv", [])) and "burst" in c)
    return rec["result"]
