"""FSDP2 at world size 1 on one H200 (research/results/2026-12-02-h200-c/fsdp.md): every stored point replanned.

Each record of call*/gpu_fsdp*/**/fsdp*.jsonl is planned again (estimate_train, strategy fsdp, num_gpus = the run's
world size, the AdamW implementation the run used: its ``optimizer_impl``, or for call 1, which predates that key,
torch's for-loop when ``optimizer_fused`` is false: measure/distributed/optim.py says why). Targets: memory 5% per
phase (rest, forward, backward, optimizer), step 15%. The step's own temporaries are checked as a mechanism too:
the optimizer phase less what was allocated after backward.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.estimate.adamw import largest_tensors
from gpuscope.estimate.params import count_params
from gpuscope.estimate.runtime import TRAIN_WORKSPACE_BYTES
from gpuscope.estimate.train import estimate_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

DIR = Path(__file__).resolve().parents[1] / "results" / "2026-12-02-h200-c"
H200 = load_hardware("h200")
PHASES = {"forward": "peak_forward_bytes", "backward": "peak_backward_bytes", "optimizer": "peak_optimizer_bytes"}


def _records() -> list:
    out = []
    for f in sorted(DIR.glob("call*/gpu_fsdp*/**/fsdp*.jsonl")):
        for line in f.read_text().splitlines():
            d = json.loads(line)
            if d.get("final") and d["result"].get("status") == "ok":
                out.append(pytest.param(d["result"], id=f"{f.parent.name}:{_label(d['result'])}"))
    return out


def _impl(r: dict) -> str:
    return r.get("optimizer_impl") or ("fused" if r["optimizer_fused"] else "for-loop")


def _label(r: dict) -> str:
    return f"{r['model']}-mb{r['micro_batch']}-{_impl(r)}"


def _plan(r: dict):
    return estimate_train(load_model(r["model"]), H200, micro_batch=r["micro_batch"], seq=r["seq"],
                          precision=r["precision"], num_gpus=r["world_size"], strategy="fsdp", adamw_impl=_impl(r))


RECORDS = _records()


def test_the_stored_points_are_there():
    labels = {_label(p.values[0]) for p in RECORDS}
    assert {"llama-3.2-1b-mb4-for-loop", "llama-3.2-3b-mb2-for-loop", "llama-3.2-3b-mb2-fused"} <= labels


@pytest.mark.parametrize("r", RECORDS)
def test_phases_within_5_percent_and_step_within_15(r):
    e = _plan(r)
    for phase, key in PHASES.items():
        assert e.phases_bytes[phase] == pytest.approx(r[key], rel=0.05), phase
    assert e.peak_bytes_per_gpu == pytest.approx(r["peak_bytes"], rel=0.05)
    P = count_params(load_model(r["model"])).total
    # rest: fp32 shards and two fp32 AdamW states (12 B a parameter), the workspace; the root's bf16 copy is resharded by then
    assert 12 * P / r["world_size"] + TRAIN_WORKSPACE_BYTES == pytest.approx(r["mem_rest_bytes"], rel=0.01)
    assert e.time["step_s"] == pytest.approx(r["step_s"], rel=0.15)


@pytest.mark.parametrize("r", RECORDS)
def test_the_step_temporaries_are_the_implementations(r):
    """Optimizer phase - allocated after backward: fused 0, for-loop 2 x the largest fp32 tensor (the embedding),
    foreach one fp32 list the size of the local parameters."""
    m = load_model(r["model"])
    extra = r["peak_optimizer_bytes"] - r["ranks"][0]["mem_after_backward_bytes"]
    want = {"fused": 0.0, "for-loop": 2 * 4 * largest_tensors(m)[0],
            "foreach": 4 * count_params(m).total}[_impl(r)] / r["world_size"]
    assert extra == pytest.approx(want, rel=0.02, abs=64 * 2**20)
