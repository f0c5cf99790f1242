"""A calibration's host speed beside this machine's earlier ones (the results store's ``host`` rows).

Why: on a shared VM the host's speed moves by 1.5x between minutes and stays at one level for seconds to minutes
(research/results/2026-11-30-h200-h, section 2). A calibration is a snapshot of it: one that met a slow stretch
plans every host-bound workload long while the host is back at its usual speed. On an H200 machine
(research/results/2026-11-30-h200-i, section 3) three calibrations read a forward probe of 2.85-3.14 ms where the
others read 2.03-2.18 ms; the runs planned on them landed 5 of 17 time rows within 15%, the others 15 of 18. The
earlier calibrations of the same machine say which speed is its usual one.
"""

from __future__ import annotations

import statistics

HISTORY_WARN = 0.25  # a probe further than this from the earlier calibrations' median is said
MIN_HISTORY = 3  # fewer earlier calibrations than this say nothing about the usual speed


def host_history(rows: list[dict], device_name: str | None, hostname: str | None, probe_s: float | None) -> dict | None:
    """This calibration's forward host probe (measure/host/probe.host_probe) beside the median of the earlier ok
    calibrations of the same host and device in ``rows`` (the store's ``host`` rows); None without a probe or with
    fewer than MIN_HISTORY earlier ones."""
    earlier = [float(r["result"]["host"]["host_probe_s"]) for r in rows
               if r.get("status") == "ok" and r.get("hostname") == hostname and r.get("device_name") == device_name
               and ((r.get("result") or {}).get("host") or {}).get("host_probe_s")]
    if not probe_s or len(earlier) < MIN_HISTORY:
        return None
    median = statistics.median(earlier)
    return {"calibrations": len(earlier), "median_probe_s": median, "probe_s": float(probe_s),
            "ratio": float(probe_s) / median}


def history_line(h: dict | None) -> str | None:
    """The sentence for stderr when this calibration's host read further than HISTORY_WARN from its usual speed."""
    if not h or abs(h["ratio"] - 1.0) <= HISTORY_WARN:
        return None
    slower = h["ratio"] > 1.0
    return (f"host: this calibration's probe read {h['probe_s'] * 1e3:.2f} ms, {abs(h['ratio'] - 1):.0%} "
            f"{'slower' if slower else 'faster'} than the median of this machine's {h['calibrations']} earlier "
            f"calibrations ({h['median_probe_s'] * 1e3:.2f} ms): host-bound estimates planned on it will read "
            f"{'long' if slower else 'short'} while the host runs at that usual speed; calibrate again")
