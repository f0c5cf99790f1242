"""HTML reports without a browser (tests/test_browser.py draws them in Chromium): every figure is a valid plotly
figure, the page is one file with plotly.js inlined, `--html` leaves the printed result unchanged, the report's
predicted-vs-measured rows are `results compare`'s, the roofline's per-operation estimate is the planner's, results
files load into a database one record per measurement, and bad input is one sentence (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_inproc import run_cli

go = pytest.importorskip("plotly.graph_objects")

from gpuscope.report.html import figures, measured  # noqa: E402
from gpuscope.report.html import store_data as d  # noqa: E402
from gpuscope.report.html.page import render_page  # noqa: E402
from gpuscope.report.html.records import load_records, records_db  # noqa: E402
from gpuscope.report.html.views import sections_for  # noqa: E402
from gpuscope.store.db import Store  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "research" / "results"
H200 = [RESULTS / "2026-12-01-h200" / "measurements.jsonl", RESULTS / "2026-12-01-h200" / "lora.jsonl"]
X2 = [RESULTS / "2026-11-29-h200-x2" / "dist_train.jsonl", RESULTS / "2026-11-29-h200-x2" / "collectives.jsonl"]


_cli = run_cli  # tests/cli_inproc.py


def _json(*args: str) -> dict:
    r = _cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def store_db(tmp_path_factory) -> Path:
    return records_db([str(p) for p in H200 + X2], tmp_path_factory.mktemp("rec") / "r.sqlite")


def _valid(fig: dict) -> None:
    go.Figure(fig)  # raises ValueError on any property plotly does not know


def test_every_figure_of_a_command_is_a_valid_plotly_figure():
    docs = [_json("plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "4", "--ops"),
            _json("plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200"),
            _json("plan", "train", "--model", "llama-3.2-1b", "--gpu", "h200", "--seq", "1024", "--ops"),
            _json("compare", "--model", "llama-3.1-8b", "--gpu", "h200,h100,rtx-4090", "infer", "--no-db"),
            _json("advise", "infer", "--model", "llama-3.1-8b", "--no-db"),
            _json("plan", "train", "--model", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "8", "--search"),
            _json("plan", "serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--requests", "64", "--prompt", "256",
                  "--gen", "32", "--curve")]
    n = 0
    for doc in docs:
        figs = [f for s in sections_for(doc) for f in s.figures if f]
        assert figs, doc["schema"]
        for f in figs:
            _valid(f)
            n += 1
    assert n >= 12
    serve = figures.serve_curve_figure(docs[-1])
    assert [len(t["x"]) for t in serve["data"]] == [len(docs[-1]["curve"])] * 4 and docs[-1]["curve"]


def test_time_figure_stacks_the_estimates_operations(tmp_path):
    est = _json("plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "4", "--ops")
    fig = figures.time_figure(est)
    gpu = {p: sum(o["gpu_s"] for o in est["ops"] if o["phase"] == p) * 1e3 for p in ("prefill", "decode")}
    drawn = {p: sum(y for t in fig["data"] for x, y in zip(t["x"], t["y"]) if x == p) for p in gpu}
    assert drawn == pytest.approx(gpu)  # every operation's time is in its phase's bar, "other" included
    mem = figures.memory_figure(est)
    at_peak = sum(t["y"][0] for t in mem["data"] if t["x"] == ["at the peak"])
    assert at_peak == pytest.approx(est["memory"]["required_bytes_per_gpu"] / 2**30, rel=1e-6)


def test_plan_html_is_one_file_and_leaves_the_json_unchanged(tmp_path):
    args = ("plan", "infer", "--model", "llama-3.2-1b", "--gpu", "h200", "--batch", "2", "--json")
    plain = _cli(*args)
    out = tmp_path / "p.html"
    with_html = _cli(*args, "--html", str(out))
    assert with_html.returncode == 0, with_html.stderr
    assert with_html.stdout == plain.stdout  # the page asks for ops; the printed JSON does not get them
    text = out.read_text()
    assert text.count('class="gs-chart"') == 2 and "<script src=" not in text
    assert len(text) > 3_000_000  # plotly.js inlined (its ~4.8 MB bundle)


def test_plan_serve_html_draws_the_serving_views_and_leaves_the_json_unchanged(tmp_path):
    args = ("plan", "serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--requests", "32", "--prompt", "256",
            "--gen", "32", "--curve", "--json")
    plain = _cli(*args)
    out = tmp_path / "serve.html"
    with_html = _cli(*args, "--html", str(out))
    assert with_html.returncode == 0, with_html.stderr
    assert with_html.stdout == plain.stdout
    text = out.read_text()
    # the serving sections (report/html/views.serve_sections): throughput and latency, the curve, the memory
    assert 'id="serve-curve"' in text and 'id="serve-memory"' in text and text.count('class="gs-chart"') == 2


def test_report_rows_are_results_compare_rows(store_db):
    with Store.open(store_db) as st:
        rows = st.all()
    acc, skipped = d.accuracy_rows(rows)
    cmp = _json("results", "compare", "--db", str(store_db))
    got = {(r["id"], r["metric"]): r["error"] for r in acc}
    assert got == {(r["id"], r["metric"]): r["error"] for r in cmp["rows"]}
    assert len(got) >= 20 and skipped == []
    fig = measured.accuracy_figure(acc)
    _valid(fig)
    plotted = sum(len(t["x"]) for t in fig["data"] if t.get("customdata"))
    assert plotted == sum(1 for r in acc if r["error"] is not None)
    err = measured.error_figure(acc)
    _valid(err)
    assert sorted(x for t in err["data"] for x in t["x"]) == sorted(r["error"] * 100 for r in acc)


def test_roofline_points_and_ceilings_of_stored_rows(store_db):
    with Store.open(store_db) as st:
        rows = st.all()
    ceil = d.ceilings(rows)["NVIDIA H200"]
    micro = [r["result"] for r in rows if r["kind"] == "micro" and r["result"].get("bench") == "matmul"]
    assert ceil["matmul_tflops"]["bf16"] == max(max(m["tflops"], m.get("tflops_achievable") or 0) for m in micro
                                                if m["dtype"] == "bf16")
    pts = d.matmul_points(rows)["NVIDIA H200"] + d.workload_points(rows)["NVIDIA H200"]
    assert {p["kind"] for p in pts} >= {"infer prefill", "infer decode", "train forward+backward", "matmul bf16"}
    decode = [p for p in pts if p["kind"] == "infer decode"]
    assert all(p["intensity"] < 4 for p in decode)  # batch-1 decode reads every weight once a token
    _valid(measured.roofline_figure("NVIDIA H200", ceil, pts))
    _valid(measured.scaling_figure(d.dist_runs(rows)))
    _valid(measured.collectives_figure(d.collective_points(rows)))


def test_ops_estimate_is_the_planners_estimate(store_db):
    """store_data.ops_estimate restates workloads/infer.estimate and workloads/train.estimate with ops: the same
    times for every stored case."""
    from gpuscope import workloads
    from gpuscope.specs.hardware import load_hardware

    hw = load_hardware("h200")
    with Store.open(store_db) as st:
        cases = [r["config"] for r in st.all() if r["kind"] in ("infer", "train")]
    checked = 0
    for c in cases:
        est = d.ops_estimate(c, hw)
        if est is None:
            assert c.get("lora_r") is not None
            continue
        assert est.time == workloads.estimate_for(c, hw).time and est.ops
        checked += 1
    assert checked >= 3


def test_records_load_one_measurement_each(tmp_path):
    lines = [ln for p in H200 for ln in p.read_text().splitlines() if ln.strip()]
    db = records_db([str(p) for p in H200], tmp_path / "r.sqlite")
    with Store.open(db) as st:
        rows = st.all()
        runs = st.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert len(rows) == len(lines) and runs == len(H200)
    assert all(r["provenance"]["imported_from"].startswith(str(RESULTS)) for r in rows)


def test_report_command_and_its_bad_input(tmp_path, store_db):
    out = tmp_path / "r.html"
    r = _cli("report", "--db", str(store_db), "--kind", "train", "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert 'id="accuracy"' in text and 'id="provenance"' in text and 'id="collectives"' not in text
    for args, words in [(("--db", str(tmp_path / "none.sqlite")), "does not exist"),
                        (("--db", str(store_db), "--run", "nope"), "holds no measurements of run 'nope'"),
                        (("--db", str(store_db), "--records", str(H200[0])), "not both"),
                        (("--records", str(tmp_path / "x.jsonl")), "does not exist")]:
        bad = _cli("report", *args, "--out", str(tmp_path / "bad.html"))
        assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert not (tmp_path / "bad.html").exists()


def test_page_escapes_text():
    from gpuscope.report.html.page import Section, table

    page = render_page("<t>", [Section("<s>", notes=["<script>x</script>"], html=table(["<c>"], [["<v>"]]))])
    assert "<script>x</script>" not in page and "&lt;script&gt;x" in page and "&lt;v&gt;" in page


def test_a_figure_with_nan_or_infinity_is_still_json():
    from gpuscope.report.html.page import chart

    fig = {"data": [{"type": "scatter", "x": [1.0, 2.0], "y": [float("nan"), float("inf")]}], "layout": {}}
    assert "NaN" not in chart(fig) and "Infinity" not in chart(fig) and "[null, null]" in chart(fig)


def test_bench_html_is_the_report_of_the_run_it_made(monkeypatch, tmp_path):
    """`bench infer --html`: the page of the run just stored (its rows only), drawn as `gpuscope report --run` is
    (the measurement itself faked: an H200 record of research/results stored as the run's)."""
    pytest.importorskip("torch")
    import gpuscope.pipeline.bench as pipeline_bench

    rec = next(json.loads(ln) for ln in H200[0].read_text().splitlines() if '"kind": "infer"' in ln)

    def one_stored(s, cases, target, timeout, phase_budget_s=None):
        mid = s.store.put(s.run_id, rec["case_id"], "infer", rec["case_id"].split("#")[0], rec["case"],
                          rec["result"], rec["provenance"])
        s.add({"id": mid, "key": rec["case_id"], "name": "x", "skipped": False, "status": "ok",
               "result": rec["result"]})

    monkeypatch.setattr(pipeline_bench, "run_workloads", one_stored)
    db, out = tmp_path / "r.sqlite", tmp_path / "run.html"
    with Store.open(db) as st:  # an earlier run in the same store is not on the page
        load_records(st, H200[1])
    r = _cli("bench", "infer", "--model", "llama-3.2-1b", "--device", "cpu", "--gpu", "h200", "--db", str(db),
             "--html", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert f"wrote {out}" in r.stderr and "1 measurements (infer) of 1 run(s)" in text
    assert rec["case_id"].split("#")[0] in text
    assert "lora_r16" not in text and 'id="accuracy"' in text


def test_without_plotly_html_is_one_sentence_and_plan_still_plans():
    code = ("import sys; sys.modules['plotly'] = None\n"  # plotly not installed
            "from gpuscope.cli import main\n"
            "main(sys.argv[1:])")
    run = lambda *a: subprocess.run([sys.executable, "-c", code, *a], capture_output=True, text=True, timeout=120)
    bad = run("plan", "infer", "--model", "gpt2", "--gpu", "h200", "--html", "x.html")
    assert bad.returncode == 2 and bad.stderr.strip() == ("error: HTML reports need plotly (pip install "
                                                          "'gpuscope[report]'): it ships the plotly.js the page inlines.")
    ok = run("plan", "infer", "--model", "gpt2", "--gpu", "h200", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["schema"] == "gpuscope.estimate/1"
