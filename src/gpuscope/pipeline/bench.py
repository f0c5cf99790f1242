"""The workload loop: each case in its own process (measure/runner/suite.run_one: an OOM, crash or hang ends only
that case) while this process samples NVML, stored as soon as it finishes, the planner's estimate beside it.

``run_cases(cases, db=..., gpu=...)`` is the one-call entry: a list of cases run, stored and summed up as a
BenchRun. ``bench_all`` is `gpuscope bench all`: the micro set, the run's own calibration, then a workload set.
"""

from __future__ import annotations

import sys

from gpuscope import workloads
from gpuscope.pipeline.calibration import run_calibration
from gpuscope.pipeline.estimate import estimate_beside, stored_record
from gpuscope.pipeline.fit import fit_to_device
from gpuscope.pipeline.host_ceilings import ensure as ensure_host_ceilings
from gpuscope.pipeline.micro import run_micro
from gpuscope.pipeline.session import BenchRun, Reporter, Session


def _sampler(case: dict):
    from gpuscope.measure.device.nvml import NvmlSampler

    return NvmlSampler(interval_s=0.2) if str(case.get("device", "")).split(":")[0] != "cpu" else None


def _measure(case: dict, timeout_s: float, prog=None, phase_budget_s: float | None = None) -> dict:
    """One case's record from its own process, with the NVML samples taken meanwhile in its result; ``prog`` (a
    Progress that shows phases) gets the case's phase and repeat as they happen; ``phase_budget_s``: the case's
    timed-phase budget (suite.run_one)."""
    from gpuscope.measure.runner.progress import text
    from gpuscope.measure.runner.suite import run_one

    sampler = _sampler(case)
    if sampler:
        sampler.start()
    try:
        rec = run_one(case, timeout_s, (lambda e: prog.phase(text(e))) if prog and prog.shows_phases else None,
                      phase_budget_s)
    finally:
        if sampler:
            sampler.stop()
    if sampler:
        res = rec["result"]
        res["nvml"] = sampler.result(with_samples=False)
        if res["nvml"].get("summary"):
            res["nvml_samples"] = sampler.samples
            res["throttled"] = res["nvml"]["throttled"]
    return rec


def run_workloads(s: Session, cases: list[dict], gpu: str | None, timeout_s: float,
                  phase_budget_s: float | None = None) -> None:
    """Measure each case not already done (resume), store it, and put the estimate on ``gpu`` beside it (a CPU
    run without ``gpu``: on this host's ceilings, measured once: pipeline/host_ceilings.py); ``phase_budget_s``:
    each case's timed-phase budget (measure/runner/progress.py), None for none."""
    ensure_host_ceilings(s, cases, gpu)
    with s.reporter.progress("workloads", len(cases)) as prog:
        for case in cases:
            typed = workloads.from_dict(case)
            key, name = typed.key, typed.name
            prog.item(name)
            if key in s.done:
                s.skipped(key, name, estimate=lambda old: estimate_beside(stored_record(old), gpu))
                prog.advance()
                continue
            rec = _measure(case, timeout_s, prog, phase_budget_s)
            res = rec["result"]
            prov = dict(rec.get("provenance") or {})
            prov.update(wall_s=rec.get("wall_s"), returncode=rec.get("returncode"), parent_argv=list(sys.argv))
            mid = s.store.put(s.run_id, key, typed.KIND.value, name, case, res, prov)
            s.add({"id": mid, "key": key, "name": name, "skipped": False, "status": res.get("status"),
                   "result": res, "estimate": estimate_beside(rec, gpu), "wall_s": rec.get("wall_s")})
            prog.advance()


def run_cases(cases: list[dict], db: str | None = None, gpu: str | None = None, timeout_s: float = 600,
              resume: bool = False, reporter: Reporter | None = None, command: str = "bench") -> BenchRun:
    """Run and store a list of cases (infer or train dicts, e.g. workloads/sets.py), each planned on ``gpu``
    (default: the catalog entry of the device that ran it)."""
    with Session(db, command, resume, reporter) as s:
        run_workloads(s, cases, gpu, timeout_s)
        return s.result()


def bench_all(s: Session, cases: list[dict], device: str | None, mode: str, gpu: str | None, calibrate: bool,
              host: bool, timeout_s: float, fit: bool, label: str) -> None:
    """`bench all`: the micro set, then (``calibrate``, no ``gpu``) the run's own calibration to plan on, the set
    fitted to the device (``fit``: the GPU set), then the workloads."""
    results = run_micro(s, device, mode, None)
    target = gpu
    if gpu is None and calibrate:
        target = run_calibration(s, device, results, host, mode)
    if fit:
        cases = fit_to_device(s, cases, target, device)
    if target is None:  # a CPU's workloads: planned on this run's micro ceilings, kept for later runs
        ensure_host_ceilings(s, cases, None, results)
    s.note(f"workloads: the {label} set, {len(cases)} cases" + (
        " (GPU-sized; --cases smoke: the tiny host-bound models)" if label == "gpu" else ""))
    run_workloads(s, cases, target, timeout_s)
