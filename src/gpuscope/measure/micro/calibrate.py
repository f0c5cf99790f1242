"""Calibration: measure this device's ceilings and write them as a hardware TOML the planner reads.

- ``calibration_toml(...)``: ``base = "<catalog key>"`` plus a ``[measured]`` table where the device is in the
  catalog; otherwise a full custom entry whose dense peaks and bandwidth ARE the measured rates (efficiency 1.0),
  so that ``load_hardware`` accepts it and estimates use the measurements either way.
- ``[measured]``: ``matmul_tflops`` per dtype (best median over shapes), ``memory_bw_gbs`` (device copy counting
  read + write bytes), ``h2d_gbs`` / ``d2h_gbs`` (pinned). See ``gpuscope.measure.micro.bench``.
  The catalog entry of the device comes from ``specs.hardware.catalog_key_for_device`` (the one mapping).

Torch is imported only by ``calibrate()`` (through ``micro``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os

from gpuscope.errors import UserError
from gpuscope.specs.hardware import catalog_key_for_device


def _f(v: float) -> str:
    return repr(float(v))


def _s(v: str) -> str:
    return json.dumps(str(v))


def host_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def calibration_toml(device_name: str, device_type: str, measured: dict, total_memory_bytes: int | None = None,
                     note: str = "") -> str:
    """The hardware TOML for measured ceilings (see the module docstring)."""
    from gpuscope.specs.hardware import load_hardware

    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    mm = {d: v for d, v in (measured.get("matmul_tflops") or {}).items() if v and v > 0}
    key = catalog_key_for_device(device_name) if device_type != "cpu" else None
    lines = [f"# gpuscope hardware file written by `gpuscope hardware calibrate` at {when}.",
             f"# Device: {device_name} ({device_type}). {note}".rstrip(),
             "# Use it with `gpuscope plan ... --gpu THIS.toml`; the [measured] ceilings replace datasheet peak x "
             "efficiency."]
    if key:
        base = load_hardware(key)
        dropped = [d for d in mm if d not in base.peak_tflops]
        mm = {d: v for d, v in mm.items() if d in base.peak_tflops}
        lines += [f"base = {_s(key)}", f"name = {_s(base.name + ' (calibrated)')}"]
        if dropped:
            lines.append(f"# measured but not in the catalog entry's peaks (left out): {', '.join(dropped)}")
    else:
        if not mm or not measured.get("memory_bw_gbs"):
            raise UserError(f"device '{device_name}' is not in the hardware catalog and the calibration measured no "
                            "matmul rate or copy bandwidth to describe it with; run without --dtype filters.")
        mem = total_memory_bytes or host_memory_bytes() or 2**30
        lines += [f"name = {_s(device_name + ' (calibrated)')}", 'vendor = "unknown"',
                  f"memory_gb = {_f(mem / 2**30)}", f"memory_bw_gbs = {_f(measured['memory_bw_gbs'])}",
                  "matmul_efficiency = 1.0", "memory_bw_efficiency = 1.0"]
        for d, v in mm.items():
            lines.append(f"{d}_tops_dense = {_f(v)}" if d == "int8" else f"{d}_tflops_dense = {_f(v)}")
        src = ("not in the catalog: every peak and the bandwidth are the rates measured by gpuscope hardware "
               f"calibrate at {when}, not datasheet figures")
        lines += [f"source = {_s(src)}",
                  'efficiency_source = "1.0: the peaks are measured rates"']
    lines += ["", "[measured]"]
    from gpuscope.estimate.engines import TRAIN_HOST_KEYS

    for k in ("memory_bw_gbs", "h2d_gbs", "d2h_gbs", "host_launch_s", "host_prefill_launch_s", "host_forward_s",
              "host_step_s", "host_setup_s", *TRAIN_HOST_KEYS, "host_probe_s", "host_probe_train_s"):
        if isinstance(measured.get(k), (int, float)):  # a measured 0 (a fit's intercept at its floor) is a value
            lines.append(f"{k} = {_f(measured[k])}")
    if mm:
        lines += ["", "[measured.matmul_tflops]"] + [f"{d} = {_f(v)}" for d, v in mm.items()]
    return "\n".join(lines) + "\n"


def calibrate(dev_name: str | None = None, mode: str = "quick", dtypes=None, on_result=None) -> tuple[str, list[dict]]:
    """Run the micro set on a device and return (TOML text, results). ``on_result(config, result)`` per item."""
    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.micro.bench import Runner, ceilings, micro_configs

    dev = Device(pick_device(dev_name))
    runner = Runner(dev)
    results = []
    for c in micro_configs(dev, mode, dtypes):
        r = runner.run(c)
        results.append(r)
        if on_result:
            on_result(c, r)
    text = calibration_toml(dev.device_name(), dev.type, ceilings(results), dev.total_memory(), f"Mode: {mode}.")
    return text, results
