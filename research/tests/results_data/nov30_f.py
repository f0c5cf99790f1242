"""research/results/2026-11-30-h200-f (README.md there): generate with the stop check deferred (hf-graph-defer),
calibrations with real-width host costs, `bench all` on its own calibration. The records, calibrations and
selections the tests read."""

from __future__ import annotations

import json
from pathlib import Path

from gpuscope.explain.compare import read_records

HERE = Path(__file__).resolve().parents[2] / "results" / "2026-11-30-h200-f"
RECORDS = read_records(HERE / "measurements.jsonl")
WORKLOADS = [r for r in RECORDS if r["case"]["kind"] in ("infer", "train")]
DIAG = {v["variant"]: v for v in json.loads((HERE / "defer_diag_1b.json").read_text())["variants"]}
CALL3 = [r for r in RECORDS if "2026-11-30T03:16" <= r["provenance"]["timestamp_utc"] < "2026-11-30T03:30"]
CALL5 = [r for r in RECORDS if "2026-11-30T03:34" <= r["provenance"]["timestamp_utc"] < "2026-11-30T03:45"]
CALL6 = [r for r in RECORDS if r["provenance"]["timestamp_utc"] >= "2026-11-30T03:45"]  # bench all, final tree
RUN_CAL = HERE / "nvidia-h200-20261130T034811Z-cc1948.toml"  # the calibration bench all wrote and planned on
# calls 1-2: deferred stop, 70% of copy
EARLY = [r for r in RECORDS if r not in CALL3 and r not in CALL5 and r not in CALL6]


def by_name(name: str) -> dict:
    """A workload of calls 1-2 by case name."""
    (r,) = [r for r in EARLY if r["case_id"].split("#")[0] == name]
    return r["result"]


def calibrated_errors(toml: str) -> dict:
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    hw = load_hardware(str(HERE / toml))
    return {(row.case, row.metric): row.error for rec in CALL3 if rec["case"]["kind"] != "micro"
            for row in compare_record(rec, hw)}
