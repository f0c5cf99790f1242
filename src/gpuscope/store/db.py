"""The results database: SQLite, one row per measurement with its full configuration and provenance.

- Where: ``--db PATH``, else ``$GPUSCOPE_DB``, else ``$XDG_DATA_HOME/gpuscope/results.sqlite``, else
  ``~/.local/share/gpuscope/results.sqlite``.
- Schema: ``MIGRATIONS[i]`` takes the file from version i to i + 1 (``PRAGMA user_version``); a file is tagged with
  ``PRAGMA application_id`` = ``APPLICATION_ID`` so that another program's SQLite file is recognised and refused.
- A file that is not SQLite, is another program's database, or comes from a newer gpuscope raises ``UserError``
  and is never written to.
- Writes are idempotent: a measurement is identified by ``(run_id, key)``; writing it again replaces that row.
  Each ``put`` commits at once (WAL journal), so an interrupted run keeps every finished measurement.
- ``key`` names what was measured (a case id: readable name + hash of the whole configuration). ``done_keys``
  gives the keys already measured on this host with a final status (ok, oom, unsupported), which ``--resume`` skips.

Pure Python (sqlite3, json): no torch here.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import random
import socket
import sqlite3
import time
import uuid
from pathlib import Path

from gpuscope.errors import UserError

SCHEMA_VERSION = 1
APPLICATION_ID = 0x47505343  # "GPSC"
SQLITE_MAGIC = b"SQLite format 3\x00"
FINAL_STATUSES = ("ok", "oom", "unsupported")

MIGRATIONS: list[str] = [
    # 0 -> 1
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        started_utc TEXT NOT NULL,
        command TEXT NOT NULL,
        argv_json TEXT NOT NULL,
        hostname TEXT NOT NULL
    );
    CREATE TABLE measurements (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        created_utc TEXT NOT NULL,
        hostname TEXT NOT NULL,
        device_name TEXT,
        benchmark_version TEXT,
        git_sha TEXT,
        config_json TEXT NOT NULL,
        result_json TEXT NOT NULL,
        provenance_json TEXT NOT NULL,
        UNIQUE (run_id, key)
    );
    CREATE INDEX measurements_key ON measurements (key, hostname, status);
    """,
]

COLUMNS = ("id", "run_id", "key", "kind", "name", "status", "created_utc", "hostname", "device_name",
           "benchmark_version", "git_sha")


def default_db_path() -> Path:
    env = os.environ.get("GPUSCOPE_DB")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "gpuscope" / "results.sqlite"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


REQUIRED_TABLES = ("runs", "measurements")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


LOCKED_WAIT_S = 30.0  # as long as sqlite3.connect's busy timeout


def _while_locked(step):
    """Run ``step`` again while SQLite answers "database is locked" without waiting (up to LOCKED_WAIT_S). On a
    fresh file opened by several processes at once, SQLite returns SQLITE_BUSY at once, bypassing the busy timeout,
    where waiting could deadlock: a reader upgrading to the write lock (BEGIN IMMEDIATE) while another holds it, or
    the switch to WAL, which needs every other connection gone. Both steps are safe to repeat: the migration reads
    the version again under the lock, and setting WAL twice is a no-op."""
    deadline = time.monotonic() + LOCKED_WAIT_S
    pause = 0.005
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(pause * (1 + random.random()))  # jitter: the processes that collided do not retry in step
            pause = min(pause * 2, 0.2)


def _migrate(conn: sqlite3.Connection) -> None:
    """Take the file to SCHEMA_VERSION under the write lock. The version is read again once the lock is held:
    several processes opening one fresh file at the same instant all read version 0 before any of them writes,
    and only the first may create the tables."""
    conn.execute("BEGIN IMMEDIATE")
    try:  # statement by statement: executescript would commit half a migration
        start = conn.execute("PRAGMA user_version").fetchone()[0]
        for v in range(start, SCHEMA_VERSION):
            for stmt in [s.strip() for s in MIGRATIONS[v].split(";") if s.strip()]:
                conn.execute(stmt)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {v + 1}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _check_writable(p: Path, exists: bool) -> None:
    """A results database is written by every command that opens it (runs, WAL files beside it): a read-only file
    or folder gets one sentence before sqlite3 reports it as something else."""
    if exists and not os.access(p, os.W_OK):
        raise UserError(f"results database '{p}' is read-only; make it writable or pass another --db path "
                        "(it was left untouched).")
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise UserError(f"the folder of results database '{p}' is read-only (SQLite writes its journal beside the "
                        "file); make it writable or pass another --db path.")


def _check_header(path: Path) -> None:
    """Refuse a non-empty file that is not SQLite, before sqlite3 touches it."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise UserError(f"results database '{path}' cannot be read ({exc.strerror}).") from None
    if head and head != SQLITE_MAGIC:
        raise UserError(f"results database '{path}' is not an SQLite file; pass another --db path (it was left "
                        "untouched).")


class Store:
    """An open results database. Use ``Store.open(path)``; ``close()`` or use it as a context manager."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self.conn = conn
        self.path = path
        self.hostname = socket.gethostname()

    # --- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path | None = None) -> "Store":
        p = Path(path).expanduser() if path else default_db_path()
        if p.is_dir():
            raise UserError(f"results database '{p}' is a directory; --db takes a file path.")
        exists = p.exists() and p.stat().st_size > 0
        if exists:
            _check_header(p)
            uri = f"file:{p}?mode=rw"
        else:
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"results database directory '{p.parent}' cannot be created "
                                f"({exc.strerror}).") from None
            uri = f"file:{p}?mode=rwc"
        _check_writable(p, exists)
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise UserError(f"results database '{p}' cannot be opened ({exc}).") from None
        conn.row_factory = sqlite3.Row
        try:
            _while_locked(lambda: cls._check_and_migrate(conn, p, exists))
            _while_locked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            conn.execute("PRAGMA synchronous=NORMAL")
        except UserError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise UserError(f"results database '{p}' is corrupt or unreadable ({exc}); it was left "
                            "untouched.") from None
        return cls(conn, p)

    @staticmethod
    def _check_and_migrate(conn: sqlite3.Connection, p: Path, existed: bool) -> None:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = _tables(conn)
        if existed and app_id != APPLICATION_ID and (tables or version):
            raise UserError(f"results database '{p}' belongs to another program (not a gpuscope database); "
                            "pass another --db path (it was left untouched).")
        if version > SCHEMA_VERSION:
            raise UserError(f"results database '{p}' has schema version {version}, newer than this gpuscope "
                            f"({SCHEMA_VERSION}); upgrade gpuscope or pass another --db path.")
        if app_id == APPLICATION_ID and existed:
            bad = conn.execute("PRAGMA quick_check").fetchone()[0]
            if bad != "ok":
                raise UserError(f"results database '{p}' is corrupt ({bad}); it was left untouched.")
        if version < SCHEMA_VERSION:
            _migrate(conn)
        missing = [t for t in REQUIRED_TABLES if t not in _tables(conn)]
        if missing:
            raise UserError(f"results database '{p}' has lost its {', '.join(missing)} table; it was left "
                            "untouched (pass another --db path).")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return self.conn.execute("PRAGMA user_version").fetchone()[0]

    # --- writing -------------------------------------------------------------------------------------------
    def _write(self, sql: str, row: tuple) -> sqlite3.Cursor:
        """One write, committed at once; a file that turned read-only (a read-only mount, another user's file) is
        one sentence, not sqlite3's traceback."""
        try:
            return self.conn.execute(sql, row)
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc) or "read-only" in str(exc):
                raise UserError(f"results database '{self.path}' is read-only ({exc}); nothing was written.") \
                    from None
            raise

    def new_run(self, command: str, argv: list[str] | None = None) -> str:
        run_id = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:6]
        self._write("INSERT INTO runs (run_id, started_utc, command, argv_json, hostname) VALUES (?,?,?,?,?)",
                    (run_id, _now(), command, json.dumps(list(argv or [])), self.hostname))
        return run_id

    def put(self, run_id: str, key: str, kind: str, name: str, config: dict, result: dict,
            provenance: dict) -> int:
        """Write one finished measurement (replacing the same ``(run_id, key)``) and commit; returns its id."""
        status = str(result.get("status") or "unknown")
        device = result.get("device_name") or provenance.get("device_name")
        row = (run_id, key, kind, name, status, _now(), provenance.get("hostname") or self.hostname, device,
               provenance.get("benchmark_version"), provenance.get("git_sha"),
               json.dumps(config, sort_keys=True), json.dumps(result), json.dumps(provenance))
        cur = self._write(
            "INSERT INTO measurements (run_id, key, kind, name, status, created_utc, hostname, device_name, "
            "benchmark_version, git_sha, config_json, result_json, provenance_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (run_id, key) DO UPDATE SET kind=excluded.kind, name=excluded.name, status=excluded.status, "
            "created_utc=excluded.created_utc, hostname=excluded.hostname, device_name=excluded.device_name, "
            "benchmark_version=excluded.benchmark_version, git_sha=excluded.git_sha, "
            "config_json=excluded.config_json, result_json=excluded.result_json, "
            "provenance_json=excluded.provenance_json RETURNING id", row)
        return int(cur.fetchone()[0])

    # --- reading -------------------------------------------------------------------------------------------
    def done_keys(self, keys=None) -> set[str]:
        """Keys measured on this host with a final status (ok, oom, unsupported): what ``--resume`` skips."""
        q = (f"SELECT DISTINCT key FROM measurements WHERE hostname = ? AND status IN "
             f"({','.join('?' * len(FINAL_STATUSES))})")
        done = {r[0] for r in self.conn.execute(q, (self.hostname, *FINAL_STATUSES))}
        return done if keys is None else done & set(keys)

    def latest(self, key: str) -> dict | None:
        """The newest measurement of ``key`` on this host with a final status, or None."""
        r = self.conn.execute(
            f"SELECT * FROM measurements WHERE key = ? AND hostname = ? AND status IN "
            f"({','.join('?' * len(FINAL_STATUSES))}) ORDER BY id DESC LIMIT 1",
            (key, self.hostname, *FINAL_STATUSES)).fetchone()
        return _full(r) if r is not None else None

    def list(self, kind: str | None = None, limit: int | None = None) -> list[dict]:
        q = f"SELECT {', '.join(COLUMNS)}, result_json FROM measurements"
        args: list = []
        if kind:
            q += " WHERE kind = ?"
            args.append(kind)
        q += " ORDER BY id DESC"
        if limit:
            q += " LIMIT ?"
            args.append(int(limit))
        out = []
        for r in self.conn.execute(q, args):
            d = {c: r[c] for c in COLUMNS}
            d["result"] = json.loads(r["result_json"])
            out.append(d)
        return out

    def get(self, mid: int) -> dict:
        r = self.conn.execute("SELECT * FROM measurements WHERE id = ?", (int(mid),)).fetchone()
        if r is None:
            raise UserError(f"measurement id {mid} is not in the results database '{self.path}'; "
                            "`gpuscope results list` shows the ids.")
        return _full(r)

    def all(self, kind: str | None = None) -> list[dict]:
        q, args = "SELECT * FROM measurements", []
        if kind:
            q, args = q + " WHERE kind = ?", [kind]
        return [_full(r) for r in self.conn.execute(q + " ORDER BY id", args)]

    # --- export --------------------------------------------------------------------------------------------
    def export_json(self, kind: str | None = None) -> str:
        return json.dumps({"schema": "gpuscope.results/1", "db_schema_version": self.schema_version,
                           "measurements": self.all(kind)}, indent=1)

    def export_csv(self, kind: str | None = None) -> str:
        """One line per measurement: the fixed columns, then every scalar of the result as ``result.<key>``
        and of the configuration as ``config.<key>``."""
        rows = self.all(kind)
        flat = []
        extra: dict[str, None] = {}
        for r in rows:
            d = {c: r[c] for c in COLUMNS}
            for prefix in ("config", "result"):
                for k, v in (r[prefix] or {}).items():
                    if v is None or isinstance(v, (str, int, float, bool)):
                        d[f"{prefix}.{k}"] = v
                        extra.setdefault(f"{prefix}.{k}")
            flat.append(d)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=[*COLUMNS, *sorted(extra)], extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(flat)
        return buf.getvalue()


def _full(r: sqlite3.Row) -> dict:
    d = {c: r[c] for c in COLUMNS}
    d["config"] = json.loads(r["config_json"])
    d["result"] = json.loads(r["result_json"])
    d["provenance"] = json.loads(r["provenance_json"])
    return d
