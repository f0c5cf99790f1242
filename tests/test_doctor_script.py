"""doctor on a user's script that fails or runs long: the script's exit code and last lines, a non-zero exit, and
a profile whose recorded window is bounded."""

from __future__ import annotations

import json
import textwrap

CRASH = textwrap.dedent("""
    import torch
    def load_batch():
        raise ValueError("shard 3 is missing")
    x = torch.randn(8, 8) @ torch.randn(8, 8)
    load_batch()
""")


def _doctor(capsys, *args) -> tuple[int, str, str]:
    """gpuscope doctor in this process (the script still runs in its child): (exit code, stdout, stderr)."""
    from gpuscope.cli import main

    try:
        main(["doctor", "--device", "cpu", *args])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_crashing_script_gives_its_traceback_and_exit_1(tmp_path, capsys):
    from rich.console import Console

    from gpuscope.report.doctor_view import doctor_markdown, render_doctor

    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    code, out, err = _doctor(capsys, "--json", "--", "python", str(script))
    assert code == 1, err
    d = json.loads(out)
    p = d["profile"]
    assert d["status"] == "error" and p["script_status"] == "error" and p["script_exit_code"] == 1
    assert p["script_traceback"][-1] == "ValueError: shard 3 is missing"
    assert any("in load_batch" in ln for ln in p["script_traceback"])
    assert not any("profile/script.py" in ln for ln in p["script_traceback"])  # the script's frames only
    assert "ValueError: shard 3 is missing" in err and err.rstrip().splitlines()[-1].startswith("1 of 1")
    console = Console(record=True, width=140)
    render_doctor(d, console)  # the table and the Markdown: the error, not "No finding fired"
    for text in (console.export_text(), doctor_markdown(d)):
        assert "exit code 1" in text and "shard 3 is missing" in text and "No finding fired" not in text


def test_a_missing_module_and_a_non_zero_exit_fail(tmp_path, capsys):
    code, out, _ = _doctor(capsys, "--json", "--", "python", "-m", "no_such_module_for_gpuscope")
    assert code == 1
    assert json.loads(out)["profile"]["script_traceback"] == ["ImportError: No module named no_such_module_for_gpuscope"]
    script = tmp_path / "args.py"
    script.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    code, out, _ = _doctor(capsys, "--json", "--", "python", str(script), "--nope")
    p = json.loads(out)["profile"]
    assert code == 1 and p["script_status"] == "exit" and p["script_exit_code"] == 2
    assert "unrecognized arguments: --nope" in p["script_traceback"][-1]


def test_profile_window_bounded_by_max_steps():
    import torch

    from gpuscope.measure.profile.profiler import profile_run

    w = torch.randn(16, 16)
    with profile_run("cpu", nvml=False, max_steps=3) as p:
        for _ in range(10):
            (w @ w).sum()
            p.step()
    s = p.summary
    assert s["steps"] == 3 and s["window_steps"] == 3 and len(p.step_marks) == 4
    assert s["kernel_count"] <= 4 * 3  # matmul and sum per recorded step, nothing after the window
    assert s["wall_s"] == p.stopped_at - p.step_marks[0]


def test_error_lines_leave_out_profiler_logs():
    from gpuscope.measure.profile.script import error_lines

    err = ("STAGE:2026-12-01 10:00:00 77:77 ActivityProfilerController.cpp:314] Completed Stage: Warm Up\n"
           "Traceback (most recent call last):\n  File \"t.py\", line 1\nRuntimeError: boom\n"
           "[W kineto_shim.cpp:372] Adding profiling metadata\n")
    assert error_lines(err) == ["Traceback (most recent call last):", "  File \"t.py\", line 1", "RuntimeError: boom"]


def test_knee_is_where_no_larger_batch_gains_enough():
    """A flat (noisy) first step must not end the search for the knee: gpt2 on a CPU read batch 1 while batch 16
    gave 2.83x the tokens/s."""
    from gpuscope.measure.tune.batch import knee, search_batch

    curve = {1: 100.0, 2: 104.0, 4: 150.0, 8: 220.0, 16: 283.0, 32: 290.0, 64: 292.0, 128: 293.0}
    r = search_batch(lambda b: {"tokens_per_s": curve[b]}, max_batch=128)
    assert r["knee_batch"] == 16 and r["best_batch"] == 128
    assert knee({b: {"status": "ok", "tokens_per_s": v} for b, v in curve.items()}, gain=0.02) == 32
    assert knee({1: {"status": "oom"}}) is None and knee({4: {"status": "ok", "tokens_per_s": 1.0}}) == 4


def test_memory_cap_stops_the_search_where_the_planner_runs_out():
    from gpuscope.measure.tune.memory_cap import memory_cap, planned_peak_fn
    from gpuscope.workloads.sets import TINY_LLAMA

    peak = lambda b: 1e9 + b * 0.5e9  # noqa: E731  weights 1 GB, 0.5 GB a sequence
    cap = memory_cap(peak, free=10e9, max_batch=256, fraction=0.9)
    assert cap["batch"] == 16 and cap["limited"] and cap["first_over"] == 17  # 9.0 GB <= 0.9 x 10 GB < 9.5 GB
    assert memory_cap(peak, free=100e9, max_batch=64)["batch"] == 64
    assert memory_cap(peak, free=1e9, max_batch=64)["batch"] is None
    assert memory_cap(peak, free=None, max_batch=64) == dict(memory_cap(peak, None, 64), batch=64, limited=False)
    real = planned_peak_fn("train", TINY_LLAMA, {"seq": 64, "precision": "fp32"})
    assert 0 < real(1) < real(8) < real(64)  # the planner's peak of the same trial grows with the batch


def test_tune_batch_capped_by_free_memory(monkeypatch):
    from gpuscope.measure.device.device import Device
    from gpuscope.measure.tune import batch as tune
    from gpuscope.measure.tune import memory_cap as mc
    from gpuscope.workloads.sets import TINY_LLAMA

    peak = mc.planned_peak_fn("train", TINY_LLAMA, {"seq": 16, "precision": "fp32"})
    monkeypatch.setattr(mc, "free_bytes", lambda dev: int((peak(4) + peak(5)) / 2 / 0.9))  # 4 fits, 5 does not
    r = tune.tune_batch("train", TINY_LLAMA, Device("cpu"), max_batch=256, fixed=8, seq=16, precision="fp32",
                        steps=1)
    assert [x["batch"] for x in r["rows"]] == [1, 2, 4] and r["memory_cap"]["batch"] == 4
    assert "planner puts batch 5" in r["memory_cap"]["stop_reason"]
    assert "fixed" not in {c["policy"] for c in r["comparison"]}  # batch 8 is past the cap: not tried


def test_doctor_infer_sizes_are_cpu_sized_on_a_cpu():
    from gpuscope.cli.doctor import _infer_sizes

    *sizes, note = _infer_sizes(None, None, None, "cpu", False)
    assert sizes == [32, 8, "fp32"] and "--prompt 32, --gen 8, --dtype fp32 (CPU-sized defaults" in note
    *sizes, note = _infer_sizes(512, None, "bf16", "cpu", False)
    assert sizes == [512, 8, "bf16"] and "--gen 8 (CPU-sized" in note  # what is given is kept
    assert _infer_sizes(None, None, None, "cpu", True) == (512, 64, "bf16", None)  # no run: the planner's defaults
