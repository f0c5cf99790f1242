"""research/results/2026-11-29-h200-b (README.md there): plain `generate` beside the graph engines (gs-graph, gs-
compile) and single-GPU 7B training configurations. The records, calibrations and selections the tests read."""

from __future__ import annotations

from pathlib import Path

from gpuscope.explain.compare import read_records

RESULTS = Path(__file__).resolve().parents[2] / "results" / "2026-11-29-h200-b" / "measurements.jsonl"
RECORDS = read_records(RESULTS)
