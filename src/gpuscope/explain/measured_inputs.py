"""Where `compare` and `advise` take measured numbers from: a JSON file the user gives (``--measured``) and the
results database (``--db``, else the default store if it exists; ``--no-db``: none), merged by
explain/measured_source.py (the file wins)."""

from __future__ import annotations

import json
from pathlib import Path

from gpuscope.errors import UserError


def measured_file(path: str | None) -> dict:
    """A measured-results JSON: {gpu name or alias: {metric: value}}, keyed by catalog key."""
    if not path:
        return {}
    from gpuscope.specs.hardware import load_hardware

    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"--measured file '{p}' does not exist.")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"--measured file '{p}' is not valid JSON ({exc}).") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"--measured file '{p}' must map GPU names to objects of metric values.")
    return {load_hardware(k).key: v for k, v in data.items()}


def store_path(db: str | None, no_db: bool) -> Path | None:
    """The results database to read: --db as given (it must exist), else the default one if it exists, else None."""
    if no_db:
        if db:
            raise UserError("--db and --no-db contradict each other; give one of them.")
        return None
    if db:
        return Path(db).expanduser()
    from gpuscope.store.db import default_db_path

    p = default_db_path()
    return p if p.is_file() else None


def gather_measured(model, workload, measured: str | None, db: str | None, no_db: bool):
    """(values for compare(measured=...), origin per GPU and metric, the store's MeasuredSet or None)."""
    from gpuscope.explain.measured_source import from_store, merge

    file_values = measured_file(measured)
    path = store_path(db, no_db)
    store = from_store(path, model, workload) if path is not None else None
    values, origin = merge(store, file_values, measured)
    return values, origin, store
