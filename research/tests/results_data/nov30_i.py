"""research/results/2026-11-30-h200-i (README.md there): every training phase of eight tiny cases at 2/4/8 layers, and
eight `bench all` runs on their calibrations. The records, calibrations and selections the tests read."""

from __future__ import annotations

import json
from pathlib import Path

from gpuscope.explain.compare import read_records

HERE = Path(__file__).resolve().parents[2] / "results" / "2026-11-30-h200-i"
PHASES = json.loads((HERE / "call1_train_phases.json").read_text())
PHASES_CALL3 = json.loads((HERE / "call3_train_phases.json").read_text())  # one sweep, a slower host state


def by_sweep(sweep: int, phases=None) -> dict:
    return {(r["family"], r["precision"], r["recompute"]): r for r in (phases or PHASES)["runs"]
            if r["sweep"] == sweep}


def training_keys(costs: dict) -> dict:
    """The hardware-TOML keys of a train_host_costs result (its detail left out)."""
    return {k: v for k, v in costs.items() if k.startswith(("host_train_", "host_opt_")) and k != "host_train_detail"}


def planned_steps(sweep: int, monkeypatch, tmp_path, phases=None) -> dict:
    """Each case's 2-layer step as the planner plans it on a calibration whose training fits are this sweep's
    Llama amp-bf16 ones: the calibration's own code (calibrate.train_host_costs) on the recorded fits, its TOML
    written and loaded, then estimate_train for the case's tiny model (host-bound: GPU time is microseconds)."""
    import gpuscope.measure.host.overhead as ho
    from gpuscope.estimate.train import estimate_train
    from gpuscope.measure.micro.calibrate import calibration_toml
    from gpuscope.measure.host.costs import train_host_costs
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.hf_config import spec_from_config

    by = by_sweep(sweep, phases)
    monkeypatch.setattr(ho, "measure_train_family", lambda fam, dev, precision, recompute, steps, **kw:
                        by[(fam, precision, recompute)])
    launch = 10e-6  # any unit: the fits are in seconds at the probe unit, and the planner multiplies back
    c = train_host_costs(launch, "cpu")
    measured = {"memory_bw_gbs": 4170.0, "host_launch_s": launch, **training_keys(c)}
    path = tmp_path / f"sweep{sweep}.toml"
    path.write_text(calibration_toml("NVIDIA H200", "cuda", measured, None, "Mode: test."))
    hw = load_hardware(str(path))
    out = {}
    for (fam, prec, rc), r in by.items():
        cfg = dict(ho.TINY[fam], **{("n_layer" if fam == "gpt2" else "num_hidden_layers"): 2})
        est = estimate_train(spec_from_config(cfg), hw, micro_batch=2, seq=64, precision=prec, recompute=rc)
        out[(fam, prec, rc)] = (est.time["step_s"], r["forward_s"][0] + r["backward_s"][0] + r["optimizer_s"][0])
    return out

CALLS = ("call1", "call2", "call3", "call4")
RECORDS = {c: read_records(HERE / f"{c}_measurements.jsonl") for c in CALLS}
WORKLOADS = [(c, r) for c in CALLS for r in RECORDS[c] if r["case"]["kind"] in ("infer", "train")]
HOST = {(c, r["run_id"]): r for c in CALLS for r in RECORDS[c] if r["case"]["kind"] == "host"}


def toml(call: str, run_id: str) -> Path:
    (path,) = HERE.glob(f"{call}_nvidia-h200-{run_id}.toml")
    return path


def refit(host_row: dict, monkeypatch) -> dict:
    """The training keys calibrate.train_host_costs writes from a stored calibration's own fits and probes."""
    import gpuscope.measure.host.overhead as ho
    import gpuscope.measure.host.probe as hp
    from gpuscope.measure.host.costs import train_host_costs

    d = host_row["result"]["train"]["host_train_detail"]

    class Probe:  # the rounds' training probes as the calibration read them
        def __init__(self, *a, **kw):
            self.samples = d["train_probe_rounds_s"]

        def median(self):
            return d["host_probe_train_s"]

    monkeypatch.setattr(ho, "measure_train_family", lambda fam, dev, precision, recompute, steps, **kw: d[recompute])
    monkeypatch.setattr(hp, "RoundProbe", Probe)
    return train_host_costs(d["launch_s"], "cpu", train_probe_s=d["train_probe_at_passes_s"])


def errors(calls, metric) -> list[float]:
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    return [row.error for c, r in WORKLOADS if c in calls
            for row in compare_record(r, load_hardware(str(toml(c, r["run_id"])))) if row.metric == metric]
