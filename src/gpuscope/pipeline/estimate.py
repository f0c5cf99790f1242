"""The planner's estimate beside one stored record (bench prints it under each measurement; `results compare`
lists it for every stored one): the same hardware resolution and the same rows for both."""

from __future__ import annotations

from gpuscope import workloads
from gpuscope.errors import UserError


def hardware_for_estimate(gpu: str | None, device_name: str | None, calibrated: bool = False):
    """(hardware, None) to plan a measurement on: ``gpu`` (a catalog name or TOML; with ``calibrated`` the
    ceilings `hardware calibrate --save` measured for it) if given, else the catalog entry of the device that ran
    it; (None, why) for a device the catalog does not know."""
    from gpuscope.specs.hardware import catalog_key_for_device, load_hardware

    if gpu:
        if calibrated:
            from gpuscope.specs.calibration import load_calibrated

            return load_calibrated(gpu), None
        return load_hardware(gpu), None
    key = catalog_key_for_device(device_name or "")
    if key is None:
        return None, (f"device '{device_name}' is not in the hardware catalog; pass --gpu NAME or a calibrated TOML "
                      "(gpuscope hardware calibrate --out my.toml)")
    return load_hardware(key), None


def _hardware(rec: dict, gpu: str | None, calibrated: bool):
    """(hardware, why none, the source line of a CPU run's host ceilings or None): hardware_for_estimate, and for
    an infer or train run on a CPU the catalog lacks, this host's measured ceilings (pipeline/host_ceilings.py)."""
    res = rec.get("result") or {}
    hw, why = hardware_for_estimate(gpu, res.get("device_name"), calibrated)
    one_cpu = (rec.get("case") or {}).get("kind") in ("infer", "train") and str(res.get("device") or "").startswith(
        "cpu")
    if hw is not None or not one_cpu:
        return hw, why, None
    from gpuscope.pipeline.host_ceilings import lookup, missing_why

    found = lookup(rec.get("hostname") or (rec.get("provenance") or {}).get("hostname"), res.get("device_name"))
    return (found[0], None, found[1]) if found else (None, missing_why(res.get("device_name")), None)


def _rows(rec: dict, hw, derived: bool, at_run, at_ttft) -> list[dict]:
    from gpuscope.explain.compare import compare_record

    out = []
    for i, r in enumerate(compare_record(rec, hw, derived=derived)):
        ok = isinstance(r.measured, (int, float)) and r.measured > 0
        row = {"metric": r.metric, "estimated": r.estimated, "measured": r.measured, "error": r.error if ok else None}
        if at_run:
            a = (at_ttft if r.metric == "prefill_s" else at_run)[i]
            row["estimated_at_run_host"] = a.estimated
            row["error_at_run_host"] = a.error if ok else None
        out.append(row)
    return out


def estimate_beside(rec: dict, gpu: str | None, derived: bool = True, calibrated: bool = False) -> dict:
    """{"hardware", "calibrated", "host_scale", "host_scale_ttft", "rows": [{metric, estimated, measured, error,
    ...}]} or {"unavailable": why}. ``derived`` adds the rows computed from the step (MFU; a train-dist run with its
    baseline, the scaling efficiency: explain/compare.compare_record). Where the hardware and the run both carry
    host probes, each row also gets the estimate at the host speed the run met (``*_at_run_host``)."""
    from gpuscope.explain.compare import at_host_speed, compare_record, host_scale

    res = rec.get("result") or {}
    if res.get("status") != "ok":
        return {"unavailable": f"the measurement's status is {res.get('status')}"}
    try:
        hw, why, source = _hardware(rec, gpu, calibrated)
        if hw is None:
            return {"unavailable": why}
        # the probe around the kind's timed phase: a training step's is forward + backward, TTFT's its own
        kind = workloads.case_class((rec.get("case") or {}).get("kind"))
        scale = host_scale(res, hw, kind.HOST_PROBE) if kind.HOST_PROBE else None
        at_run = compare_record(rec, at_host_speed(hw, scale), derived=derived) if scale else None
        ttft_scale = host_scale(res, hw, kind.TTFT_PROBE) if kind.TTFT_PROBE else None
        at_ttft = compare_record(rec, at_host_speed(hw, ttft_scale), derived=derived) if ttft_scale else at_run
        rows = _rows(rec, hw, derived, at_run, at_ttft)
    except UserError as e:
        return {"unavailable": str(e)}
    out = {"hardware": hw.key, "calibrated": hw.is_calibrated, "host_scale": scale, "host_scale_ttft": ttft_scale,
           "rows": rows}
    return {**out, "hardware_source": source} if source else out


def stored_record(row: dict) -> dict:
    """A store row (Store.get / latest) as the record estimate_beside reads."""
    return {"case": row["config"], "result": row["result"], "case_id": row.get("key") or row["name"],
            "hostname": row.get("hostname")}
