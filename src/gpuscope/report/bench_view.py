"""Views of bench results (rich tables and one-line sentences; rich imported only when a table is made): the
planner's estimate beside a measurement, the accuracy of a run, a collectives sweep, a distributed training step
and a compression comparison. Computes nothing new: pipeline/ and workloads/ hold the figures."""

from __future__ import annotations

from gpuscope.pipeline.accuracy import MEMORY_TOLERANCE, TIME_TOLERANCE


def _fmt(metric: str, v) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    if metric in ("mfu", "scaling_efficiency"):
        return f"{v:.1%}"
    if metric.endswith("bytes"):
        return f"{v / 2**30:.3f} GiB" if v >= 2**26 else f"{v / 2**20:.2f} MiB"
    if metric.endswith("_per_s"):  # a rate (serving throughput: output tokens per second)
        return f"{v:,.1f}/s"
    return f"{v * 1e3:.3f} ms"


def _pct(e) -> str:
    return "-" if e is None else f"{e:+.1%}"


def estimate_table(name: str, est: dict):
    """pipeline/estimate.estimate_beside's rows as a table (with the host-speed column where it has one)."""
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
    if est.get("hardware_source"):  # a CPU run: planned on this host's measured ceilings (pipeline/host_ceilings)
        t.caption = f"estimate on {est['hardware_source']}"
    return t


def accuracy_line(a: dict) -> str:
    """pipeline/accuracy.bench_summary in one sentence (the target: memory within 5%, time within 15%)."""
    line = f"estimates: {a['time_within']} of {a['time_rows']} time rows within {TIME_TOLERANCE:.0%}"
    if a["memory_rows"]:  # none where the device reports no memory (the CPU)
        line += f", {a['memory_within']} of {a['memory_rows']} memory rows within {MEMORY_TOLERANCE:.0%}"
    if a["worst_time"]:
        line += f"; worst {a['worst_time'][0]} {a['worst_time'][1]:+.1%}"
    if a["time_rows_at_run_host"]:
        line += (f"; at the host speed each run met: {a['time_within_at_run_host']} of {a['time_rows_at_run_host']}"
                 f" (worst {a['worst_time_at_run_host'][0]} {a['worst_time_at_run_host'][1]:+.1%})")
    return line


def accuracy_lines(summary: dict[str, dict]) -> list[str]:
    """pipeline/accuracy.by_metric, one line per metric."""
    return [f"{k}: {v['within']}/{v['of']} within {v['band']:.0%}" for k, v in summary.items()]


def fmt_time(s) -> str:
    if not isinstance(s, (int, float)):
        return "-"
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.3f} ms"


def fmt_gbs(v) -> str:
    return "-" if not isinstance(v, (int, float)) else (f"{v:.4g}" if v >= 1e-3 else f"{v:.2e}")


def collectives_table(rows: list[dict]):
    from rich.table import Table

    first = rows[0] if rows else {}
    env = first.get("env") or {}
    t = Table(title=(f"collectives: {first.get('backend', '?')} {first.get('world_size', '?')} ranks "
                     f"({first.get('nnodes', '?')}x{first.get('nproc_per_node', '?')}), {first.get('dtype', '?')}, "
                     f"NCCL {env.get('nccl_version') or '-'}; GB/s decimal"))
    for col in ("op", "size", "time", "algbw", "busbw", "pred busbw", "error", "check"):
        t.add_column(col, justify="left" if col in ("op", "check") else "right")
    for r in rows:
        err = r.get("error")
        t.add_row(r["op"], r["size"], fmt_time(r.get("time_s")), fmt_gbs(r.get("algbw_gbs")),
                  fmt_gbs(r.get("busbw_gbs")), fmt_gbs(r.get("predicted_busbw_gbs")),
                  "-" if err is None else f"{err:+.1%}", "ok" if r.get("correct") else "WRONG")
    return t


def _mib(v) -> str:
    return f"{v / 2**20:.1f}" if isinstance(v, (int, float)) else "-"


def _ms(v) -> str:
    return f"{v * 1e3:.2f}" if isinstance(v, (int, float)) else "-"


def train_table(name: str, r: dict):
    from rich.table import Table

    t = Table(title=f"{name}: {r.get('strategy')} on {r.get('world_size')} x {r.get('device_name')}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    b = r.get("baseline") or {}
    rows = [
        ("step (ms, slowest rank)", _ms(r.get("step_s"))),
        ("step per rank (ms)", ", ".join(_ms(x) for x in r.get("rank_step_s") or [])),
        ("tokens/s (all ranks)", f"{r['tokens_per_s']:.0f}" if r.get("tokens_per_s") else "-"),
        ("tokens/s per GPU", f"{r['tokens_per_s_per_gpu']:.0f}" if r.get("tokens_per_s_per_gpu") else "-"),
        ("baseline step, 1 GPU (ms)", _ms(b.get("step_s")) if b else "not run (--baseline)"),
        ("scaling efficiency", f"{r['scaling_efficiency']:.1%}" if r.get("scaling_efficiency") else "-"),
        ("peak forward (MiB, max rank)", _mib(r.get("peak_forward_bytes"))),
        ("peak backward (MiB, max rank)", _mib(r.get("peak_backward_bytes"))),
        ("peak optimizer (MiB, max rank)", _mib(r.get("peak_optimizer_bytes"))),
        ("peak timed steps (MiB, max rank)", _mib(r.get("peak_bytes"))),
        ("optimizer state per rank (MiB)", _mib(r.get("optimizer_state_bytes"))),
    ]
    for k, v in rows:
        t.add_row(k, v)
    return t


def compression_table(name: str, r: dict):
    from rich.table import Table

    t = Table(title=f"{name}: DDP comm hooks on {r.get('world_size')} x {r.get('device_name')}, "
                    f"{r.get('steps')} steps (reference: no hook)")
    for c in ("hook", "step ms", "bytes/step", "ratio", "loss final", "|dev| final", "|dev| max"):
        t.add_column(c, justify="left" if c == "hook" else "right")
    ref = r["reference"]
    t.add_row("reference", _ms(ref.get("step_s")), f"{ref.get('bytes_per_step') or 0:,}", "1.0",
              f"{ref['losses'][-1]:.4f}", "-", "-")
    for v in r["variants"]:
        ratio = f"{v['compression_ratio']:.1f}" if v.get("compression_ratio") else "-"
        t.add_row(v["hook"], _ms(v.get("step_s")), f"{v.get('bytes_per_step') or 0:,}", ratio,
                  f"{v['loss_final']:.4f}", f"{v['loss_dev_final']:.2e}", f"{v['loss_dev_max']:.2e}")
    return t
