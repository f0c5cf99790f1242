"""The results store: default path, schema and migrations, idempotent writes, resume keys, export, refusals."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest

from gpuscope.errors import UserError
from gpuscope.store import db as dbm
from gpuscope.store.db import APPLICATION_ID, SCHEMA_VERSION, Store, default_db_path

PROV = {"benchmark_version": "gpuscope.measure/1", "git_sha": "abc", "hostname": None, "device_name": "x"}


def _put(st, run, key, status="ok", **res):
    return st.put(run, key, "micro", key.split("#")[0], {"bench": "matmul", "dtype": "bf16"},
                  {"status": status, "tflops": 1.5, **res}, dict(PROV, hostname=st.hostname))


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSCOPE_DB", str(tmp_path / "a.sqlite"))
    assert default_db_path() == tmp_path / "a.sqlite"
    monkeypatch.delenv("GPUSCOPE_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "gpuscope" / "results.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home" / ".local" / "share" / "gpuscope" / "results.sqlite"


def test_schema_version_wal_and_reopen(tmp_path):
    p = tmp_path / "sub" / "r.sqlite"
    with Store.open(p) as st:
        assert st.schema_version == SCHEMA_VERSION == len(dbm.MIGRATIONS)
        run = st.new_run("bench micro", ["gpuscope", "bench", "micro"])
        mid = _put(st, run, "micro/matmul/bf16/quick#1")
        assert st.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # committed at once: another connection sees it while this one is still open
        other = sqlite3.connect(p)
        assert other.execute("SELECT count(*) FROM measurements").fetchone()[0] == 1
        other.close()
    with Store.open(p) as st:
        assert st.conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        rec = st.get(mid)
        assert rec["result"]["tflops"] == 1.5 and rec["config"]["dtype"] == "bf16"
        assert rec["provenance"]["git_sha"] == "abc" and rec["git_sha"] == "abc"


def test_idempotent_put_and_done_keys(tmp_path):
    with Store.open(tmp_path / "r.sqlite") as st:
        run = st.new_run("t")
        a = _put(st, run, "k1#1")
        b = _put(st, run, "k1#1", tflops=2.0)  # same (run, key): replaced, not duplicated
        assert a == b and len(st.list()) == 1 and st.get(a)["result"]["tflops"] == 2.0
        _put(st, run, "k2#2", status="error")
        _put(st, run, "k3#3", status="oom")
        _put(st, run, "k4#4", status="unsupported")
        run2 = st.new_run("t")
        _put(st, run2, "k1#1")  # a new run keeps history
        assert len(st.list()) == 5
        assert st.done_keys() == {"k1#1", "k3#3", "k4#4"}  # errors are measured again on resume
        assert st.latest("k1#1")["run_id"] == run2
        assert st.latest("k2#2") is None
        with pytest.raises(UserError, match="id 999"):
            st.get(999)


def test_export_csv_and_json(tmp_path):
    with Store.open(tmp_path / "r.sqlite") as st:
        run = st.new_run("t")
        _put(st, run, "a#1", shapes=[{"m": 1}])
        _put(st, run, "b#2", status="unsupported", reason="no")
        rows = list(csv.DictReader(io.StringIO(st.export_csv())))
        assert [r["key"] for r in rows] == ["a#1", "b#2"]
        assert rows[0]["result.tflops"] == "1.5" and rows[0]["config.dtype"] == "bf16"
        assert "result.shapes" not in rows[0]  # only scalars are flattened
        d = json.loads(st.export_json())
        assert d["schema"] == "gpuscope.results/1" and d["db_schema_version"] == SCHEMA_VERSION
        assert d["measurements"][0]["result"]["shapes"] == [{"m": 1}]


def test_corrupt_foreign_and_newer_files_are_refused_untouched(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database at all\n" * 10)
    before = bad.read_bytes()
    with pytest.raises(UserError, match="not an SQLite file"):
        Store.open(bad)
    assert bad.read_bytes() == before

    foreign = tmp_path / "foreign.sqlite"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    before = foreign.read_bytes()
    with pytest.raises(UserError, match="another program"):
        Store.open(foreign)
    assert foreign.read_bytes() == before and not (tmp_path / "foreign.sqlite-wal").exists()

    torn = tmp_path / "torn.sqlite"  # an SQLite header followed by garbage
    torn.write_bytes(dbm.SQLITE_MAGIC + b"\x10\x00" + b"\xff" * 4000)
    before = torn.read_bytes()
    with pytest.raises(UserError):
        Store.open(torn)
    assert torn.read_bytes() == before

    newer = tmp_path / "newer.sqlite"
    Store.open(newer).close()
    c = sqlite3.connect(newer)
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    c.commit()
    c.close()
    with pytest.raises(UserError, match="newer"):
        Store.open(newer)


def test_empty_file_is_initialised(tmp_path):
    p = tmp_path / "empty.sqlite"
    p.write_bytes(b"")
    with Store.open(p) as st:
        assert st.schema_version == SCHEMA_VERSION


def test_migrations_run_in_order(tmp_path, monkeypatch):
    """A v1 file is migrated to a later version by the next entry of MIGRATIONS, keeping its rows."""
    p = tmp_path / "r.sqlite"
    with Store.open(p) as st:
        _put(st, st.new_run("t"), "a#1")
    monkeypatch.setattr(dbm, "MIGRATIONS", dbm.MIGRATIONS + ["ALTER TABLE measurements ADD COLUMN note TEXT"])
    monkeypatch.setattr(dbm, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with Store.open(p) as st:
        assert st.schema_version == SCHEMA_VERSION + 1
        assert st.conn.execute("SELECT count(*), max(note) FROM measurements").fetchone()[:] == (1, None)


def test_results_compare_puts_the_planner_beside_stored_h200_runs(tmp_path):
    """Real H200 measurements (research/results/2026-11-29-h200) stored, then compared with the planner through the CLI."""
    import subprocess
    import sys
    from pathlib import Path

    from gpuscope.explain.compare import compare_record, read_records
    from gpuscope.specs.hardware import hardware_for_device as hardware_for
    from gpuscope.store.db import Store

    recs = read_records(Path(__file__).resolve().parents[1] / "research" / "results" / "2026-11-29-h200" / "measurements.jsonl")
    picked = [r for r in recs if r["case"]["kind"] == "train"][:1] + [r for r in recs if r["case"]["kind"] == "infer"][:1]
    db = tmp_path / "r.sqlite"
    with Store.open(db) as st:
        for i, r in enumerate(picked):
            st.put("run", f"k{i}", r["case"]["kind"], r["case_id"].split("#")[0], r["case"], r["result"],
                   {"device_name": r["result"]["device_name"], "hostname": "h200"})
    out = subprocess.run([sys.executable, "-m", "gpuscope", "results", "compare", "--db", str(db), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["rows"]
    expected = [row for r in picked for row in compare_record(r, hardware_for(r["result"]["device_name"]))]
    assert len(rows) == len(expected) > 0
    for got, exp in zip(sorted(rows, key=lambda x: (x["case"], x["metric"])),
                        sorted(expected, key=lambda x: (x.case, x.metric))):
        assert got["metric"] == exp.metric and got["error"] == pytest.approx(exp.error)
    summary = json.loads(out.stdout)["summary"]
    assert sum(v["of"] for v in summary.values()) == len([r for r in expected if r.metric not in ("mfu",)])
    assert summary["memory"]["band"] == 0.05 and summary["step_s"]["band"] == 0.15
    for key, v in summary.items():
        mine = [r for r in expected if (r.metric.endswith("bytes") if key == "memory" else r.metric == key)]
        assert v["of"] == len(mine) and v["within"] == sum(abs(r.error) <= v["band"] for r in mine)


def test_accuracy_summary_pools_memory_and_counts_within_band():
    from gpuscope.explain.compare import Row
    from gpuscope.pipeline.accuracy import by_metric as accuracy_summary
    from gpuscope.report.bench_view import accuracy_lines

    rows = [Row("a", "peak_bytes", 104, 100), Row("a", "forward_peak_bytes", 94, 100), Row("a", "step_s", 1.1, 1.0),
            Row("b", "step_s", 1.2, 1.0), Row("b", "mfu", 0.5, 0.1), {"metric": "prefill_s", "error": -0.15}]
    s = accuracy_summary(rows)
    assert s == {"memory": {"within": 1, "of": 2, "band": 0.05}, "step_s": {"within": 1, "of": 2, "band": 0.15},
                 "prefill_s": {"within": 1, "of": 1, "band": 0.15}}
    assert accuracy_lines(s)[0] == "memory: 1/2 within 5%"
