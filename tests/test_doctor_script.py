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
