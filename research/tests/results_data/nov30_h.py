"""research/results/2026-11-30-h200-h (README.md there): nine `bench all` runs, each planned on its own calibration,
and the host calibration's passes and probes. The records, calibrations and selections the tests read."""

from __future__ import annotations

from pathlib import Path

from gpuscope.explain.compare import read_records

HERE = Path(__file__).resolve().parents[2] / "results" / "2026-11-30-h200-h"
CALLS = ("call1", "call3", "call4", "call5")
RECORDS = {c: read_records(HERE / f"{c}_measurements.jsonl") for c in CALLS}
WORKLOADS = [(c, r) for c in CALLS for r in RECORDS[c] if r["case"]["kind"] in ("infer", "train")]
HOST = [(c, r) for c in CALLS for r in RECORDS[c] if r["case"]["kind"] == "host"]


def calibration(call: str, run_id: str):
    from gpuscope.specs.hardware import load_hardware

    (path,) = HERE.glob(f"{call}_nvidia-h200-{run_id}.toml")
    return load_hardware(str(path))


def errors(metric: str, calls=CALLS) -> list[float]:
    from gpuscope.explain.compare import compare_record

    return [row.error for c, r in WORKLOADS if c in calls
            for row in compare_record(r, calibration(c, r["run_id"])) if row.metric == metric]
