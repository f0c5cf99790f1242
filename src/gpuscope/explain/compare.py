"""Predicted vs measured: rebuild the planner's estimate for a measured case and set the two side by side.

A measurement record is one line of a results file written by ``gpuscope.measure.runner.suite`` (keys ``case``,
``result``, ``provenance``). The estimate is made for the same model, workload and device; with ``ceilings``
(measured matmul TFLOP/s and copy GB/s of that device) the hardware is calibrated first, as
``gpuscope plan --gpu calibrated.toml`` would do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from gpuscope import workloads
from gpuscope.errors import UserError
from gpuscope.specs.hardware import HardwareSpec, hardware_for_device, load_hardware


@dataclass(frozen=True)
class Row:
    case: str
    metric: str
    estimated: float
    measured: float

    @property
    def error(self) -> float:
        """(estimated - measured) / measured."""
        return (self.estimated - self.measured) / self.measured


def read_records(path: str | Path) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"results file '{p}' does not exist.")
    out = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                raise UserError(f"results file '{p}' line {n} is not JSON.") from None
    return out


def calibrated(hw: HardwareSpec, matmul_tflops: dict[str, float] | None, copy_gbs: float | None) -> HardwareSpec:
    measured = dict(hw.measured or {})
    if matmul_tflops:
        measured["matmul_tflops"] = dict(matmul_tflops)
    if copy_gbs:
        measured["memory_bw_gbs"] = copy_gbs
    return replace(hw, measured=measured)


# [measured] host costs in seconds: the ones a slower or faster host moves (the training host costs are in units
# of host_launch_s and move with it)
HOST_SECONDS = ("host_launch_s", "host_prefill_launch_s", "host_forward_s", "host_step_s", "host_setup_s")


# a run's probe -> the calibration's probe of the same kind (measure/host/probe.py)
PROBE_OF_CALIBRATION = {"host_probe_s": "host_probe_s", "host_probe_ttft_s": "host_probe_s",
                        "host_probe_train_s": "host_probe_train_s"}


def host_scale(res: dict, hw: HardwareSpec, key: str = "host_probe_s") -> float | None:
    """How much slower (> 1) or faster the host ran during a measurement than during the calibration the hardware
    TOML holds: the host probe around the run's timed phase (``key``: an infer run's ``host_probe_s`` around its
    E2E repeats or ``host_probe_ttft_s`` around its TTFT repeats, a train run's ``host_probe_train_s``;
    measure/host/probe.py) over the calibration's probe of the same kind. None where either is missing (a catalog
    entry, an older record)."""
    cal = (hw.measured or {}).get(PROBE_OF_CALIBRATION[key])
    run = res.get(key)
    if not cal or not run:
        return None
    return float(run) / float(cal)


def at_host_speed(hw: HardwareSpec, scale: float) -> HardwareSpec:
    """The hardware with its measured host costs scaled to another host speed (host_scale's ratio)."""
    measured = dict(hw.measured or {})
    for k in HOST_SECONDS:
        if measured.get(k) is not None:
            measured[k] = float(measured[k]) * scale
    return replace(hw, measured=measured)


def compare_record(rec: dict, hw: HardwareSpec, derived: bool = False) -> list[Row]:
    """Estimated beside measured for one ok record (the rows its kind sets side by side: workloads/). ``derived``
    adds the rows computed from the step time rather than measured directly: MFU (the planner's MFU scaled by estimated / measured step: same FLOPs, same peak) and,
    for a train-dist run with its one-GPU baseline, the scaling efficiency."""
    case, res = rec["case"], rec["result"]
    if res.get("status") != "ok":
        return []
    est = workloads.estimate_for(case, hw)
    name = rec.get("case_id", case.get("model") or case.get("kind", "case")).split("#")[0]
    rows = [Row(name, metric, e, m) for metric, e, m in workloads.rows(case, est, res)]
    if derived and res.get("step_s"):
        rows.append(Row(name, "mfu", est.mfu, est.mfu * est.time["step_s"] / res["step_s"]))
        if res.get("scaling_efficiency") and est.throughput.get("scaling_efficiency"):
            rows.append(Row(name, "scaling_efficiency", est.throughput["scaling_efficiency"],
                            res["scaling_efficiency"]))
    return rows


ESTIMATED_KINDS = workloads.estimated_kinds()


def compare_file(path: str | Path, ceilings: dict | None = None, gpu: str | None = None) -> list[Row]:
    """Rows for every ok record; hardware = ``gpu`` (catalog name or a calibrated TOML) when given, else the catalog
    entry of the device that ran."""
    rows: list[Row] = []
    fixed = load_hardware(gpu) if gpu else None
    for rec in read_records(path):
        # the planner estimates workloads only: microbenchmarks, collectives and compression records have no row
        if rec.get("result", {}).get("status") != "ok" or rec.get("case", {}).get("kind") not in ESTIMATED_KINDS:
            continue
        hw = fixed or hardware_for_device(rec["result"].get("device_name", ""))
        if ceilings:
            hw = calibrated(hw, ceilings.get("matmul_tflops"), ceilings.get("memory_bw_gbs"))
        rows += compare_record(rec, hw)
    return rows
