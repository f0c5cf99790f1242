"""The planner against two H200s joined by NVLink (NV18) (research/results/2026-11-29-h200-x2): DDP and FSDP2 training of
Llama-3.2-1B and Llama-2-7B under torchrun (`gpuscope bench train-dist`), and NCCL collectives 1 KiB - 1 GiB
(`gpuscope bench collectives`). Issue 4's targets: per-GPU peak memory within 5%, step time within 15%."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.estimate.train import estimate_train
from gpuscope.explain.compare import estimate_for
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

DIR = Path(__file__).resolve().parents[1] / "results" / "2026-11-29-h200-x2"
TRAIN = [json.loads(line) for line in (DIR / "dist_train.jsonl").read_text().splitlines() if line.strip()]
COLL = [json.loads(line) for line in (DIR / "collectives.jsonl").read_text().splitlines() if line.strip()]
HW = load_hardware("h200")


def _estimate(case: dict):
    return estimate_for(case, HW)  # the same estimate `bench train-dist` prints beside the measurement


def test_the_set():
    got = {(r["case"]["strategy"], r["case"]["model"]) for r in TRAIN}
    assert got == {("ddp", "llama-3.2-1b"), ("fsdp", "llama-3.2-1b"), ("ddp", "llama-2-7b"), ("fsdp", "llama-2-7b")}
    assert all(r["result"]["status"] == "ok" for r in TRAIN)


@pytest.mark.parametrize("rec", TRAIN, ids=[r["case_id"].split("#")[0] for r in TRAIN])
def test_memory_and_step_per_gpu(rec):
    case, res = rec["case"], rec["result"]
    est = _estimate(case)
    assert abs(est.peak_bytes_per_gpu / res["peak_bytes"] - 1) <= 0.05
    for phase in ("forward", "backward"):  # the phases that decide the peak (FSDP 1B optimizer phase: +10%)
        assert abs(est.phases_bytes[phase] / res[f"peak_{phase}_bytes"] - 1) <= 0.05, phase
    assert abs(est.time["step_s"] / res["step_s"] - 1) <= 0.15
    assert abs(res["step_s_rank_spread"]) < 0.01  # the two ranks agree


def test_scaling_efficiency_is_measured_and_communication_is_not_free():
    """--baseline runs the same case on one GPU: DDP 1B 0.92, FSDP 1B 0.88. The planner's DP model hides only
    DP_OVERLAP_FRACTION of the traffic (estimate/train.py): a model that hid it all would predict 1.0."""
    for r in TRAIN:
        if r["case"].get("baseline"):
            eff = r["result"]["scaling_efficiency"]
            assert 0.8 < eff < 0.97
            one = estimate_train(load_model(r["case"]["model"]), HW, micro_batch=r["case"]["micro_batch"],
                                 seq=r["case"]["seq"], precision=r["case"]["precision"])
            two = _estimate(r["case"])
            assert two.throughput["scaling_efficiency"] == pytest.approx(one.time["step_s"] / two.time["step_s"])
            # a ratio of two estimates, each within 8% here (FSDP 1B: one GPU +7.7%, two GPUs -2.5%, so the
            # estimated efficiency is 0.97 against 0.88 measured; DDP 1B: 0.95 against 0.92)
            assert abs(one.time["step_s"] / two.time["step_s"] - eff) < 0.10


def test_collectives_correct_and_large_messages_near_the_link():
    ops = {r["result"]["op"] for r in COLL}
    assert ops == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"}
    assert all(r["result"]["correct"] for r in COLL)
    big = {r["result"]["op"]: r["result"] for r in COLL if r["result"]["nbytes"] == 2**30}
    # nccl-tests' busbw at 1 GiB: all_reduce 323, broadcast 361, all_to_all 328, all_gather 264, reduce_scatter
    # 254 GB/s; the planner's NVLink ring (0.82 x 450) = 369. all_gather / reduce_scatter on 2 GPUs run at 0.7
    # of it: a known miss of the datasheet path; `plan --db` replaces it with these rows.
    for op, r in big.items():
        assert r["busbw_gbs"] > 240, op
        bound = 0.35 if op in ("all_gather", "reduce_scatter") else 0.15
        assert abs(r["error"]) <= bound, (op, r["error"])
