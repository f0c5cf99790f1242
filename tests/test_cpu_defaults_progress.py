"""bench on a CPU: the CPU's defaults (fp32, CPU-sized inputs) where a flag is not given, said on stderr; a given
value kept; a case's phase and repeat told to the suite while it runs (measure/runner/progress.py). The CLI run
that shows the defaults on stderr and a clean JSON stdout is tests/test_host_ceilings.py's (one run, both checks)."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuscope.cli import bench_cpu  # noqa: E402
from gpuscope.measure.runner import progress  # noqa: E402
from gpuscope.measure.runner.suite import child_env, run_one  # noqa: E402


def test_defaults_on_a_cpu_take_fp32_and_cpu_sizes_and_keep_what_is_given():
    got, note = bench_cpu.defaults("bench infer", "cpu", prompt=8, gen=None, dtype=None)
    assert got == {"prompt": 8, "gen": bench_cpu.CPU["gen"], "dtype": "fp32"}
    assert note.startswith("bench infer on a CPU: --gen 8, --dtype fp32 (the CPU defaults:") and "--prompt" not in note
    assert bench_cpu.defaults("bench train", "cpu", seq=None, precision="amp-bf16")[0] == {"seq": 128,
                                                                                         "precision": "amp-bf16"}
    assert bench_cpu.defaults("bench micro", "cpu", micro_dtype=None)[0] == {"micro_dtype": ["fp32"]}
    # nothing taken, nothing said
    assert bench_cpu.defaults("bench train", "cpu", seq=64, precision="bf16") == ({"seq": 64, "precision": "bf16"},
                                                                                  None)
    assert bench_cpu.case_keys("infer", "cpu") == {"decode_iters": 4} and bench_cpu.case_keys("train", "cpu") == {}
    assert bench_cpu.help_for("dtype") == "default bf16, fp32 on a CPU"


def test_progress_lines_parse_and_read_as_phase_and_repeat(monkeypatch, capfd):
    assert progress.parse("ordinary stderr line\n") is None
    assert progress.parse(progress.MARK + "{not json\n") is None
    assert progress.parse(progress.MARK + json.dumps({"i": 1}) + "\n") is None  # no phase
    assert progress.text({"phase": "timed generate", "i": 2, "n": 3}) == "timed generate 2/3"
    assert progress.text({"phase": "timed generate", "i": 5, "n": 3}) == "timed generate 5 (>= 3)"  # a time floor
    assert progress.text({"phase": "building the model"}) == "building the model"
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    progress.say("warm-up", 1, 2)
    assert capfd.readouterr().err == ""  # nobody asked: nothing written
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    assert list(progress.repeats("timed step", iter(range(2)), 2)) == [0, 1]
    lines = capfd.readouterr().err.splitlines()
    assert [progress.parse(x) for x in lines] == [{"phase": "timed step", "i": 1, "n": 2},
                                                  {"phase": "timed step", "i": 2, "n": 2}]
    assert progress.PROGRESS_ENV not in child_env() and child_env(True)[progress.PROGRESS_ENV] == "1"


def test_the_suite_hands_on_progress_as_it_comes_and_keeps_it_out_of_the_record(tmp_path, monkeypatch):
    """run_one reads the case's stderr line by line: each progress line to on_progress, in order, none in the
    record's stderr tail; stdout's JSON line is the record. A stand-in interpreter plays the case's process (the
    real one's phases: tests/test_measure_cpu.py::test_run_case_prints_one_json_line_and_tells_its_phases_on_stderr).
    """
    from gpuscope.measure.runner import suite

    fake = tmp_path / "fakepy"
    lines = [progress.MARK + json.dumps({"phase": "timed step", "i": i, "n": 2}) for i in (1, 2)]
    fake.write_text("#!/bin/sh\n[ \"$GPUSCOPE_PROGRESS\" = 1 ] || exit 9\n"
                    + "".join(f"echo '{x}' >&2\n" for x in lines) + "echo 'a library warning' >&2\n"
                    + "echo '{\"result\": {\"status\": \"error\", \"error\": \"made up\"}}'\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(suite.sys, "executable", str(fake))
    events: list = []
    rec = run_one({"kind": "infer", "model": "x"}, timeout_s=60, on_progress=events.append)
    assert events == [{"phase": "timed step", "i": 1, "n": 2}, {"phase": "timed step", "i": 2, "n": 2}]
    assert rec["result"]["error"] == "made up" and rec["returncode"] == 3
    assert "a library warning" in rec["result"]["stderr_tail"] and progress.MARK not in rec["result"]["stderr_tail"]
    fake.write_text("#!/bin/sh\nsleep 30\n")  # a case stopped by its timeout is still a result
    assert run_one({"kind": "infer", "model": "x"}, timeout_s=0.5, on_progress=events.append)["result"]["status"] \
        == "timeout"


@pytest.mark.parametrize("args, flag", [
    (("bench", "infer", "--model", "llama-3.2-1b", "--prompt", "0", "--device", "cpu"), "prompt"),
    (("bench", "infer", "--model", "llama-3.2-1b", "--dtype", "fp6", "--device", "cpu"), "dtype"),
    (("bench", "train", "--model", "llama-3.2-1b", "--seq", "-4", "--device", "cpu"), "seq"),
    (("bench", "train", "--model", "llama-3.2-1b", "--precision", "int3", "--device", "cpu"), "precision"),
    (("bench", "micro", "--dtype", "fp64", "--device", "cpu"), "dtype"),
])
def test_bad_inputs_beside_the_cpu_defaults_are_one_sentence(args, flag, tmp_path, capsys):
    from gpuscope.cli import main

    with pytest.raises(SystemExit) as e:  # in this process: the checks run before anything is measured
        main([*args, "--db", str(tmp_path / "r.sqlite")])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "Traceback" not in err and flag in err
    assert err.strip().count("\n") == 0, err  # one sentence: the CPU defaults' note is said only after the checks


def test_a_case_above_the_memory_free_here_is_refused_before_it_starts(monkeypatch, capsys):
    from gpuscope.errors import UserError
    from gpuscope.workloads.sets import infer_case, train_case

    monkeypatch.setattr(bench_cpu, "host_free_bytes", lambda: 24 * 10**9)
    big = train_case("llama-3.2-1b", 4, 2048, "amp-bf16")  # planned ~48 GB: killed after minutes when it ran
    with pytest.raises(UserError, match=r"needs about 4\d\.\d GB \(the planner's peak\), more than 90% of the 24\.0 GB"):
        bench_cpu.ready(big, "cpu", "a note")
    assert capsys.readouterr().err == ""  # refused before the defaults' note: one sentence
    small = infer_case("llama-3.2-1b", 1, 64, 16, dtype="fp32")  # ~5 GB
    bench_cpu.ready(small, "cpu", "a note")
    assert capsys.readouterr().err == "a note\n"
    monkeypatch.setattr(bench_cpu, "host_free_bytes", lambda: None)  # unknown free memory: not guessed
    bench_cpu.ready(big, "cpu", None)


@pytest.mark.parametrize("kind", ["infer", "train"])
def test_bench_hands_the_cpu_phase_budget_to_the_case_process_and_leaves_its_own_environment(kind, tmp_path,
                                                                                          monkeypatch, capsys):
    """An in-process `bench infer|train --device cpu`: the case's process gets the phase budget (bench_cpu.
    PHASE_BUDGET_S, or the one this environment already sets), and os.environ is as it was after the call (a later
    in-process command does not inherit a budget). A stand-in interpreter plays the case's process and writes down
    the budget it was given."""
    from gpuscope.cli import main
    from gpuscope.measure.runner import suite
    from gpuscope.workloads.sets import TINY_LLAMA

    cfg = tmp_path / "tiny" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(TINY_LLAMA))
    seen = tmp_path / "budget.txt"
    fake = tmp_path / "fakepy"
    fake.write_text(f"#!/bin/sh\nprintf '%s' \"${progress.BUDGET_ENV}\" > {seen}\n"
                    "echo '{\"result\": {\"status\": \"error\", \"error\": \"stand-in case\"}}'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(suite.sys, "executable", str(fake))
    monkeypatch.delenv(progress.BUDGET_ENV, raising=False)
    sizes = ["--prompt", "8", "--gen", "2"] if kind == "infer" else ["--seq", "16", "--steps", "2"]
    args = ["bench", kind, "--model", str(cfg.parent), *sizes, "--device", "cpu", "--gpu", "h100"]
    for preset, want in ((None, f"{bench_cpu.PHASE_BUDGET_S:g}"), ("7", "7")):
        if preset:
            monkeypatch.setenv(progress.BUDGET_ENV, preset)
        before = dict(os.environ)
        with pytest.raises(SystemExit) as e:  # the stand-in case failed: exit 1
            main([*args, "--db", str(tmp_path / f"r{preset}.sqlite")])
        assert e.value.code == 1, capsys.readouterr().err
        assert dict(os.environ) == before  # nothing set (or removed) in this process
        assert seen.read_text() == want
    assert child_env(phase_budget_s=20.0)[progress.BUDGET_ENV] == "7"  # the environment's own budget is kept
    monkeypatch.delenv(progress.BUDGET_ENV)
    assert progress.BUDGET_ENV not in child_env() and child_env(phase_budget_s=20.0)[progress.BUDGET_ENV] == "20"
