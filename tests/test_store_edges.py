"""The results store at its edges: many processes opening one fresh file, a file or folder that cannot be written,
a database that lost a table. Each gets one sentence (UserError) and the file is left as it was."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import sqlite3

import pytest

import gpuscope.store.db as dbm
from gpuscope.errors import UserError
from gpuscope.store.db import Store


def _open_and_put(path: str, i: int, go, out) -> None:
    go.wait(30)  # every process opens the file at the same instant
    try:
        with Store.open(path) as s:
            run = s.new_run("test", [])
            s.put(run, f"k{i}", "micro", f"n{i}", {"i": i}, {"status": "ok"}, {})
        out.put("ok")
    except Exception as exc:  # the failure under test: report it, do not hide it
        out.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("round_", range(10))  # the old race failed 1 round in 5
def test_eight_processes_opening_one_fresh_database_at_once_all_succeed(tmp_path, round_):
    path = str(tmp_path / "fresh.sqlite")
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_open_and_put, args=(path, i, go, out)) for i in range(8)]
    for p in procs:
        p.start()
    go.set()
    outcomes = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(10)
    assert outcomes == ["ok"] * 8
    with Store.open(path) as s:
        assert s.schema_version == dbm.SCHEMA_VERSION
        assert len(s.all()) == 8


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _stored(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store.open(path) as s:
        s.put(s.new_run("test", []), "k", "micro", "n", {}, {"status": "ok"}, {})
    return path


def test_a_read_only_file_is_one_sentence_and_left_untouched(tmp_path, monkeypatch):
    path = _stored(tmp_path)
    before = _digest(path)
    real = dbm.os.access
    monkeypatch.setattr(dbm.os, "access", lambda p, mode: False if str(p) == str(path) else real(p, mode))
    with pytest.raises(UserError, match="is read-only"):
        Store.open(path)
    assert _digest(path) == before


def test_a_read_only_folder_is_not_called_corrupt(tmp_path, monkeypatch):
    path = _stored(tmp_path)
    real = dbm.os.access
    monkeypatch.setattr(dbm.os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real(p, mode))
    with pytest.raises(UserError) as e:
        Store.open(path)
    assert "read-only" in str(e.value) and "corrupt" not in str(e.value)


def test_a_write_refused_by_sqlite_is_one_sentence(tmp_path):
    path = _stored(tmp_path)
    s = Store.open(path)
    s.conn.close()
    s.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)  # what a read-only mount gives
    with pytest.raises(UserError, match="read-only.*nothing was written"):
        s.new_run("test", [])
    with pytest.raises(UserError, match="read-only"):
        s.put("r", "k2", "micro", "n", {}, {"status": "ok"}, {})
    s.close()
    with Store.open(path) as again:
        assert [m["key"] for m in again.all()] == ["k"]


def test_a_database_that_lost_its_measurements_table_is_refused_untouched(tmp_path):
    path = _stored(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE measurements")
    conn.commit()
    conn.close()
    before = _digest(path)
    with pytest.raises(UserError, match="lost its measurements table"):
        Store.open(path)
    assert _digest(path) == before


def test_an_export_onto_the_database_itself_is_refused_and_the_file_unchanged(tmp_path):
    import subprocess
    import sys

    path = _stored(tmp_path)
    before = _digest(path)
    for fmt in ("--json", "--csv"):
        for target in (path, tmp_path / "r.sqlite-wal", tmp_path / "." / "r.sqlite"):
            r = subprocess.run([sys.executable, "-m", "gpuscope", "results", "export", fmt, "--db", str(path),
                                "--out", str(target)], capture_output=True, text=True)
            assert r.returncode == 2, r.stderr
            assert "is the results database itself" in r.stderr and "Traceback" not in r.stderr
    assert _digest(path) == before
    ok = subprocess.run([sys.executable, "-m", "gpuscope", "results", "export", "--json", "--db", str(path),
                         "--out", str(tmp_path / "out.json")], capture_output=True, text=True)
    assert ok.returncode == 0 and (tmp_path / "out.json").read_text().startswith("{")
