"""A CPU run gets an estimate beside it with no manual step: this host's ceilings measured once, kept under the
gpuscope home, reused by later runs and by `results compare`, and said as such (pipeline/host_ceilings.py)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuscope.pipeline import host_ceilings  # noqa: E402
from gpuscope.pipeline.estimate import estimate_beside  # noqa: E402
from gpuscope.workloads.sets import TINY_LLAMA  # noqa: E402

FAKE_MICRO = [{"status": "ok", "bench": "matmul", "dtype": "fp32", "tflops": 0.04},
              {"status": "ok", "bench": "matmul", "dtype": "bf16", "tflops": 0.09},
              {"status": "ok", "bench": "memory", "op": "copy", "gbs": 9.5},
              {"status": "oom", "bench": "matmul", "dtype": "fp16"}]


def _cli(home, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, GPUSCOPE_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=300,
                          env=env)


FAKE_COSTS = {"op_s": 9e-6, "forward_s": 3e-4, "step_s": 5e-4, "setup_s": 2e-3, "gpt2_op_s": 3e-5,
              "gpt2_forward_s": 4e-4, "gemm_rows": [1, 4, 16, 64, 256], "gemm_tflops": [0.01, 0.02, 0.05, 0.08, 0.1],
              "elementwise_cache_gbs": 60.0, "elementwise_dram_gbs": 15.0, "first_touch_gbs": 2.5, "threads": 2}


def test_kept_ceilings_are_found_for_this_host_only_and_say_when_and_by_what(tmp_path, monkeypatch):
    from gpuscope.estimate.cpu import cpu_costs
    from gpuscope.estimate.engines import engine_for
    from gpuscope.measure.host import cpu_costs as measured

    monkeypatch.setenv("GPUSCOPE_HOME", str(tmp_path))
    monkeypatch.setattr(measured, "cpu_costs", lambda: dict(FAKE_COSTS))  # what a host measured (seconds)
    name = "x86_64"
    assert host_ceilings.lookup(socket.gethostname(), name) is None
    path = host_ceilings.save("cpu", "`gpuscope bench infer` (run 7)", FAKE_MICRO)
    assert path.parent == tmp_path / "calibrated" and path.name.startswith("host-")
    from gpuscope.pipeline.micro import open_device

    name = open_device("cpu").device_name()
    hw, line = host_ceilings.lookup(socket.gethostname(), name)
    assert hw.peak("fp32") == pytest.approx(0.04) and hw.peak("bf16") == pytest.approx(0.09)
    assert not hw.supports("fp16")  # not measured (an OOM result): no rate made up for it
    # the per-op costs kept beside the ceilings: the engine's cost per kernel and the planner's CPU model
    eng = engine_for("eager", hw)
    assert (eng.launch_s, eng.forward_s, eng.step_s, eng.setup_s) == (9e-6, 3e-4, 5e-4, 2e-3)
    c = cpu_costs(hw)
    assert c.tflops == (0.01, 0.02, 0.05, 0.08, 0.1) and (c.dram_gbs, c.first_touch_gbs) == (15.0, 2.5)
    assert c.family_costs == (("gpt2", 3e-5, 4e-4),) and c.fp32_tflops == pytest.approx(0.04)
    assert line.startswith(f"this host's measured ceilings ({path}), measured 20") and \
        line.endswith("by `gpuscope bench infer` (run 7)")
    assert host_ceilings.lookup("some-other-host", name) is None  # another host's CPU: not planned on ours
    path.write_text("not = [toml")  # a file broken by hand is measured again, not a traceback
    assert host_ceilings.lookup(socket.gethostname(), name) is None


def test_a_cpu_record_without_kept_ceilings_says_why_and_how_it_gets_them(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_HOME", str(tmp_path))
    rec = {"case": {"kind": "infer"}, "result": {"status": "ok", "device": "cpu", "device_name": "x86_64"},
           "hostname": socket.gethostname()}
    why = estimate_beside(rec, None)["unavailable"]
    assert "no ceilings measured for this host's CPU" in why and "next `gpuscope bench` run" in why


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory):
    """One bench infer on the CPU into an empty home (it measures the ceilings), a second (it reuses them), and
    results compare over both: the runs every test below reads."""
    d = tmp_path_factory.mktemp("hc")
    home, db, cfg = d / "home", str(d / "r.sqlite"), d / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    common = ("--model", str(cfg), "--prompt", "8", "--repeats", "1", "--device", "cpu", "--db", db)
    first = _cli(home, "bench", "infer", *common, "--json")  # --gen and --dtype: the CPU's defaults
    files = sorted((home / "calibrated").glob("host-*.toml"))
    stamp = files[0].stat().st_mtime_ns if files else None
    # the later two through the entry point in this process (the case itself still runs in its own process)
    second = _in_process(home, "bench", "infer", *common, "--gen", "5")
    compare = _in_process(home, "results", "compare", "--db", db, "--json")
    return {"first": first, "second": second, "compare": compare, "files": files, "stamp": stamp}


def _in_process(home, *args: str) -> subprocess.CompletedProcess:
    """`gpuscope ARGS` through cli.main in this process, its exit code and streams as a CompletedProcess."""
    import contextlib
    import io

    from gpuscope.cli import main

    out, err, code = io.StringIO(), io.StringIO(), 0
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setenv("GPUSCOPE_HOME", str(home))
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code or 0
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_the_first_cpu_run_takes_the_cpu_defaults_measures_the_ceilings_and_keeps_json_clean(first_runs):
    r = first_runs["first"]
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)  # stdout is the JSON document alone (notes and progress stay on stderr)
    (m,) = doc["measurements"]
    res = m["result"]
    assert (res["dtype"], res["prompt"], res["gen"]) == ("fp32", 8, 8)  # --prompt kept, --gen/--dtype the CPU's
    assert "bench infer on a CPU: --gen 8, --dtype fp32 (the CPU defaults:" in r.stderr
    assert "@gpuscope-progress" not in r.stderr  # no terminal: no status line, and no raw progress line either
    est = m["estimate"]
    assert "rows" in est, est  # planned on the ceilings this run measured, not "no estimate"
    assert est["hardware_source"].startswith("this host's measured ceilings") and "bench infer" in \
        est["hardware_source"]
    assert any(x["metric"].endswith("_s") and x["error"] is not None for x in est["rows"]), est["rows"]
    (path,) = first_runs["files"]
    assert path.stat().st_mtime_ns == first_runs["stamp"]  # the second run read it, did not write it again
    from gpuscope.estimate.cpu import cpu_costs
    from gpuscope.specs.hardware import load_hardware

    c = cpu_costs(load_hardware(str(path)))  # measured by that first run: the planner prices the CPU on them
    assert c is not None and all(r > 0 and math.isfinite(r) for r in (*c.tflops, c.cache_gbs, c.dram_gbs))


def test_a_later_run_reuses_them_and_says_so_under_its_table(first_runs):
    r = first_runs["second"]
    assert r.returncode == 0, r.stderr[-2000:]
    assert "measuring this host's ceilings once" not in r.stderr
    assert "CPU workloads planned on this host's measured ceilings" in r.stderr
    assert "estimate on this host's measured ceilings" in r.stderr  # the table's caption
    assert "no estimate" not in r.stderr


def test_results_compare_shows_the_cpu_rows_with_errors_and_where_they_were_planned(first_runs):
    r = first_runs["compare"]
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert not doc["skipped"], doc["skipped"]
    assert any(x["error"] is not None for x in doc["rows"])
    (src,) = doc["hardware_sources"]
    assert src.startswith("this host's measured ceilings") and len(doc["hardware_sources"][src]) == 2


def test_ceilings_kept_before_the_per_op_costs_are_measured_again_once(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from gpuscope.measure.host import cpu_costs as measured
    from gpuscope.measure.micro.calibrate import calibration_toml
    from gpuscope.measure.micro.bench import ceilings
    from gpuscope.pipeline.micro import open_device

    monkeypatch.setenv("GPUSCOPE_HOME", str(tmp_path))
    monkeypatch.setattr(measured, "cpu_costs", lambda: dict(FAKE_COSTS))
    name = open_device("cpu").device_name()
    old = host_ceilings.path_for(socket.gethostname(), name)
    old.parent.mkdir(parents=True)
    old.write_text(calibration_toml(name, "cpu", ceilings(FAKE_MICRO), None, "Measured by `x` for the estimates."))
    saved = []
    real_save = host_ceilings.save
    monkeypatch.setattr(host_ceilings, "save", lambda *a: saved.append(a) or real_save(a[0], a[1], FAKE_MICRO))

    def session():
        return SimpleNamespace(host_ceilings=None, command="bench infer", run_id="r1", note=lambda m: None,
                               warn=lambda m: None)

    s = session()
    host_ceilings.ensure(s, [{"device": "cpu"}], None)
    assert len(saved) == 1 and "[measured.cpu]" in old.read_text() and s.host_ceilings
    host_ceilings.ensure(session(), [{"device": "cpu"}], None)
    assert len(saved) == 1  # the file now holds them: reused, not measured again
