"""Render an Estimate as a rich table (text) or JSON. Computes nothing new."""

from __future__ import annotations

import json

from gpuscope.estimate.result import Estimate

GIB = 2**30


def _gib(x: float) -> str:
    return f"{x / GIB:,.2f} GiB"


def _ms(x: float) -> str:
    return f"{x * 1e3:,.2f} ms" if x < 10 else f"{x:,.2f} s"


def to_json_text(est: Estimate) -> str:
    return json.dumps(est.to_json(), indent=2, default=float)


def _overhead_label(key: str, hardware: str) -> str:
    """'+ CUDA context' / '+ HIP runtime context' ... for the runtime context (estimate/platform.py), else the key."""
    if key != "runtime_context":
        return f"+ {key.replace('_', ' ')}"
    from gpuscope.errors import UserError
    from gpuscope.estimate.platform import OTHER, platform_for
    from gpuscope.specs.hardware import load_hardware

    try:
        platform = platform_for(load_hardware(hardware))
    except (UserError, OSError):
        platform = OTHER
    return f"+ {platform.context}"


def _scaling(eff: float) -> str:
    """Scaling efficiency as a share (one GPU's step for the same per-GPU work / this step), at most 100%: a
    faster step than one GPU's is said with its reason instead of as a share above 100%."""
    if eff <= 1.0:
        return f"{eff:.1%}"
    return (f"100% (capped: the step is {eff - 1:.1%} faster than one GPU's with the same per-GPU work; each GPU "
            "steps the optimizer over its shard of the states only)")


def render(est: Estimate, console, show_ops: bool = False) -> None:
    from rich.table import Table

    title = f"{est.kind}: {est.model} on {est.hardware}" + (" (calibrated)" if est.calibrated else "")
    mem = Table(title=title, show_header=True, header_style="bold")
    mem.add_column("memory at the peak (per GPU)")
    mem.add_column("bytes", justify="right")
    for k, v in est.breakdown_bytes.items():
        if v:
            mem.add_row(k.replace("_", " "), _gib(v))
    mem.add_row("[bold]peak allocated[/]", f"[bold]{_gib(est.peak_bytes_per_gpu)}[/]")
    for k, v in est.runtime_overhead_bytes.items():
        mem.add_row(_overhead_label(k, est.hardware), _gib(v))
    mem.add_row("[bold]required / device[/]", f"[bold]{_gib(est.required_bytes)} / {_gib(est.device_total_bytes)}[/]")
    phases = ", ".join(f"{k} {_gib(v)}" for k, v in est.phases_bytes.items())
    mem.caption = f"phase peaks: {phases}"
    console.print(mem)

    perf = Table(show_header=True, header_style="bold")
    perf.add_column("speed")
    perf.add_column("value", justify="right")
    if est.kind == "infer":
        perf.add_row("time to first token (prefill)", _ms(est.time["prefill_s"]))
        perf.add_row("decode per token (TPOT)", _ms(est.time["decode_s_per_token"]))
        perf.add_row("  of which GPU / host", f"{_ms(est.time['decode_gpu_s'])} / {_ms(est.time['decode_host_s'])}")
        perf.add_row("decode throughput", f"{est.throughput['decode_tokens_per_s']:,.1f} tok/s")
        perf.add_row("end to end", _ms(est.time["e2e_s"]))
    else:
        perf.add_row("step", _ms(est.time["step_s"]))
        for k, v in est.time.items():  # the parts this plan has (one GPU: phases; many: pipeline and comms)
            if k != "step_s" and v:
                perf.add_row(f"  {k.removesuffix('_s').replace('_', ' ')}", _ms(v))
        perf.add_row("tokens/s (all GPUs)", f"{est.throughput['tokens_per_s']:,.0f}")
        if est.throughput.get("scaling_efficiency"):
            perf.add_row("scaling vs one GPU", _scaling(est.throughput["scaling_efficiency"]))
        perf.add_row("MFU / HFU", f"{est.mfu:.1%} / {est.hfu:.1%}" if est.hfu is not None else f"{est.mfu:.1%}")
    for k, v in est.limits.items():
        perf.add_row(k.replace("_", " ") + " that fits", "none" if v is None else f"{v:,}")
    console.print(perf)
    if show_ops and est.ops:
        ops = Table(title="per operation", header_style="bold")
        for c in ("phase", "op", "x", "time", "bound", "GFLOP", "GB"):
            ops.add_column(c, justify="right" if c not in ("phase", "op", "bound") else "left")
        for o in est.ops:
            ops.add_row(o["phase"], o["name"], str(o["count"]), _ms(o["gpu_s"]), o["bound"],
                        f"{o['flops'] / 1e9:,.1f}", f"{o['bytes'] / 1e9:,.3f}")
        console.print(ops)
    for a in est.assumptions:
        console.print(f"[dim]- {a}[/]")
    style = "green" if est.fits else "red"
    console.print(f"[bold {style}]{est.verdict}[/]")
    for s in est.suggestions:
        console.print(f"  -> {s}")
