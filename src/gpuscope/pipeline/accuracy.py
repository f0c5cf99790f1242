"""How close the planner came: the one accuracy summary of estimate rows beside their measurements, used by
`gpuscope bench` (per run, as ``estimate_accuracy``) and by `gpuscope results compare` (per metric, as
``summary``) alike.

The targets: peak memory within 5%, times within 15% (calibrated estimates; research/results/ READMEs hold
how often each run met them). A row is memory when its metric ends in ``bytes`` (the peak and the peak of each
training phase), time when it is TTFT, TPOT or a step; derived rows (MFU, scaling efficiency) restate a time and
are not counted.
"""

from __future__ import annotations

MEMORY_TOLERANCE = 0.05
TIME_TOLERANCE = 0.15
TIME_METRICS = ("prefill_s", "decode_s_per_token", "step_s")
DERIVED = ("mfu", "scaling_efficiency")
TARGET = f"memory within {MEMORY_TOLERANCE:.0%}, time within {TIME_TOLERANCE:.0%}"


def group(metric: str) -> str | None:
    """'memory', 'time' or None (not counted)."""
    if metric in DERIVED:
        return None
    return "memory" if metric.endswith("bytes") else "time"


def band(metric: str) -> float | None:
    g = group(metric)
    return None if g is None else (MEMORY_TOLERANCE if g == "memory" else TIME_TOLERANCE)


def within(metric: str, error: float) -> bool:
    return abs(error) <= band(metric)


def _metric_error(r):
    return (r["metric"], r["error"]) if isinstance(r, dict) else (r.metric, r.error)


def by_metric(rows) -> dict[str, dict]:
    """Per metric (memory rows pooled as ``memory``), how many rows fall within the target band:
    {"memory": {"within": 95, "of": 95, "band": 0.05}, "prefill_s": {...}, ...}. ``rows``: explain/compare Row
    objects or dicts with ``metric`` and ``error`` (None errors are left out)."""
    out: dict[str, dict] = {}
    for r in rows:
        metric, err = _metric_error(r)
        if err is None or group(metric) is None:
            continue
        key = "memory" if group(metric) == "memory" else metric
        s = out.setdefault(key, {"within": 0, "of": 0, "band": band(metric)})
        s["of"] += 1
        s["within"] += within(metric, err)
    return out


def _worse(worst, name: str, err: float):
    return [name, err] if worst is None or abs(err) > abs(worst[1]) else worst


def bench_summary(measurements: list[dict]) -> dict | None:
    """A bench run's estimate rows (each measurement's ``estimate.rows``): how many land within the target, plainly
    and (where the run and the calibration both carry host probes) at the host speed the run met, and the worst
    time row of each. None when no measurement had an estimate. The counts are by_metric's, pooled over times."""
    rows = [(m.get("name"), r) for m in measurements for r in (m.get("estimate") or {}).get("rows", [])
            if r.get("error") is not None]
    counts = by_metric([r for _, r in rows])
    time_rows = [(n, r) for n, r in rows if group(r["metric"]) == "time"]
    at_host = [(n, r) for n, r in time_rows if r.get("error_at_run_host") is not None]
    out = {"time_rows": sum(v["of"] for k, v in counts.items() if k != "memory"),
           "time_within": sum(v["within"] for k, v in counts.items() if k != "memory"),
           "memory_rows": counts.get("memory", {}).get("of", 0),
           "memory_within": counts.get("memory", {}).get("within", 0),
           "time_rows_at_run_host": len(at_host),
           "time_within_at_run_host": sum(within(r["metric"], r["error_at_run_host"]) for _, r in at_host),
           "worst_time": None, "worst_time_at_run_host": None}
    for n, r in time_rows:
        out["worst_time"] = _worse(out["worst_time"], f"{n} {r['metric']}", r["error"])
    for n, r in at_host:
        out["worst_time_at_run_host"] = _worse(out["worst_time_at_run_host"], f"{n} {r['metric']}",
                                               r["error_at_run_host"])
    return out if out["time_rows"] or out["memory_rows"] else None
