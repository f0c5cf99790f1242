"""The bench pipeline as a library and the bench commands' exit codes: `results compare` and `bench --json` report
the same errors for the same stored rows; a run with failed cases exits 1 with the count on the last line; an
interrupted one exits 130 saying what was kept; a collectives job whose wall timeout fired exits 1."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from gpuscope.pipeline.accuracy import DERIVED, by_metric  # noqa: E402
from gpuscope.workloads.sets import TINY_LLAMA, infer_case  # noqa: E402


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_results_compare_and_bench_report_the_same_errors(tmp_path):
    """A tiny train case benched through the CLI and a tiny infer case through the library (pipeline.bench.run_cases),
    both planned on the catalog's H200; `results compare --gpu h200` over the same database gives every row's error
    exactly as bench did, and the same accuracy counts."""
    from gpuscope.pipeline.bench import run_cases

    db = str(tmp_path / "r.sqlite")
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    r = _cli("bench", "train", "--model", str(cfg), "--micro-batch", "1", "--seq", "32", "--steps", "1",
             "--warmup", "0", "--precision", "fp32", "--device", "cpu", "--gpu", "h200", "--db", db, "--json")
    assert r.returncode == 0, r.stderr
    bench = json.loads(r.stdout)["measurements"]
    lib = run_cases([infer_case("tiny-llama", 1, 16, 3, dtype="fp32", repeats=1, config=TINY_LLAMA,
                                device="cpu")], db=db, gpu="h200")
    assert lib.failed == [] and lib.measured == 1 and lib.to_json()["schema"] == "gpuscope.bench/1"
    bench += lib.measurements
    want = {(m["name"], row["metric"]): row["error"] for m in bench for row in m["estimate"]["rows"]
            if row["metric"] not in DERIVED}
    assert {k[1] for k in want} >= {"peak_bytes", "step_s", "prefill_s"}

    c = _cli("results", "compare", "--gpu", "h200", "--db", db, "--json")
    assert c.returncode == 0, c.stderr
    doc = json.loads(c.stdout)
    got = {(row["case"], row["metric"]): row["error"] for row in doc["rows"]}
    assert got == want and doc["skipped"] == []
    assert doc["summary"] == by_metric([row for m in bench for row in m["estimate"]["rows"]])


def _patch_all(monkeypatch, workloads_step):
    import gpuscope.cli.bench as bench
    import gpuscope.pipeline.bench as pipeline_bench

    monkeypatch.setattr(pipeline_bench, "run_micro", lambda *a, **k: [])
    monkeypatch.setattr(pipeline_bench, "run_calibration", lambda *a, **k: None)
    monkeypatch.setattr(bench, "_on_accelerator", lambda device: False)
    monkeypatch.setattr(pipeline_bench, "run_workloads", workloads_step)


def _main(capsys, *args) -> tuple[int, list[str]]:
    from gpuscope.cli import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code, capsys.readouterr().err.strip().splitlines()


def test_bench_all_with_failed_cases_exits_1_with_the_count_last(monkeypatch, tmp_path, capsys):
    def two_fail(s, cases, target, timeout):
        for i, status in enumerate(("ok", "error", "timeout")):
            s.add({"id": i, "key": f"k{i}", "name": f"case{i}", "skipped": False, "status": status, "result": {}})

    _patch_all(monkeypatch, two_fail)
    code, err = _main(capsys, "bench", "all", "--device", "cpu", "--db", str(tmp_path / "r.sqlite"))
    assert code == 1 and err[-1].startswith("2 of 3 cases failed"), err


def test_bench_all_interrupted_exits_130_saying_what_was_kept(monkeypatch, tmp_path, capsys):
    def one_then_interrupt(s, cases, target, timeout):
        s.add({"id": 1, "key": "k", "name": "case", "skipped": False, "status": "ok", "result": {}})
        raise KeyboardInterrupt

    _patch_all(monkeypatch, one_then_interrupt)
    code, err = _main(capsys, "bench", "all", "--device", "cpu", "--db", str(tmp_path / "r.sqlite"))
    assert code == 130 and "interrupted: 1 finished measurements of this run are kept" in err[-1], err


def test_collectives_whose_wall_timeout_fired_exit_1(monkeypatch, tmp_path, capsys):
    import gpuscope.measure.distributed.launch as launch

    def timed_out(module, args, nproc, **kw):
        kw["on_record"]({"op": "all_reduce", "nbytes": 8, "dtype": "fp32", "backend": "gloo", "world_size": 2,
                         "nnodes": 1, "nproc_per_node": 2, "device": "cpu", "status": "ok", "size": "8B",
                         "time_s": 1e-5, "busbw_gbs": 0.1, "correct": True})
        raise launch.DistributedRunError("the job did not finish within its wall timeout of 5 s")

    monkeypatch.setattr(launch, "run_torchrun", timed_out)
    code, err = _main(capsys, "bench", "collectives", "--backend", "gloo", "--nproc", "2", "--wall-timeout", "5",
                      "--db", str(tmp_path / "r.sqlite"))
    assert code == 1 and "wall timeout" in " ".join(err) and err[-1].startswith("the job failed"), err
    from gpuscope.store.db import Store

    with Store.open(tmp_path / "r.sqlite") as st:  # what the job measured before it failed is kept
        assert [r["kind"] for r in st.list()] == ["collective"]
