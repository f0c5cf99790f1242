"""`compare` / `advise` take measured numbers from the results store: matching rows only, newest per GPU, marked
measured with their source; --measured wins; a missing or corrupt --db is refused (exit 2) and never written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gpuscope.explain.compare_hw import InferWorkload, TrainWorkload
from gpuscope.explain.measured_source import from_store
from gpuscope.workloads import case_id, case_name
from gpuscope.workloads.sets import TINY_LLAMA, infer_case, train_case
from gpuscope.specs.models import load_model
from gpuscope.store.db import SQLITE_MAGIC, Store

MODEL = "llama-3.2-1b"
NVML = {"schema": "gpuscope.nvml/1", "unavailable": None, "samples": [], "throttled": False,
        "summary": {"n_samples": 40, "power_w_median": 512.0, "power_w_max": 600.0}}


def _infer_row(st, run, case, device="NVIDIA H200", status="ok", decode=145.0, nvml=True):
    res = {"status": status, "kind": "infer", "device_name": device, "batch": case["batch"], "prompt": case["prompt"],
           "gen": case["gen"], "ttft_s": 0.02, "e2e_s": 0.9, "tpot_s": case["batch"] / decode,
           "decode_tokens_per_s": decode, "peak_generate_bytes": 3 * 2**30}
    if nvml:
        res["nvml"] = NVML
    return st.put(run, case_id(case), "infer", case_name(case), case, res,
                  {"device_name": device, "benchmark_version": "gpuscope.measure/1", "hostname": "lab1"})


def _train_row(st, run, case, device="NVIDIA H200", tps=30000.0):
    res = {"status": "ok", "kind": "train", "device_name": device, "tokens_per_s": tps, "step_s": 0.27,
           "peak_bytes": 40 * 2**30, "nvml": NVML}
    return st.put(run, case_id(case), "train", case_name(case), case, res, {"device_name": device})


def _store(tmp_path):
    """ids: 1 old matching H200, 2 newer matching H200 (wins), 3 prompt 1024, 4 other model, 5 error status,
    6 eager engine, 7 unknown device, 8 matching train row, 9 H100 with another dtype."""
    p = tmp_path / "r.sqlite"
    graph = infer_case(MODEL, 1, 512, 128, engine="gs-compile", repeats=3)
    with Store.open(p) as st:
        r1, r2 = st.new_run("bench infer"), st.new_run("bench infer")
        ids = [_infer_row(st, r1, graph, decode=100.0),
               _infer_row(st, r2, graph, decode=145.0),
               _infer_row(st, r2, infer_case(MODEL, 1, 1024, 128, engine="gs-compile"), decode=999.0),
               _infer_row(st, r2, infer_case("tiny", 1, 512, 128, engine="gs-compile", config=TINY_LLAMA),
                          decode=998.0),
               _infer_row(st, r2, dict(graph, repeats=5), status="error", decode=997.0),
               _infer_row(st, r2, infer_case(MODEL, 1, 512, 128), decode=996.0),
               _infer_row(st, r2, dict(graph, device="cpu"), device="Intel Xeon", decode=995.0),
               _train_row(st, r2, train_case(MODEL, 4, 2048)),
               _infer_row(st, r2, infer_case(MODEL, 1, 512, 128, dtype="fp32", engine="gs-compile"),
                          device="NVIDIA H100 80GB HBM3", decode=994.0)]
    assert ids == list(range(1, 10))
    return p


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=60,
                          env=e)


def _rows(stdout: str) -> dict:
    d = json.loads(stdout)
    return d, {r["hardware"]: r for r in d["rows"]}


def test_compare_infer_takes_newest_matching_row(tmp_path):
    p = _store(tmp_path)
    before = p.read_bytes()
    r = run("compare", "--model", MODEL, "--gpu", "h200", "--gpu", "h100", "infer", "--db", str(p), "--json")
    assert r.returncode == 0, r.stderr
    d, rows = _rows(r.stdout)
    h200, h100 = rows["nvidia_h200_sxm"], rows["nvidia_h100_sxm"]
    assert h200["metrics"]["decode_tokens_per_s"] == 145.0 and h200["sources"]["decode_tokens_per_s"] == "measured"
    assert abs(h200["metrics"]["e2e_tokens_per_s"] - 128 / 0.9) < 1e-9
    assert h200["metrics"]["ttft_s"] == 0.02 and h200["metrics"]["power_w"] == 512.0
    assert h200["metrics"]["peak_gib_per_gpu"] == 3.0 and h200["sources"]["tokens_per_j"] == "measured"
    src = h200["measured_from"]["decode_tokens_per_s"]
    assert src == {"source": "store", "db": str(p), "id": 2, "field": "result.decode_tokens_per_s"}
    assert d["measured_sources"]["db"] == str(p) and d["measured_sources"]["db_rows"]["nvidia_h200_sxm"]["id"] == 2
    assert any(f"results store {p} (id 2" in n for n in h200["notes"])
    # H100's only row is fp32 while compare plans bf16 there: estimated
    assert h100["sources"]["decode_tokens_per_s"] == "estimated" and h100["measured_from"] == {}
    assert p.read_bytes() == before and not (tmp_path / "r.sqlite-wal").exists()

    r = run("compare", "--model", MODEL, "--gpu", "h200", "infer", "--db", str(p), "--markdown")
    assert r.returncode == 0 and "145.0 (m)" in r.stdout and "(id 2" in r.stdout


def test_non_matching_workloads_are_ignored(tmp_path):
    p = _store(tmp_path)
    # prompt 1024 matches only row 3; eager matches only row 6; batch 2 matches nothing
    _, rows = _rows(run("compare", "--model", MODEL, "--gpu", "h200", "infer", "--prompt", "1024", "--db", str(p),
                        "--json").stdout)
    assert rows["nvidia_h200_sxm"]["metrics"]["decode_tokens_per_s"] == 999.0
    _, rows = _rows(run("compare", "--model", MODEL, "--gpu", "h200", "infer", "--engine", "eager", "--db", str(p),
                        "--json").stdout)
    assert rows["nvidia_h200_sxm"]["metrics"]["decode_tokens_per_s"] == 996.0
    r = run("compare", "--model", MODEL, "--gpu", "h200", "infer", "--batch", "2", "--db", str(p), "--json")
    _, rows = _rows(r.stdout)
    assert set(rows["nvidia_h200_sxm"]["sources"].values()) <= {"estimated", "datasheet"}
    assert rows["nvidia_h200_sxm"]["measured_from"] == {}
    # another model (same store) is not measured
    m = from_store(p, load_model("llama-3.1-8b"), InferWorkload(engine="graph"))
    assert m.values == {}


def test_train_rows_and_measured_file_wins(tmp_path):
    p = _store(tmp_path)
    ms = from_store(p, load_model(MODEL), TrainWorkload(micro_batch=4, seq=2048))
    assert ms.values["nvidia_h200_sxm"]["tokens_per_s_per_gpu"] == 30000.0
    assert ms.values["nvidia_h200_sxm"]["power_w"] == 512.0 and ms.origin["nvidia_h200_sxm"]["id"] == 8
    assert 0 < ms.values["nvidia_h200_sxm"]["mfu"] < 1
    assert from_store(p, load_model(MODEL), TrainWorkload(micro_batch=4, seq=2048, recompute="full")).values == {}
    assert from_store(p, load_model(MODEL), TrainWorkload(micro_batch=4, seq=2048, grad_accum=4)).values == {}

    f = tmp_path / "m.json"
    f.write_text(json.dumps({"h200": {"power_w": 400}}))
    r = run("compare", "--model", MODEL, "--gpu", "h200", "train", "--micro-batch", "4", "--db", str(p),
            "--measured", str(f), "--json")
    assert r.returncode == 0, r.stderr
    d, rows = _rows(r.stdout)
    h = rows["nvidia_h200_sxm"]
    assert h["metrics"]["power_w"] == 400.0 and h["measured_from"]["power_w"] == {"source": "file", "path": str(f)}
    assert h["metrics"]["tokens_per_s_per_gpu"] == 30000.0 and h["measured_from"]["tokens_per_s_per_gpu"]["id"] == 8
    assert d["measured_sources"]["file"] == str(f)


def test_advise_reads_the_store(tmp_path):
    p = _store(tmp_path)
    r = run("advise", "infer", "--model", MODEL, "--gpu", "h200,h100", "--objective", "speed", "--db", str(p),
            "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["measured_sources"]["db_rows"]["nvidia_h200_sxm"]["id"] == 2
    assert "145.0 tok/s" in d["recommendation"]


def test_missing_db_and_default_path(tmp_path):
    gone = tmp_path / "none.sqlite"
    r = run("compare", "--model", MODEL, "--gpu", "h200", "infer", "--db", str(gone))
    assert r.returncode == 2 and "does not exist" in r.stderr and r.stderr.strip().count(". ") == 0
    assert len(r.stderr.strip().splitlines()) == 1 and not gone.exists()
    # default path: used only when the file exists, never created
    r = run("compare", "--model", MODEL, "--gpu", "h200", "infer", "--json", env={"GPUSCOPE_DB": str(gone)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["measured_sources"]["db"] is None and not gone.exists()
    p = _store(tmp_path)
    r = run("compare", "--model", MODEL, "--gpu", "h200", "infer", "--json", env={"GPUSCOPE_DB": str(p)})
    assert _rows(r.stdout)[1]["nvidia_h200_sxm"]["metrics"]["decode_tokens_per_s"] == 145.0
    r = run("compare", "--model", MODEL, "--gpu", "h200", "infer", "--json", "--no-db", env={"GPUSCOPE_DB": str(p)})
    assert _rows(r.stdout)[1]["nvidia_h200_sxm"]["sources"]["decode_tokens_per_s"] == "estimated"


def test_corrupt_db_is_refused_untouched(tmp_path):
    for name, data in (("junk.sqlite", b"not a database at all\n" * 10),
                       ("torn.sqlite", SQLITE_MAGIC + b"\x10\x00" + b"\xff" * 4000)):
        bad = tmp_path / name
        bad.write_bytes(data)
        r = run("compare", "--model", MODEL, "--gpu", "h200", "infer", "--db", str(bad), "--json")
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert str(bad) in r.stderr and len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""
        assert bad.read_bytes() == data
        assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith(name)) == [name]


def test_fused_other_attention_and_deferred_runs_match_only_their_own_plans(tmp_path):
    """A --fuse-proj or gs-gqa run is not the workload compare plans (HF's projections, SDPA), and hf-graph under
    --defer-stop is the plan hf-graph-defer, not hf-graph; plain hf-eager under --defer-stop matches no plan."""
    p = tmp_path / "r.sqlite"
    hfg = infer_case(MODEL, 1, 512, 128, engine="hf-graph", repeats=3)
    with Store.open(p) as st:
        r = st.new_run("bench infer")
        _infer_row(st, r, dict(hfg, defer_stop=True), decode=250.0)
        _infer_row(st, r, hfg, decode=180.0)
        # newer rows of other workloads: the newest matching row would be one of these without the filter
        _infer_row(st, r, dict(hfg, defer_stop=True, fuse_proj=True), decode=300.0)
        _infer_row(st, r, dict(hfg, defer_stop=True, attn="gs-gqa"), decode=299.0)
        _infer_row(st, r, dict(hfg, fuse_proj=True), decode=298.0)
        _infer_row(st, r, infer_case(MODEL, 1, 512, 128, defer_stop=True), decode=90.0)
    for engine, decode in (("hf-graph-defer", 250.0), ("hf-graph", 180.0)):
        m = from_store(p, load_model(MODEL), InferWorkload(engine=engine))
        assert m.values["nvidia_h200_sxm"]["decode_tokens_per_s"] == decode, (engine, m.values)
    assert from_store(p, load_model(MODEL), InferWorkload(engine="eager")).values == {}
