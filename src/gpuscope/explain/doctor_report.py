"""The doctor's report (`gpuscope doctor`): a profiled run (or a plan only) put beside the planner's estimate for
the same case, its findings, and for training that does not fit the OOM tiers (explain/oom_tiers.py).

``build_report(target, summary, case, gpu, plan_only)`` -> a dict of schema gpuscope.doctor/1 that
report/doctor_view.py renders.
"""

from __future__ import annotations

from gpuscope.errors import UserError

DOCTOR_SCHEMA = "gpuscope.doctor/1"
NO_CASE = "no gpuscope workload (a script): the planner needs the model and configuration"


def hardware_for(gpu: str | None, device_name: str | None, device_type: str | None = None):
    """(HardwareSpec | None, why not, source line or None): --gpu, else the catalog entry of the device that ran,
    else for a CPU run this host's measured ceilings, kept by bench (pipeline/host_ceilings.py: the catalog holds
    accelerators only)."""
    from gpuscope.specs.hardware import catalog_key_for_device, load_hardware

    if gpu:
        return load_hardware(gpu), None, None
    if not device_name:
        return None, "pass --gpu NAME for the planner's estimate", None
    key = catalog_key_for_device(device_name)
    if key is not None:
        return load_hardware(key), None, None
    if device_type == "cpu":
        import socket

        from gpuscope.pipeline.host_ceilings import lookup, missing_why

        found = lookup(socket.gethostname(), device_name)
        return (found[0], None, found[1]) if found else (None, missing_why(device_name), None)
    return None, f"device '{device_name}' is not in the hardware catalog; pass --gpu NAME for the estimate", None


def model_spec(case: dict):
    """The planner's ModelSpec of a case: its inline config, else its preset or path."""
    from gpuscope.specs.hf_config import spec_from_config
    from gpuscope.specs.models import load_model

    if isinstance(case.get("config"), dict):
        return spec_from_config(case["config"], name=case.get("model") or "inline")
    return load_model(case["model"])


def oom_for(case: dict, hw) -> dict:
    from gpuscope.explain.oom_tiers import lora_oom_tiers, oom_tiers

    if case.get("lora_r") is not None:  # LoRA / QLoRA fine-tuning: its own tiers
        return lora_oom_tiers(model_spec(case), hw, r=case["lora_r"], micro_batch=case["micro_batch"],
                              seq=case["seq"], targets=case.get("lora_targets"), qlora=bool(case.get("qlora")),
                              precision=case.get("precision", "amp-bf16"), optimizer=case.get("optimizer", "adamw"),
                              recompute=case.get("recompute", "none"), grad_accum=case.get("grad_accum", 1))
    return oom_tiers(model_spec(case), hw, micro_batch=case["micro_batch"], seq=case["seq"],
                     precision=case.get("precision", "amp-bf16"), optimizer=case.get("optimizer", "adamw"),
                     recompute=case.get("recompute", "none"))


def _estimate(report: dict, summary: dict, case: dict, hw):
    """Put the planner's estimate of ``case`` on ``hw`` in the report (beside the profile where it ran)."""
    from gpuscope.explain.findings import compare_estimate
    from gpuscope.workloads import estimate_for

    try:
        est = estimate_for(case, hw)
    except UserError as e:
        report["estimate"] = {"unavailable": str(e)}
        return None
    if summary.get("wall_s"):
        report["estimate"] = summary["estimate"] = compare_estimate(est, summary)
    else:
        report["estimate"] = {"hardware": est.hardware, "rows": [], "fits": est.fits, "verdict": est.verdict}
    return est


def _findings(summary: dict, host_hw) -> list:
    """explain/findings.diagnose, and a CPU run's own finding (explain/doctor_cpu.py) with this host's measured
    copy bandwidth (``host_hw``: the kept host ceilings, else None), sorted as diagnose sorts."""
    from gpuscope.explain.doctor_cpu import cpu_decode_weights
    from gpuscope.explain.finding import SEVERITY_ORDER
    from gpuscope.explain.findings import diagnose

    if host_hw is not None:
        summary["host_bw_gbs"] = host_hw.achievable_bw_gbs()
    out = diagnose(summary) + [f for f in (cpu_decode_weights(summary),) if f is not None]
    return sorted(out, key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), -(f.speedup or 1.0)))


def build_report(target: dict, summary: dict | None, case: dict | None, gpu: str | None, plan_only: bool) -> dict:
    summary = summary or {}
    status = "planned" if plan_only else summary.get("status") or summary.get("script_status") or "ok"
    report = {"schema": DOCTOR_SCHEMA, "target": target, "profile": summary, "estimate": None, "findings": [],
              "oom": None, "status": status}
    hw, why, source = (None, NO_CASE, None) if case is None else hardware_for(
        gpu, summary.get("device_name"), summary.get("device_type"))
    est = _estimate(report, summary, case, hw) if hw is not None else None
    if hw is None:
        report["estimate"] = {"unavailable": why}
    elif source and report.get("estimate"):
        report["estimate"]["source"] = source
    if summary.get("wall_s"):
        report["findings"] = _findings(summary, hw if source else None)
        summary.pop("estimate", None)
    if case is not None and case.get("kind") == "train" and hw is not None and (
            status == "oom" or plan_only or (est is not None and not est.fits)):
        report["oom"] = oom_for(case, hw)
    return report
