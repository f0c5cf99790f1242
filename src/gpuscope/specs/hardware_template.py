"""`gpuscope hardware template NAME`: an editable hardware TOML, and typical host-link rates."""

from __future__ import annotations

from gpuscope.specs.hardware import DTYPES, GIB, load_hardware


def template_toml(arg: str) -> str:
    """An editable TOML for `gpuscope hardware template NAME`: base = key plus a commented [measured] table."""
    spec = load_hardware(arg)
    base = spec.key if spec.origin == "catalog" else None
    lines = [
        f"# gpuscope hardware file for {spec.name}.",
        "# Use it with `--gpu path/to/this.toml`. Any catalog field may be overridden here, e.g.",
        f"# memory_bw_gbs = {spec.memory_bw_gbs:g} or matmul_efficiency = {spec.matmul_efficiency:g}.",
        "# Datasheet peaks are DENSE (no 2:4 sparsity), in TFLOPS (TOPS for int8/int4).",
    ]
    if base:
        lines += [f'base = "{base}"', f'name = "{spec.name} (my machine)"']
    else:
        lines += [f'name = "{spec.name}"', f'vendor = "{spec.vendor}"', f"memory_gb = {spec.memory_bytes / GIB:g}",
                  f"memory_bw_gbs = {spec.memory_bw_gbs:g}"]
        lines += [f"{d}_tflops_dense = {v:g}" for d, v in spec.peak_tflops.items()]
        if spec.sm_count:
            lines.append(f"sm_count = {spec.sm_count}  # multiprocessors, for the planner's GEMM wave quantization")
    lines += [
        "",
        "# Measured ceilings: uncomment and replace with your measurements (e.g. mamf-finder for matmul,",
        "# a device-to-device copy counting read + write bytes for memory). Where present, estimates use them",
        "# instead of datasheet peak x efficiency. The values below are the current defaults.",
        "#[measured]",
        f"#memory_bw_gbs = {spec.achievable_bw_gbs():.1f}",
        f"#h2d_gbs = {typical_h2d_gbs(spec.host_interface):.1f}      # typical for {spec.host_interface}",
        "#[measured.matmul_tflops]",
    ]
    lines += [f"#{d} = {spec.achievable_tflops(d):.1f}" for d in DTYPES if d in spec.peak_tflops]
    return "\n".join(lines) + "\n"


def typical_h2d_gbs(host_interface: str) -> float:
    """Rough pinned host-to-device copy rate for a PCIe generation (Gen5 x16 ~55 GB/s measured publicly)."""
    h = host_interface.lower().replace(" ", "")
    for gen, gbs in (("gen5", 55.0), ("5.0", 55.0), ("gen4", 25.0), ("4.0", 25.0), ("gen3", 12.0), ("3.0", 12.0)):
        if gen in h:
            return gbs
    return 25.0
