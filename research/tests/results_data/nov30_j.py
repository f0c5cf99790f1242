"""research/results/2026-11-30-h200-j (README.md there): seven `bench all --quick` runs of the GPU-sized set, the
StaticCache TTFT experiment, the fused 8B prefill. The records, calibrations and selections the tests read."""

from __future__ import annotations

import json
from pathlib import Path

from gpuscope.explain.compare import compare_record, read_records
from gpuscope.specs.hardware import load_hardware

HERE = Path(__file__).resolve().parents[2] / "results" / "2026-11-30-h200-j"
RECORDS = read_records(HERE / "measurements.jsonl")
WORKLOADS = [r for r in RECORDS if r["case"]["kind"] in ("infer", "train")]
BENCH = {p.stem.split("_", 1)[1]: json.loads(p.read_text()) for p in sorted(HERE.glob("call*_bench_all_*.json"))}
TIME = ("prefill_s", "decode_s_per_token", "step_s")


def calibration(run_id: str):
    (path,) = HERE.glob(f"call*_nvidia-h200-{run_id}.toml")
    return load_hardware(path)


def rows(records=WORKLOADS):
    return [(rec["run_id"], row) for rec in records for row in compare_record(rec, calibration(rec["run_id"]))]
