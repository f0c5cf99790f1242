"""research/results/2026-11-30-h200-g (README.md there): the host's speed between calibration and runs, the host probe,
training kernel counts, interleaved host fits. The records, calibrations and selections the tests read."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from gpuscope.explain.compare import read_records

HERE = Path(__file__).resolve().parents[2] / "results" / "2026-11-30-h200-g"
RECORDS = read_records(HERE / "measurements.jsonl")
WORKLOADS = [r for r in RECORDS if r["case"]["kind"] in ("infer", "train")]
CALL1 = [r for r in WORKLOADS if r["provenance"]["timestamp_utc"] < "2026-11-30T04:40"]
CALL2 = [r for r in WORKLOADS if r["provenance"]["timestamp_utc"] >= "2026-11-30T04:40"]
BENCH_ALL = [r for r in CALL2 if "tiny" in r["case_id"]]
AFTER = [r for r in CALL2 if r not in BENCH_ALL]
BENCH_ALL_CAL = HERE / "nvidia-h200-20261130T044452Z-c3dca7.toml"  # bench all wrote it and planned on it
CAL_END = HERE / "cal_end.toml"


def bench_rows(records, cal) -> list[tuple[str, dict]]:
    """The time rows as bench printed them in calls 2 and 3: every row, training included, set against the
    forward-only probe (``host_probe_s``; the TTFT row against ``host_probe_ttft_s`` where the run had it). Since
    call 7, bench sets a training run against the training probe only (test_training_runs_...)."""
    from gpuscope.explain.compare import at_host_speed, compare_record, host_scale
    from gpuscope.specs.hardware import load_hardware

    hw = load_hardware(str(cal))
    out = []
    for rec in records:
        res = rec["result"]
        scale, ttft = host_scale(res, hw), host_scale(res, hw, "host_probe_ttft_s")
        at_run = compare_record(rec, at_host_speed(hw, scale))
        at_ttft = compare_record(rec, at_host_speed(hw, ttft)) if ttft else at_run
        for r, a, t in zip(compare_record(rec, hw), at_run, at_ttft):
            if r.metric in ("prefill_s", "decode_s_per_token", "step_s"):
                out.append((r.case, {"metric": r.metric, "error": r.error,
                                     "error_at_run_host": (t if r.metric == "prefill_s" else a).error}))
    return out


def within(rows, key: str) -> int:
    return sum(abs(r[key]) <= 0.15 for _, r in rows)


def max_residual(path: Path) -> float:
    out = []
    for c in json.loads(path.read_text())["cases"]:
        for k in ("forward_s", "backward_s"):
            xs, ys = c["layers"], c[k]
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
            out.append(max(abs(y - (my + b * (x - mx))) / y for x, y in zip(xs, ys)))
    return max(out)

FINAL3 = read_records(HERE / "measurements_final3.jsonl")
FINAL3_CALS = {"a": HERE / "nvidia-h200-20261130T045647Z-0d633b.toml",
               "b": HERE / "nvidia-h200-20261130T045852Z-52e79b.toml"}


def corr(a, b) -> float:
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return num / (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
