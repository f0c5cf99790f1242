"""The run machinery of `gpuscope bench` (and of `hardware calibrate`, the distributed benches): the session (store,
run id, resume set, output mode), the micro loop, bench all's own calibration, the workload loop with its estimate
beside each measurement, and the JSON/summary at the end. The commands and their option checks are in cli/bench.py.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import typer

from gpuscope.cli.bench_report import accuracy_line, accuracy_summary, estimate_beside, estimate_table, headline
from gpuscope.errors import UserError

BENCH_SCHEMA = "gpuscope.bench/1"


def _console(stderr: bool = False):
    from rich.console import Console

    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=max(c.width, 140))


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = _console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not console.is_terminal)


class Session:
    """One command's run: the store, its run id, resume set, the records of this call, and the output mode."""

    def __init__(self, db: str | None, command: str, resume: bool, as_json: bool):
        from gpuscope.store.db import Store

        self.store = Store.open(db)
        self.run_id = self.store.new_run(command, sys.argv)
        self.done = self.store.done_keys() if resume else set()
        self.as_json = as_json
        self.out: list[dict] = []
        self.log = _console(stderr=True)
        self.calibration: str | None = None  # bench all: the hardware TOML its workloads were planned on
        self.host_history: dict | None = None  # its host probe beside the machine's earlier calibrations

    def note(self, text: str) -> None:
        if not self.as_json:
            self.log.print(text, highlight=False)

    def close(self) -> None:
        self.store.close()


# --- micro -----------------------------------------------------------------------------------------------------
def run_micro(s: Session, device: str | None, mode: str, dtypes, benches=("matmul", "memory", "transfer"),
              **matmul) -> list[dict]:
    """Run (or, with resume, reuse) every micro item; returns the result dicts (stored ones included)."""
    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.micro.bench import Runner, item_key, item_name, micro_configs
    from gpuscope.measure.device.provenance import provenance

    try:
        dev = Device(pick_device(device))
    except RuntimeError as e:
        raise UserError(f"--device: {e}.") from None
    configs = micro_configs(dev, mode, dtypes, benches, **matmul)
    prov = provenance(dev)
    runner = Runner(dev)
    results = []
    with _progress() as prog:
        task = prog.add_task(f"micro ({mode}) on {dev.name}", total=len(configs))
        for c in configs:
            key, name = item_key(c), item_name(c)
            prog.update(task, description=name)
            if key in s.done:
                old = s.store.latest(key)
                results.append(old["result"])
                s.out.append({"id": old["id"], "key": key, "name": name, "skipped": True, "status": old["status"],
                              "result": old["result"]})
                s.note(f"{name}: skipped (measured as id {old['id']})")
                prog.advance(task)
                continue
            r = runner.run(c)
            mid = s.store.put(s.run_id, key, "micro", name, c, r, prov)
            results.append(r)
            s.out.append({"id": mid, "key": key, "name": name, "skipped": False, "status": r["status"], "result": r})
            s.note(f"[{mid}] {name}: {headline(r)}")
            prog.advance(task)
    return results


# --- workloads ---------------------------------------------------------------------------------------------------
def _on_accelerator(device: str | None) -> bool:
    from gpuscope.measure.device.device import pick_device

    return pick_device(device).split(":")[0] != "cpu"


def run_calibration(s: Session, device: str | None, results: list[dict], host: bool, mode: str) -> str | None:
    """This run's own calibration: its micro ceilings (and, with ``host``, this host's costs) as a hardware TOML in
    ``calibrations/<device>-<run id>.toml`` beside the results database; its path, or None (said) where none can be
    made."""
    from gpuscope.cli.calibrate import host_keys
    from gpuscope.measure.micro.calibrate import calibration_toml
    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.micro.bench import ceilings

    dev = Device(pick_device(device))
    measured = ceilings(results)
    if host:
        measured.update(host_keys(device, s))
    try:
        text = calibration_toml(dev.device_name(), dev.type, measured, dev.total_memory(),
                                f"Mode: {mode}; bench all, run {s.run_id}.")
    except UserError as e:
        s.note(f"no calibration from this run ({e}); the workloads are planned on the catalog")
        return None
    slug = re.sub(r"[^a-z0-9]+", "-", dev.device_name().lower()).strip("-") or dev.type
    path = Path(s.store.path).expanduser().resolve().parent / "calibrations" / f"{slug}-{s.run_id}.toml"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UserError(f"the run's calibration cannot be written to '{path}' ({exc.strerror}).") from None
    s.calibration = str(path)
    s.note(f"workloads planned on this run's calibration: {path}")
    return str(path)


# bench all's quick set on a smaller device: the next smaller model once batch 1 does not fit (Llama, then Qwen)
SMALLER = {"llama-3.1-8b": "llama-3.2-3b", "llama-3.2-3b": "llama-3.2-1b", "llama-3.2-1b": "qwen2.5-0.5b"}


def _fits(case: dict, hw) -> bool:
    from gpuscope.explain.compare import estimate_for

    return estimate_for(case, hw).fits


def _fit_one(case: dict, hw) -> dict | None:
    """The case with its batch halved (then its model made smaller) until the planner fits it on ``hw``, or None."""
    size = "batch" if case["kind"] == "infer" else "micro_batch"
    c = dict(case)
    while True:
        while c[size] > 1 and not _fits(c, hw):
            c[size] //= 2
        if _fits(c, hw):
            return c
        if c["model"] not in SMALLER:
            return None
        c = dict(c, model=SMALLER[c["model"]], **{size: case[size]})


def fit_cases(cases: list[dict], hw, dev_type: str) -> tuple[list[dict], list[str]]:
    """The accelerator quick set (measure/cases.gpu_quick_cases) for one device: a graph engine only where CUDA graphs
    exist (else plain generate), fp16 where the device has no bf16, and each case's batch halved, then its model made
    smaller (SMALLER), until the planner fits it on ``hw`` (whose ``device_total_bytes`` is the device's measured
    total); a case nothing fits is left out. Returns the cases and one sentence per change. ``hw`` None (a device
    the catalog does not know): sizes as they are."""
    out, notes = [], []
    for case in cases:
        c = dict(case)
        if c["kind"] == "infer" and c.get("engine", "hf-eager") != "hf-eager" and dev_type != "cuda":
            c.pop("defer_stop", None)
            c["engine"] = "hf-eager"
            notes.append(f"{c['model']}: plain generate on {dev_type} (the graph engines need CUDA graphs)")
        if hw is None:
            out.append(c)
            continue
        if not hw.supports("bf16"):
            key, fp16 = ("dtype", "fp16") if c["kind"] == "infer" else ("precision", "amp-fp16")
            if c.get(key, "bf16" if c["kind"] == "infer" else "amp-bf16") != fp16:
                notes.append(f"{c['model']} ({c['kind']}): {fp16}, {hw.name} has no bf16")
                c[key] = fp16
        fitted = _fit_one(c, hw)
        gib = f"{hw.device_total_bytes / 2**30:.0f} GiB"
        if fitted is None:
            notes.append(f"{c['model']} ({c['kind']}) left out: planned not to fit {gib} even at batch 1 of "
                         f"{c['model']} or a smaller model")
            continue
        if fitted != c:
            size = "batch" if c["kind"] == "infer" else "micro_batch"
            notes.append(f"{c['model']} ({c['kind']}, {size} {c[size]}) -> {fitted['model']}, {size} "
                         f"{fitted[size]}: planned to fit {gib}")
        out.append(fitted)
    return out, notes


def fit_to_device(s: Session, cases: list[dict], gpu: str | None, device: str | None) -> list[dict]:
    """fit_cases on this run's device, planned on ``gpu`` (the run's calibration) or the device's catalog entry."""
    from dataclasses import replace

    from gpuscope.cli.bench_report import hardware_for_estimate
    from gpuscope.measure.device.device import Device, pick_device

    dev = Device(pick_device(device))
    hw, why = hardware_for_estimate(gpu, dev.device_name())
    if hw is None:
        s.note(f"the quick set runs as sized for an 80 GB GPU: {why}")
    elif dev.total_memory():
        hw = replace(hw, device_total_bytes=dev.total_memory())
    cases, notes = fit_cases(cases, hw, dev.type)
    for n in notes:
        s.note(n)
    return cases


def run_workloads(s: Session, cases: list[dict], gpu: str | None, timeout_s: float) -> None:
    from gpuscope.measure.cases import case_id, case_name
    from gpuscope.measure.device.nvml import NvmlSampler
    from gpuscope.measure.suite import run_one

    with _progress() as prog:
        task = prog.add_task("workloads", total=len(cases))
        for case in cases:
            key, name = case_id(case), case_name(case)
            prog.update(task, description=name)
            if key in s.done:
                old = s.store.latest(key)
                rec = {"case": old["config"], "result": old["result"], "case_id": key}
                s.out.append({"id": old["id"], "key": key, "name": name, "skipped": True, "status": old["status"],
                              "result": old["result"], "estimate": estimate_beside(rec, gpu)})
                s.note(f"{name}: skipped (measured as id {old['id']})")
                prog.advance(task)
                continue
            sampler = NvmlSampler(interval_s=0.2) if str(case.get("device", "")).split(":")[0] != "cpu" else None
            if sampler:
                sampler.start()
            try:
                rec = run_one(case, timeout_s)
            finally:
                if sampler:
                    sampler.stop()
            res = rec["result"]
            if sampler:
                res["nvml"] = sampler.result(with_samples=False)
                if res["nvml"].get("summary"):
                    res["nvml_samples"] = sampler.samples
                    res["throttled"] = res["nvml"]["throttled"]
            prov = dict(rec.get("provenance") or {})
            prov.update(wall_s=rec.get("wall_s"), returncode=rec.get("returncode"), parent_argv=list(sys.argv))
            mid = s.store.put(s.run_id, key, case["kind"], name, case, res, prov)
            est = estimate_beside(rec, gpu)
            s.out.append({"id": mid, "key": key, "name": name, "skipped": False, "status": res.get("status"),
                          "result": res, "estimate": est})
            s.note(f"[{mid}] {name}: {headline(res)} ({rec.get('wall_s', 0):.1f}s)")
            if not s.as_json:
                if "rows" in est:
                    s.log.print(estimate_table(name, est))
                else:
                    s.log.print(f"  no estimate: {est['unavailable']}", highlight=False)
            prog.advance(task)


def finish(s: Session, t0: float) -> None:
    import json

    acc = accuracy_summary(s.out)

    if s.as_json:
        from gpuscope.measure.run_case import clean

        out = {"schema": BENCH_SCHEMA, "db": str(s.store.path), "run_id": s.run_id, "wall_s": time.perf_counter() - t0,
               "measurements": s.out}
        if s.calibration:
            out["calibration"] = s.calibration
        if s.host_history:
            out["calibration_host_history"] = s.host_history
        if acc:
            out["estimate_accuracy"] = acc
        typer.echo(json.dumps(clean(out), indent=1))
    else:
        new = sum(1 for m in s.out if not m["skipped"])
        if acc:
            s.note(accuracy_line(acc))
        s.note(f"{new} measured, {len(s.out) - new} skipped, in {time.perf_counter() - t0:.1f}s; "
               f"stored in {s.store.path} (run {s.run_id})")
    s.close()


def guarded(s: Session, fn) -> None:
    """Run fn(); on Ctrl-C say what was kept and exit 130."""
    t0 = time.perf_counter()
    try:
        fn()
    except KeyboardInterrupt:
        kept = sum(1 for m in s.out if not m["skipped"])
        print(f"interrupted: {kept} finished measurements of this run are kept in {s.store.path}; "
              "run again with --resume to continue.", file=sys.stderr)
        s.close()
        raise typer.Exit(130)
    except BaseException:
        s.close()
        raise
    finish(s, t0)


