"""Predicted vs measured: rebuild the planner's estimate for a measured case and set the two side by side.

A measurement record is one line of a results file written by ``gpuscope.measure.suite`` (keys ``case``,
``result``, ``provenance``). The estimate is made for the same model, workload and device; with ``ceilings``
(measured matmul TFLOP/s and copy GB/s of that device) the hardware is calibrated first, as
``gpuscope plan --gpu calibrated.toml`` would do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from gpuscope.errors import UserError
from gpuscope.estimate.infer import estimate_infer
from gpuscope.estimate.roofline import planner_engine
from gpuscope.estimate.train import estimate_train
from gpuscope.specs.axes import Engine
from gpuscope.specs.hardware import HardwareSpec, hardware_for_device, load_hardware
from gpuscope.specs.hf_config import spec_from_config
from gpuscope.specs.models import load_model


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


# a run's probe -> the calibration's probe of the same kind (measure/host_probe.py)
PROBE_OF_CALIBRATION = {"host_probe_s": "host_probe_s", "host_probe_ttft_s": "host_probe_s",
                        "host_probe_train_s": "host_probe_train_s"}


def host_scale(res: dict, hw: HardwareSpec, key: str = "host_probe_s") -> float | None:
    """How much slower (> 1) or faster the host ran during a measurement than during the calibration the hardware
    TOML holds: the host probe around the run's timed phase (``key``: an infer run's ``host_probe_s`` around its
    E2E repeats or ``host_probe_ttft_s`` around its TTFT repeats, a train run's ``host_probe_train_s``;
    measure/host_probe.py) over the calibration's probe of the same kind. None where either is missing (a catalog
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


HF_GENERATE = Engine.values(e for e in Engine if e.hf_generate)  # bench engines that decode with HF generate


def _model(case: dict):
    if isinstance(case.get("config"), dict):
        return spec_from_config(case["config"], name=case.get("model", "inline"))
    return load_model(case["model"])


def estimate_for(case: dict, hw: HardwareSpec):
    """The planner's estimate for a measured case: infer, train, or train-dist (DDP/FSDP over nproc x nnodes)."""
    m = _model(case)
    if case["kind"] == "infer":
        engine = planner_engine(case)
        return estimate_infer(m, hw, batch=case["batch"], prompt=case["prompt"], gen=case["gen"],
                              dtype=case.get("dtype", "bf16"), engine=engine, gqa_fold=case.get("attn") == "gs-gqa",
                              fuse_proj=bool(case.get("fuse_proj")),
                              # generate's decode on a GPU switches MoE experts to batched_mm (estimate/ops.py)
                              moe_batched=case.get("engine", Engine.HF_EAGER.value) in HF_GENERATE
                              and case.get("device", "cuda") != "cpu")
    dist = {}
    if case["kind"] == "train-dist":
        dist = dict(num_gpus=int(case["nproc"]) * int(case.get("nnodes", 1)), strategy=case["strategy"],
                    bucket_view=bool(case.get("gradient_as_bucket_view")))
    return estimate_train(m, hw, micro_batch=case["micro_batch"], seq=case["seq"], precision=case["precision"],
                          optimizer=case.get("optimizer", "adamw"), recompute=case.get("recompute", "none"),
                          fused=case.get("fused", True), grad_accum=int(case.get("grad_accum", 1)), **dist)


def compare_record(rec: dict, hw: HardwareSpec, derived: bool = False) -> list[Row]:
    """Estimated beside measured for one ok record. ``derived`` adds the rows computed from the step time rather
    than measured directly: MFU (the planner's MFU scaled by estimated / measured step: same FLOPs, same peak) and,
    for a train-dist run with its one-GPU baseline, the scaling efficiency."""
    case, res = rec["case"], rec["result"]
    if res.get("status") != "ok":
        return []
    est = estimate_for(case, hw)
    name = rec.get("case_id", case.get("model") or case.get("kind", "case")).split("#")[0]
    # a device_map run spreads (or offloads) the weights: its one-device peak is not the planner's per-GPU peak
    rows = [] if case.get("device_map") else [Row(name, "peak_bytes", est.peak_bytes_per_gpu,
                                                  res["peak_generate_bytes"] if case["kind"] == "infer"
                                                  else res["peak_bytes"])]
    if case["kind"] == "infer":
        rows.append(Row(name, "prefill_s", est.time["prefill_s"], res["ttft_s"]))
        if res.get("tpot_s"):  # none for one generated token, or a decode below the run-to-run noise
            rows.append(Row(name, "decode_s_per_token", est.time["decode_s_per_token"], res["tpot_s"]))
        return rows
    rows += [Row(name, "step_s", est.time["step_s"], res["step_s"])]
    for phase, key in (("forward", "peak_forward_bytes"), ("backward", "peak_backward_bytes"),
                       ("optimizer", "peak_optimizer_bytes")):
        if res.get(key):
            rows.append(Row(name, f"{phase}_peak_bytes", est.phases_bytes[phase], res[key]))
    if derived and res.get("step_s"):
        rows.append(Row(name, "mfu", est.mfu, est.mfu * est.time["step_s"] / res["step_s"]))
        if res.get("scaling_efficiency") and est.throughput.get("scaling_efficiency"):
            rows.append(Row(name, "scaling_efficiency", est.throughput["scaling_efficiency"],
                            res["scaling_efficiency"]))
    return rows


ESTIMATED_KINDS = ("infer", "train", "train-dist")


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


# The measurement suite's accuracy targets (issue "measurement suite"): peak memory within 5%, times within 15%.
ACCURACY_BANDS = {"memory": 0.05, "time": 0.15}


def accuracy_summary(rows) -> dict[str, dict]:
    """Per metric (peak memory rows pooled as ``memory``), how many rows fall within the target band:
    {"memory": {"within": 95, "of": 95, "band": 0.05}, "prefill_s": {...}, ...}. ``rows``: Row objects or dicts
    with ``metric`` and ``error``. Derived rows (MFU, scaling efficiency) are left out: they restate a time."""
    out: dict[str, dict] = {}
    for r in rows:
        metric, err = (r["metric"], r["error"]) if isinstance(r, dict) else (r.metric, r.error)
        if metric in ("mfu", "scaling_efficiency"):
            continue
        key = "memory" if metric.endswith("bytes") else metric
        band = ACCURACY_BANDS["memory" if key == "memory" else "time"]
        s = out.setdefault(key, {"within": 0, "of": 0, "band": band})
        s["of"] += 1
        s["within"] += abs(err) <= band
    return out


def accuracy_lines(summary: dict[str, dict]) -> list[str]:
    return [f"{k}: {v['within']}/{v['of']} within {v['band']:.0%}" for k, v in summary.items()]
