"""Is the lent VM's host speed a property of the CPU the process runs on? The host probe (measure/host/probe.py)
pinned to each allowed CPU in turn, several sweeps, then a run of probes pinned to one CPU against the same number
unpinned. Usage: PYTHONPATH=src python3 research/scripts/gpu_cpu_pin.py --out pin.json [--sweeps 4] [--run 40]

Why: within one calibration pass the probe stepped between ~2.0, ~2.6 and ~3.1 ms and stayed at each level for
seconds (research/results/2026-11-30-h200-h, host_passes_5.json), the way a thread moved between CPUs of different speeds
would (a busy hyperthread sibling, another tenant's vCPU on the same core).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time

from gpuscope.measure.device.device import Device, pick_device
from gpuscope.measure.host.probe import host_probe


def _topology() -> str:
    try:
        return subprocess.run(["lscpu", "-e"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"lscpu failed: {exc}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sweeps", type=int, default=4)
    ap.add_argument("--run", type=int, default=40)
    ap.add_argument("--device", default=None)
    a = ap.parse_args()
    dev = Device(pick_device(a.device))
    allowed = sorted(os.sched_getaffinity(0))
    host_probe(dev)  # build and warm the probe model
    sweeps = []
    t0 = time.perf_counter()
    for _ in range(a.sweeps):
        row = {}
        for cpu in allowed:
            os.sched_setaffinity(0, {cpu})
            row[cpu] = host_probe(dev)
        sweeps.append(row)
    os.sched_setaffinity(0, set(allowed))
    per_cpu = {cpu: statistics.median(s[cpu] for s in sweeps) for cpu in allowed}
    best = min(per_cpu, key=per_cpu.get)
    worst = max(per_cpu, key=per_cpu.get)
    runs = {"pinned_best": [], "unpinned": [], "pinned_worst": []}
    for _ in range(a.run):  # interleaved, so that all three see the same minutes
        for name, cpus in (("pinned_best", {best}), ("unpinned", set(allowed)), ("pinned_worst", {worst})):
            os.sched_setaffinity(0, cpus)
            runs[name].append((time.perf_counter() - t0, host_probe(dev)))
    os.sched_setaffinity(0, set(allowed))

    def spread(xs):
        xs = sorted(xs)
        return (xs[int(0.9 * (len(xs) - 1))] - xs[int(0.1 * (len(xs) - 1))]) / statistics.median(xs)

    summary = {name: {"median_ms": statistics.median(v for _, v in r) * 1e3,
                      "p10_p90_spread": spread([v for _, v in r])} for name, r in runs.items()}
    out = {"device": dev.device_name(), "platform": platform.platform(), "cpus": allowed, "lscpu": _topology(),
           "sweeps_s": [{str(k): v for k, v in s.items()} for s in sweeps],
           "per_cpu_median_ms": {str(k): v * 1e3 for k, v in per_cpu.items()}, "best": best, "worst": worst,
           "runs": runs, "summary": summary}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({"per_cpu_median_ms": {k: round(v, 2) for k, v in out["per_cpu_median_ms"].items()},
                      "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
