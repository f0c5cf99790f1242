"""Python's garbage collector in timed phases (measure/host/gc_pauses.py), bench infer --gc-freeze, and the doctor's
gc_pauses finding."""

from __future__ import annotations

import gc
import json

import pytest

from gpuscope.explain import findings as F
from gpuscope.measure.host.gc_pauses import GCPauses, freeze


def test_gc_pauses_counts_collections_by_generation_and_their_time():
    junk = [[i] for i in range(50_000)]  # something to walk
    with GCPauses() as p:
        gc.collect()
        gc.collect(0)
    s = p.summary()
    assert s["gc_collections_by_generation"][2] >= 1 and s["gc_collections_by_generation"][0] >= 1
    assert s["gc_pause_s"] > 0 and s["gc_pause_s"] == pytest.approx(sum(s["gc_pause_s_by_generation"]))
    assert p._cb not in gc.callbacks  # removed on exit
    del junk


def test_freeze_moves_the_live_objects_out_of_reach():
    try:
        n = freeze()
        assert n > 1000 and len(gc.get_objects()) < n
    finally:
        gc.unfreeze()


def test_gc_pauses_finding():
    """Fires when the collector held the host for >= 5% of the bare run; its speed-up is bare / (bare - pauses)."""
    s = {"gc": {"gc_pause_s": 0.02, "bare_s": 0.1, "gc_collections_by_generation": [40, 3, 2],
                "tracked_objects": 800_000}}
    (f,) = [x for x in F.diagnose(s) if x.code == "gc_pauses"]
    assert f.speedup == pytest.approx(0.1 / 0.08) and f.evidence["share"] == pytest.approx(0.2)
    assert "gc.freeze()" in f.fix and "--gc-freeze" in f.fix
    for quiet in ({"gc": {"gc_pause_s": 0.002, "bare_s": 0.1}}, {}, {"gc": {"gc_pause_s": 0.02}}):
        assert not [x for x in F.diagnose(quiet) if x.code == "gc_pauses"]


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.slow
def test_bench_infer_reports_gc_pauses_and_freezes_on_request(tmp_path):
    from cli_inproc import run_cli
    from gpuscope.workloads.sets import TINY_LLAMA

    cfg = tmp_path / "tiny"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps(TINY_LLAMA))
    out = {}
    for flag in ((), ("--gc-freeze",)):
        # through the entry point in this process (the case itself runs in its own): one interpreter start fewer
        r = run_cli("bench", "infer", "--model", str(cfg), "--prompt", "16", "--gen", "8", "--repeats", "2",
                    "--device", "cpu", "--db", str(tmp_path / "r.sqlite"), "--json", *flag)
        assert r.returncode == 0, r.stderr
        (m,) = json.loads(r.stdout)["measurements"]
        out[flag] = m
    plain, frozen = out[()]["result"], out[("--gc-freeze",)]["result"]
    assert plain["gc_tracked_objects"] > 10_000 and "gc_frozen_objects" not in plain
    assert frozen["gc_frozen_objects"] > 10_000 and frozen["gc_tracked_objects"] < plain["gc_tracked_objects"]
    for r in (plain, frozen):
        assert r["gc_pause_s_per_token"] >= 0 and r["gc_pause_s_per_ttft"] >= 0
        assert len(r["gc_collections_generate"]) == 3
    assert out[("--gc-freeze",)]["key"].split("#")[0].endswith("-gcfreeze")
