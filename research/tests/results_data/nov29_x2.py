"""research/results/2026-11-29-h200-x2 (README.md there): DDP and FSDP2 training and NCCL collectives on two H200s
joined by NVLink. The records, calibrations and selections the tests read."""

from __future__ import annotations

import json
from pathlib import Path

from gpuscope.workloads import estimate_for
from gpuscope.specs.hardware import load_hardware

DIR = Path(__file__).resolve().parents[2] / "results" / "2026-11-29-h200-x2"
TRAIN = [json.loads(line) for line in (DIR / "dist_train.jsonl").read_text().splitlines() if line.strip()]
COLL = [json.loads(line) for line in (DIR / "collectives.jsonl").read_text().splitlines() if line.strip()]
HW = load_hardware("h200")


def estimate(case: dict):
    return estimate_for(case, HW)  # the same estimate `bench train-dist` prints beside the measurement
