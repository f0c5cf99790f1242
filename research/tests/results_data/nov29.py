"""research/results/2026-11-29-h200 (README.md there): bf16 `generate` and AMP/bf16/fp32 training of 28 cases on one
H200 (transformers 5.17, torch 2.11, random weights). The records, calibrations and selections the tests read."""

from __future__ import annotations

from pathlib import Path

from gpuscope.explain.compare import read_records

RESULTS = Path(__file__).resolve().parents[2] / "results" / "2026-11-29-h200" / "measurements.jsonl"
RECORDS = read_records(RESULTS)
