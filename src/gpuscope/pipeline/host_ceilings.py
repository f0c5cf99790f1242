"""A CPU's own ceilings, for the estimate beside a workload that ran on it: the hardware catalog holds
accelerators only, so a CPU run is planned on this host's measured rates instead.

- What: the quick micro set's matmul rate per dtype (fp32 and bf16, the dtypes a CPU run takes) and its copy
  bandwidth (read + write bytes), written by measure/micro/calibrate.calibration_toml as a full hardware entry
  whose peaks ARE the measured rates (efficiency 1.0), and what eager PyTorch costs per op here
  (measure/host/cpu_costs.py: the cost per kernel and per forward as host_launch_s / host_forward_s, generate's as
  host_step_s / host_setup_s, the GEMM rate by rows and the elementwise bandwidths under ``[measured.cpu]``), which
  the planner's CPU model prices a CPU run with (estimate/cpu.py). 10-25 s on a 2-core host. A file kept before
  the per-op costs were is measured again by the next run.
- Where: the gpuscope home (specs/calibration.data_dir), ``calibrated/host-<hostname>-<cpu>.toml``: one file per
  host, since two hosts report the same CPU name (``x86_64``) with different rates. A CPU calibration saved by
  `gpuscope hardware calibrate --save` on this host (``calibrated/<cpu>.toml``) is used where there is no such file.
- When: measured once, by the first bench run on the CPU that finds none (or refreshed by `bench all`, which
  measures the micro set anyway), then reused by every later estimate of a CPU run of that host: bench's and
  `results compare`'s. The estimate says so: "on this host's measured ceilings (<file>), measured <when> by <what>".
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

CPU_DTYPES = ("fp32", "bf16")
_WHEN = re.compile(r"^# gpuscope hardware file written by .* at (\S+?)\.?$", re.M)
_BY = re.compile(r"Measured by (.+?) for the estimates", re.M)


def path_for(hostname: str, device_name: str) -> Path:
    from gpuscope.specs.calibration import calibrated_path

    return calibrated_path(f"host-{hostname}-{device_name}")


def _paths(hostname: str | None, device_name: str | None) -> list[Path]:
    from gpuscope.specs.calibration import calibrated_path

    here = socket.gethostname()
    host = hostname or here
    out = [path_for(host, device_name or "cpu")]
    if host == here and device_name:  # `hardware calibrate --save` of this host's CPU (one file per device name)
        out.append(calibrated_path(device_name))
    return out


def source_line(path: Path) -> str:
    """'this host's measured ceilings (<file>), measured <when> by <what>' from the file's own header."""
    text = path.read_text()
    when, by = _WHEN.search(text), _BY.search(text)
    return (f"this host's measured ceilings ({path}), measured {when.group(1) if when else 'at an unknown time'} by "
            f"{by.group(1) if by else '`gpuscope hardware calibrate`'}")


def lookup(hostname: str | None, device_name: str | None):
    """(HardwareSpec, source line) of the ceilings kept for a CPU run of ``hostname``, or None."""
    from gpuscope.errors import UserError
    from gpuscope.specs.hardware import load_hardware

    for p in _paths(hostname, device_name):
        if p.is_file():
            try:
                return load_hardware(str(p)), source_line(p)
            except UserError:  # a file broken by hand: measured again by the next bench run
                continue
    return None


def missing_why(device_name: str | None) -> str:
    return (f"no ceilings measured for this host's CPU ('{device_name}') yet, and the hardware catalog holds "
            "accelerators only; the next `gpuscope bench` run on this host measures them once (seconds), or pass "
            "--gpu NAME")


# [measured] keys of the CPU's per-op costs (measure/host/cpu_costs.py) that the engine model reads as it reads a GPU
# host's (estimate/engines.engine_for); the rest of them go under [measured.cpu] (estimate/cpu.py)
HOST_KEYS = {"op_s": "host_launch_s", "forward_s": "host_forward_s", "step_s": "host_step_s",
             "setup_s": "host_setup_s"}
CPU_KEYS = ("gpt2_op_s", "gpt2_forward_s", "gemm_rows", "gemm_tflops", "gemm_calls", "gemm_weight",
            "elementwise_cache_gbs", "elementwise_dram_gbs", "first_touch_gbs", "stream_bytes", "tiny_layers",
            "tiny_decode_forward_s", "gpt2_tiny_decode_forward_s", "rounds", "threads", "measure_s")


def cpu_table(costs: dict) -> str:
    """The ``[measured.cpu]`` table of measure/host/cpu_costs.cpu_costs' results (numbers and lists of them)."""
    def val(v) -> str:
        return "[" + ", ".join(val(x) for x in v) + "]" if isinstance(v, list) else repr(v)

    return "\n[measured.cpu]\n" + "".join(f"{k} = {val(costs[k])}\n" for k in CPU_KEYS if k in costs)


def save(device: str | None, by: str, results: list[dict] | None = None) -> Path:
    """Write this host's CPU ceilings from ``results`` (micro results of a run), or measured now (the quick
    matmul set in CPU_DTYPES and the memory copy), with its per-op costs measured now (measure/host/cpu_costs.py);
    the file's path."""
    from gpuscope.measure.host.cpu_costs import cpu_costs
    from gpuscope.measure.micro.bench import Runner, ceilings, micro_configs
    from gpuscope.measure.micro.calibrate import calibration_toml
    from gpuscope.pipeline.micro import open_device

    dev = open_device(device)
    if results is None:
        runner = Runner(dev)
        results = [runner.run(c) for c in micro_configs(dev, "quick", list(CPU_DTYPES), ("matmul", "memory"))]
    costs = cpu_costs()
    measured = ceilings(results) | {key: costs[k] for k, key in HOST_KEYS.items()}
    text = calibration_toml(dev.device_name(), dev.type, measured, None,
                            f"Measured by {by} for the estimates beside this host's CPU runs.") + cpu_table(costs)
    path = path_for(socket.gethostname(), dev.device_name())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _on_cpu(cases: list[dict]) -> bool:
    from gpuscope.pipeline.micro import open_device

    # no device: the one the case's process will pick (torch imported here only then)
    return any(str(c["device"]).split(":")[0] == "cpu" if c.get("device") else open_device(None).type == "cpu"
               for c in cases)


def ensure(s, cases: list[dict], gpu: str | None, results: list[dict] | None = None) -> None:
    """Before a bench session's CPU workloads are planned (no ``gpu``): this host's ceilings kept, else measured
    now (or taken from ``results``, the run's own micro set) and kept; said on the session once either way
    (``s.host_ceilings``: the source line). A home that cannot be written is said, and the estimates say why
    they are missing."""
    from gpuscope.errors import UserError
    from gpuscope.estimate.cpu import cpu_costs
    from gpuscope.pipeline.micro import open_device

    if gpu or s.host_ceilings or not _on_cpu(cases):
        return
    name = open_device("cpu").device_name()
    found = lookup(socket.gethostname(), name) if results is None else None
    if found is not None and cpu_costs(found[0]) is None:  # kept before the per-op costs were: measured again
        found = None
    if found is None:
        if results is None:
            s.note("measuring this host's ceilings once (matmul fp32 and bf16, copy bandwidth, the cost of an op and "
                   "of small GEMMs; seconds): the catalog holds accelerators only, and the estimates beside CPU runs "
                   "are planned on them")
        try:
            save("cpu", f"`{s.command}` (run {s.run_id})", results)
        except OSError as exc:
            s.warn(f"this host's ceilings cannot be kept ({exc}); the CPU runs are shown without an estimate")
            return
        except UserError as exc:  # the run's micro set measured no matmul rate or copy (filtered, failed)
            s.note(f"no host ceilings from this run ({exc}); kept ones, if any, are used")
            found = lookup(socket.gethostname(), name)
            s.host_ceilings = found[1] if found else None
            return
        found = lookup(socket.gethostname(), name)
    if found is not None:
        s.host_ceilings = found[1]
        s.note(f"CPU workloads planned on {found[1]}")
