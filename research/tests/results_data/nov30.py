"""research/results/2026-11-30-h200 (README.md there): HF static-cache compiled generate (hf-graph) against one CUDA
graph, a calibrated TOML against workloads of the same run, `bench all`. The records, calibrations and selections
the tests read."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from gpuscope.explain.compare import read_records

HERE = Path(__file__).resolve().parents[2] / "results" / "2026-11-30-h200"
RECORDS = read_records(HERE / "measurements.jsonl")
WORKLOADS = [r for r in RECORDS if r["case"]["kind"] in ("infer", "train")]
CALL4 = [r for r in WORKLOADS  # after its calibrate, before call 5
         if "2026-11-30T01:30" <= r["provenance"]["timestamp_utc"] < "2026-11-30T01:40"]


def read_json(name: str) -> dict:
    return json.loads((HERE / name).read_text())


def host_points(variant: str = "default") -> list[tuple[int, float]]:
    """(layers, TPOT - profiled GPU kernel time per token) per model: the host time the GPU waits for."""
    pts = []
    for name in ("hf_layers.json", "hf_trend_1b.json", "hf_trend_8b.json"):
        for v in read_json(name)["variants"]:
            if v["variant"] == variant:
                tpot = statistics.median([v["tpot_s"], *v["tpot_trend_s"]])
                pts.append((v["layers"], tpot - v["decode_gpu_us_per_token"] * 1e-6))
    return pts
