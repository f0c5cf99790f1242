"""bench all's quick workloads: the GPU-sized set on an accelerator (workloads/sets.gpu_quick_cases), fitted to the
device by the planner (pipeline/fit.fit_cases), and the tiny smoke set on a CPU."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from gpuscope.pipeline.fit import SMALLER, fit_cases
from gpuscope.workloads import estimate_for
from gpuscope.workloads import case_id
from gpuscope.workloads.sets import CASE_SETS, gpu_quick_cases
from gpuscope.specs.hardware import load_hardware


def _size(c: dict) -> int:
    return c["batch"] if c["kind"] == "infer" else c["micro_batch"]


def test_the_gpu_set_is_bound_by_the_device_in_every_phase_on_an_h200():
    """Each case's planned GPU time is at least 4x its planned host time on the H200 (the smoke cases: the host's)."""
    hw = load_hardware("h200")
    for c in gpu_quick_cases():
        t = estimate_for(c, hw).time
        if c["kind"] == "infer":
            assert t["decode_gpu_s"] >= 3 * t["decode_host_s"], (c, t)
            assert t["prefill_gpu_s"] >= 0.8 * t["prefill_s"], (c, t)
        else:
            assert t["gpu_s_per_micro_batch"] >= 2 * t["host_s_per_micro_batch"], (c, t)
    for c in CASE_SETS["smoke"]():  # the contrast: the tiny models' steps are the host's
        t = estimate_for(dict(c, device="cuda"), hw).time
        if c["kind"] == "train":
            assert t["host_s_per_micro_batch"] > 5 * t["gpu_s_per_micro_batch"], (c, t)


def test_an_80gb_class_gpu_runs_the_set_as_it_is():
    for name in ("h200", "h100"):
        cases, notes = fit_cases(gpu_quick_cases(), load_hardware(name), "cuda")
        assert cases == gpu_quick_cases() and notes == []
        assert {case_id(c) for c in cases} == {case_id(c) for c in gpu_quick_cases()}


@pytest.mark.parametrize("name", ["a100-40gb", "4090", "l4", "v100-16gb", "t4"])
def test_a_smaller_gpu_gets_each_case_shrunk_until_the_planner_fits_it(name):
    hw = load_hardware(name)
    cases, notes = fit_cases(gpu_quick_cases(), hw, "cuda")
    assert len(cases) == len(gpu_quick_cases())
    for orig, c in zip(gpu_quick_cases(), cases):
        assert estimate_for(c, hw).fits
        if c == orig:
            continue
        assert any(orig["model"] in n for n in notes)
        if c["model"] == orig["model"]:  # the batch was halved: the next larger one would not fit
            assert _size(c) < _size(orig) and not estimate_for(dict(c, **{k: 2 * _size(c) for k in (
                "batch" if c["kind"] == "infer" else "micro_batch",)}), hw).fits
        else:  # a smaller model of the ladder; the original did not fit at batch 1
            key = "batch" if c["kind"] == "infer" else "micro_batch"
            assert not estimate_for(dict(orig, dtype=c.get("dtype", "bf16"), **{key: 1}) if c["kind"] == "infer"
                                    else dict(orig, precision=c["precision"], **{key: 1}), hw).fits
            m, chain = orig["model"], []
            while m in SMALLER:
                m = SMALLER[m]
                chain.append(m)
            assert c["model"] in chain
            assert estimate_for(c, hw).params["total"] < estimate_for(orig, load_hardware("h200")).params["total"]


def test_a_gpu_without_bf16_runs_fp16():
    cases, notes = fit_cases(gpu_quick_cases(), load_hardware("v100-16gb"), "cuda")
    assert [c.get("dtype") for c in cases if c["kind"] == "infer"] == ["fp16"]
    assert {c["precision"] for c in cases if c["kind"] == "train"} == {"amp-fp16"}
    assert any("has no bf16" in n for n in notes)
    cases, _ = fit_cases(gpu_quick_cases(), load_hardware("h100"), "cuda")
    assert {c["precision"] for c in cases if c["kind"] == "train"} == {"amp-bf16", "amp-fp16"}


def test_without_cuda_graphs_the_decode_is_plain_generate():
    cases, notes = fit_cases(gpu_quick_cases(), load_hardware("a770"), "xpu")
    infer = [c for c in cases if c["kind"] == "infer"]
    assert [c["engine"] for c in infer] == ["hf-eager"] and "defer_stop" not in infer[0]
    assert infer[0]["fuse_proj"] is True
    assert any("plain generate on xpu" in n for n in notes)


def test_a_device_nothing_fits_gets_every_case_left_out_and_said():
    hw = replace(load_hardware("h100"), device_total_bytes=2 * 2**30)
    cases, notes = fit_cases(gpu_quick_cases(), hw, "cuda")
    assert cases == [] and len(notes) == 3 and all("left out" in n and "2 GiB" in n for n in notes)


def test_a_device_the_catalog_does_not_know_runs_the_set_as_sized():
    cases, notes = fit_cases(gpu_quick_cases(), None, "cuda")
    assert cases == gpu_quick_cases() and notes == []


def test_the_gpu_set_on_a_cpu_is_one_sentence_and_exit_2(tmp_path):
    pytest.importorskip("torch")
    db = tmp_path / "r.sqlite"
    r = subprocess.run([sys.executable, "-m", "gpuscope", "bench", "all", "--cases", "gpu", "--device", "cpu",
                        "--db", str(db)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "--cases gpu" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not db.exists()


def test_bench_all_picks_the_gpu_set_on_an_accelerator_and_smoke_on_a_cpu(monkeypatch, tmp_path):
    """The command's own choice, with the measuring steps replaced: what run_workloads is handed."""
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    import gpuscope.cli as cli
    import gpuscope.cli.bench as bench
    import gpuscope.pipeline.bench as pipeline_bench

    handed = {}
    monkeypatch.setattr(pipeline_bench, "run_micro", lambda *a, **k: [])
    monkeypatch.setattr(pipeline_bench, "run_calibration", lambda *a, **k: None)
    monkeypatch.setattr(pipeline_bench, "fit_to_device", lambda s, work, target, device: [dict(c, fitted=True) for c in work])
    monkeypatch.setattr(pipeline_bench, "run_workloads", lambda s, work, target, timeout: handed.update(work=work))
    cli._register()
    for accel, expect in ((True, "gpu"), (False, "smoke")):
        monkeypatch.setattr(bench, "_on_accelerator", lambda device, a=accel: a)
        r = CliRunner().invoke(cli.app, ["bench", "all", "--db", str(tmp_path / "r.sqlite")])
        assert r.exit_code == 0, r.output
        assert f"workloads: the {expect} set, {len(CASE_SETS[expect]())} cases" in r.output
        want = CASE_SETS[expect]()
        assert [case_id({k: v for k, v in c.items() if k != "fitted"}) for c in handed["work"]] == \
            [case_id(c) for c in want]
        assert all(c.get("fitted") for c in handed["work"]) == (expect == "gpu")
