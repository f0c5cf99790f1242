"""What a bench result says: its one-line headline, and the planner's estimate beside it (rows and their table).
Shared by `gpuscope bench` (micro, infer, train, all), the distributed benches and `gpuscope results`."""

from __future__ import annotations

from gpuscope.errors import UserError


# E2E repeats spread beyond this fraction of their median: the headline says the run is noisy (on the lent H200's
# VM host an eager Llama-3.1-8B p2048 run read 1.58 / 2.32 / 2.78 s, research/results/2026-11-30-h200)
NOISY_SPREAD = 0.2
MANY_REPEATS = 20  # from this many E2E repeats the spread (max - min) is the host's tails, not the median's doubt


def headline(r: dict) -> str:
    st = r.get("status")
    if st != "ok":
        return f"{st} {r.get('reason') or r.get('error') or r.get('phase') or ''}".strip()
    if r.get("kind") == "micro":
        if r.get("bench") == "matmul":
            m, n, k = r["best_shape"]
            fast = (f"; mean {r['tflops_best_mean']:.4g}, fastest iteration {r['tflops_best_iteration']:.4g}"
                    if r.get("tflops_best_iteration") and r.get("tflops_best_mean") else "")
            ach = ""
            if r.get("tflops_achievable"):
                am, an, ak = r["achievable_shape"]
                clk = r.get("achievable_sm_clock_mhz_min")
                ach = (f"; achievable {r['tflops_achievable']:.4g} at {am}x{an}x{ak} (mamf-finder's MAMF: median of "
                       f"the 5 fastest burst iterations{f', SM clock >= {clk:.0f} MHz' if clk else ''})")
            return (f"{r['tflops']:.4g} {r.get('unit', 'TFLOPS')} sustained (best median of {len(r['shapes'])} "
                    f"shapes, at {m}x{n}x{k}{fast}){ach}")
        return f"{r['gbs']:.4g} GB/s (median of {r['iters']}, spread {r.get('rel_iqr') or 0:.1%})"
    joules = f", {r['j_per_token']:.3g} J/token" if r.get("j_per_token") else ""
    if r.get("kind") == "infer":
        if r.get("tpot_s") is None:  # one generated token (no decode step), or decode below the noise
            why = f"; tpot unresolved: {r['tpot_unresolved']}" if r.get("tpot_unresolved") else ""
            return f"ttft {r['ttft_s'] * 1e3:.2f} ms{joules}{why}"
        gbs = f", weights read at {r['decode_weights_gbs']:.0f} GB/s" if r.get("decode_weights_gbs") else ""
        if (r.get("moe_routing") or {}).get("imbalance_median"):
            gbs += f"; busiest expert {r['moe_routing']['imbalance_median']:.2f}x the mean rows (median layer)"
        spread, n = r.get("e2e_spread"), r.get("e2e_repeats") or r.get("repeats") or 0
        fix = (f"the median of {n} is kept" if n >= MANY_REPEATS else "more --repeats or --min-time, a quiet host")
        noisy = (f"; noisy: E2E repeats spread {spread:.0%} of their median ({fix})"
                 if spread is not None and spread > NOISY_SPREAD else "")
        stolen = _stolen(r.get("host_load_generate")) + _host_moved(r, "host_probe")
        return (f"ttft {r['ttft_s'] * 1e3:.2f} ms, tpot {r['tpot_s'] * 1e3:.2f} ms, "
                f"{r['decode_tokens_per_s']:.1f} tok/s decode{gbs}{joules}{noisy}{stolen}")
    if r.get("kind") == "train":
        return (f"step {r['step_s'] * 1e3:.2f} ms, {r['tokens_per_s']:.0f} tok/s{joules}"
                f"{_stolen(r.get('host_load_steps'))}{_host_moved(r, 'host_probe_train')}")
    if (r.get("host") or {}).get("host_launch_s"):  # a calibration's host fits (cli/calibrate.store_host_fits)
        h, d = r["host"], r["host"].get("host_detail") or {}
        return (f"host {h['host_launch_s'] * 1e6:.1f} us a kernel at a {h.get('host_probe_s', 0) * 1e3:.2f} ms "
                f"probe; {d.get('valid_passes')} passes spread {d.get('launch_spread', 0):.0%} "
                f"({d.get('launch_spread_at_probe', 0):.0%} each at its probe)")
    return "ok"


# The host probes before and after a timed phase differ by more than this fraction of their mean: the headline says
# the host's speed moved. Probes ~0.1 s apart on the lent H200 VM differed by 3-4% at the median and 24-33% at the
# 90th percentile (research/results/2026-11-30-h200-g/probe_track*.json), so this flags the worst tenth of moments.
HOST_MOVED = 0.25


def _host_moved(r: dict, key: str) -> str:
    a, b = r.get(f"{key}_before_s"), r.get(f"{key}_after_s")
    if not a or not b:
        return ""
    moved = abs(b - a) / ((a + b) / 2)
    return (f"; the host's speed moved {moved:.0%} during the run (host probe {'slower' if b > a else 'faster'} "
            "after than before: host-bound timings are uncertain by about that much)" if moved > HOST_MOVED else "")


STEAL_NOTE = 0.02  # a hypervisor taking more of the CPUs than this during a timed phase is said in the headline


def _stolen(load: dict | None) -> str:
    steal = (load or {}).get("steal_fraction")
    return (f"; the hypervisor took {steal:.0%} of the CPUs' time meanwhile (host-bound timings read slow)"
            if steal is not None and steal > STEAL_NOTE else "")


def hardware_for_estimate(gpu: str | None, device_name: str | None):
    """(hardware, None) to plan a measurement on: ``gpu`` (a catalog name or TOML) if given, else the catalog entry
    of the device that ran it; (None, why) for a device the catalog does not know. Used by estimate_beside and by
    bench all's fit of its GPU set (cli/bench_run.fit_to_device)."""
    from gpuscope.specs.hardware import catalog_key_for_device as catalog_key_for
    from gpuscope.specs.hardware import load_hardware

    if gpu:
        return load_hardware(gpu), None
    key = catalog_key_for(device_name or "")
    if key is None:
        return None, (f"device '{device_name}' is not in the hardware catalog; pass --gpu NAME or a calibrated TOML "
                      "(gpuscope hardware calibrate --out my.toml)")
    return load_hardware(key), None


def estimate_beside(rec: dict, gpu: str | None) -> dict:
    """{"hardware", "calibrated", "rows": [{metric, estimated, measured, error}]} or {"unavailable": why}; training
    records also get MFU (and a train-dist run with its baseline, the scaling efficiency): compare_record."""
    from gpuscope.explain.compare import at_host_speed, compare_record, host_scale

    res = rec.get("result") or {}
    if res.get("status") != "ok":
        return {"unavailable": f"the measurement's status is {res.get('status')}"}
    try:
        hw, why = hardware_for_estimate(gpu, res.get("device_name"))
        if hw is None:
            return {"unavailable": why}
        rows = compare_record(rec, hw, derived=True)
        # the same calibration at the host speed this run met (host probes of the calibration and of the run)
        # a training step follows the training probe (forward + backward), not the forward-only one
        train = str((rec.get("case") or {}).get("kind", "")).startswith("train")
        scale = host_scale(res, hw, "host_probe_train_s" if train else "host_probe_s")
        at_run = compare_record(rec, at_host_speed(hw, scale), derived=True) if scale else None
        ttft_scale = None if train else host_scale(res, hw, "host_probe_ttft_s")  # TTFT repeats: their own probes
        at_ttft = compare_record(rec, at_host_speed(hw, ttft_scale), derived=True) if ttft_scale else at_run
    except UserError as e:
        return {"unavailable": str(e)}
    out = []
    for i, r in enumerate(rows):
        ok = isinstance(r.measured, (int, float)) and r.measured > 0
        row = {"metric": r.metric, "estimated": r.estimated, "measured": r.measured, "error": r.error if ok else None}
        if at_run:
            a = (at_ttft if r.metric == "prefill_s" else at_run)[i]
            row["estimated_at_run_host"] = a.estimated
            row["error_at_run_host"] = a.error if ok else None
        out.append(row)
    return {"hardware": hw.key, "calibrated": hw.is_calibrated, "host_scale": scale, "host_scale_ttft": ttft_scale,
            "rows": out}


def _fmt(metric: str, v) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    if metric in ("mfu", "scaling_efficiency"):
        return f"{v:.1%}"
    if metric.endswith("bytes"):
        return f"{v / 2**30:.3f} GiB" if v >= 2**26 else f"{v / 2**20:.2f} MiB"
    return f"{v * 1e3:.3f} ms"


def estimate_table(name: str, est: dict):
    from rich.table import Table

    t = Table(title=f"{name}: estimate on {est['hardware']}{' (calibrated)' if est['calibrated'] else ''} vs measured")
    scale = est.get("host_scale")
    cols = ["metric", "estimated", "measured", "error"]
    if scale:  # the host probe says the run met a host this much slower/faster than the calibration's
        cols.append(f"error, host x{scale:.2f}")
    for col in cols:
        t.add_column(col, justify="left" if col == "metric" else "right")
    for r in est["rows"]:
        cells = [r["metric"], _fmt(r["metric"], r["estimated"]), _fmt(r["metric"], r["measured"]), _pct(r["error"])]
        if scale:
            cells.append(_pct(r.get("error_at_run_host")))
        t.add_row(*cells)
    return t


def _pct(e) -> str:
    return "-" if e is None else f"{e:+.1%}"


TIME_METRICS = ("prefill_s", "decode_s_per_token", "step_s")
TIME_TOLERANCE, MEMORY_TOLERANCE = 0.15, 0.05  # issue 3's bar for calibrated estimates


def accuracy_summary(measurements: list[dict]) -> dict | None:
    """How many estimate rows of a bench run land within 15% (time) and 5% (peak memory) of their measurement,
    plainly and (where the run and the calibration both carry host probes) at the host speed the run met; the
    worst row of each. None when no measurement had an estimate."""
    out = {"time_rows": 0, "time_within": 0, "memory_rows": 0, "memory_within": 0, "time_rows_at_run_host": 0,
           "time_within_at_run_host": 0, "worst_time": None, "worst_time_at_run_host": None}
    for m in measurements:
        for r in (m.get("estimate") or {}).get("rows", []):
            if r.get("error") is None:
                continue
            name = f"{m.get('name')} {r['metric']}"
            if r["metric"] == "peak_bytes":
                out["memory_rows"] += 1
                out["memory_within"] += abs(r["error"]) <= MEMORY_TOLERANCE
            elif r["metric"] in TIME_METRICS:
                out["time_rows"] += 1
                out["time_within"] += abs(r["error"]) <= TIME_TOLERANCE
                if out["worst_time"] is None or abs(r["error"]) > abs(out["worst_time"][1]):
                    out["worst_time"] = [name, r["error"]]
                e = r.get("error_at_run_host")
                if e is not None:
                    out["time_rows_at_run_host"] += 1
                    out["time_within_at_run_host"] += abs(e) <= TIME_TOLERANCE
                    if out["worst_time_at_run_host"] is None or abs(e) > abs(out["worst_time_at_run_host"][1]):
                        out["worst_time_at_run_host"] = [name, e]
    return out if out["time_rows"] or out["memory_rows"] else None


def accuracy_line(a: dict) -> str:
    """accuracy_summary in one sentence."""
    line = f"estimates: {a['time_within']} of {a['time_rows']} time rows within {TIME_TOLERANCE:.0%}"
    if a["memory_rows"]:  # none where the device reports no memory (the CPU)
        line += f", {a['memory_within']} of {a['memory_rows']} memory rows within {MEMORY_TOLERANCE:.0%}"
    if a["worst_time"]:
        line += f"; worst {a['worst_time'][0]} {a['worst_time'][1]:+.1%}"
    if a["time_rows_at_run_host"]:
        line += (f"; at the host speed each run met: {a['time_within_at_run_host']} of {a['time_rows_at_run_host']}"
                 f" (worst {a['worst_time_at_run_host'][0]} {a['worst_time_at_run_host'][1]:+.1%})")
    return line
