"""FSDP2 at world size 2 on one H200 through PyTorch's fake process group (research/results/2026-12-02-h200-d/
fsdp_fake.md; research/scripts/gpu_fsdp_fake.py runs the train-dist worker at rank 0 of 2): per-rank memory of
issue 26 item 1's 7B/8B foreach cases against `plan train --fsdp --num-gpus 2 --foreach` (planned before the run),
and the compute part of the step (no communication in a fake run)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JSONL = ROOT / "research/results/2026-12-02-h200-d/call2/gpu_fsdp_fake/gpu_fsdp_fake/fsdp_fake.jsonl"
RUN_HOST = str(ROOT / "research/results/2026-12-02-h200-c/h200-gvisor-host.toml")
_spec = importlib.util.spec_from_file_location("fsdp_fake_compare", ROOT / "research/scripts/fsdp_fake_compare.py")
cmp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cmp)

CASES = {("llama-2-7b", 2, 2048): "a", ("llama-3.1-8b", 1, 2048): "b", ("llama-3.1-8b", 1, 4096): "c"}
PHASES = ("forward", "backward", "optimizer")


def lines() -> list[dict]:
    return [json.loads(x) for x in JSONL.read_text().splitlines() if x.strip()]


def test_three_cases_at_world_size_two_with_foreach():
    got = {}
    for d in lines():
        c, r = d["case"], d["result"]
        assert r["status"] == "ok" and r["optimizer_impl"] == "foreach" and r["fake_pg"]["backend"] == "fake"
        assert r["fake_pg"]["dist_world_size"] == 2 and r["fake_pg"]["fsdp_mesh_sizes"] == [2]
        assert r["fake_pg"]["local_param_bytes"] * 2 == r["fake_pg"]["full_param_bytes"]
        got[CASES[(c["model"], c["micro_batch"], c["seq"])]] = r
    assert sorted(got) == ["a", "b", "c"]


@pytest.mark.parametrize("line", range(3))
def test_memory_per_phase_within_3_percent(line):
    d = lines()[line]
    plan = cmp.plan(d["case"], 2, "h200")
    r = d["result"]
    for ph in PHASES:
        err = plan["memory"]["phases_bytes"][ph] / r[f"peak_{ph}_bytes"] - 1
        assert abs(err) < 0.03, (ph, err)
    assert plan["memory"]["peak_bytes_per_gpu"] / r["peak_bytes"] - 1 == pytest.approx(0, abs=0.025)


def test_the_foreach_list_is_the_issues_gap():
    """Without foreach's temporary list (as --fused plans it) the 8B mb1 plan peaks 15.2% below the measured
    optimizer step: the issue's 15-16%."""
    d = next(x for x in lines() if x["case"]["seq"] == 2048 and x["case"]["micro_batch"] == 1)
    fused = cmp.plan({**d["case"], "foreach": False, "fused": True}, 2, "h200")
    assert fused["memory"]["peak_bytes_per_gpu"] / d["result"]["peak_bytes"] - 1 == pytest.approx(-0.152, abs=0.005)


@pytest.mark.parametrize("line", range(3))
def test_compute_part_of_the_step_on_the_run_host(line):
    d = lines()[line]
    t = cmp.plan(d["case"], 2, RUN_HOST)["time"]
    meas = d["result"]["step_s"]  # the worker's step time (rank 0, the timed steps)
    err = (t["step_s"] - t["exposed_comm_s"]) / meas - 1
    assert -0.10 < err < 0.0, err  # -3.5 / -9.3 / -1.5%


@pytest.mark.parametrize("line", range(3))
def test_foreach_optimizer_phase(line):
    """FOREACH_BW_FRACTION (0.850) is set by the 7B case (line 0) and checked on the two 8B cases."""
    d = lines()[line]
    err = cmp.plan(d["case"], 2, RUN_HOST)["time"]["optimizer_s"] / d["result"]["phase_s"]["optimizer"] - 1
    assert abs(err) < (0.002 if line == 0 else 0.01), err


WS1 = ROOT / "research/results/2026-12-02-h200-d/call4/gpu_fsdp2/fsdp2.jsonl"


@pytest.mark.parametrize("line", range(3))
def test_foreach_optimizer_phase_at_world_size_one(line):
    """Call 4: the c-session's three FSDP2 world-size-1 foreach runs again, now with phase times: the optimizer
    phase within 5% on three models other than the one that set FOREACH_BW_FRACTION (+4.0 / -0.9 / +0.1%)."""
    d = [json.loads(x) for x in WS1.read_text().splitlines() if x.strip()][line]
    r = d["result"]
    assert r["status"] == "ok" and r["optimizer_impl"] == "foreach" and d["case"]["foreach"]
    err = cmp.plan(d["case"], 1, "h200")["time"]["optimizer_s"] / r["phase_s"]["optimizer"] - 1
    assert abs(err) < 0.05, err
