"""Results files (JSON lines of measurement records, as research/results/<folder>/*.jsonl hold) loaded into a
results database, so that `gpuscope report --records FILE` draws them as it draws a store: one run per file, each
record a measurement with its case, result and provenance (the record's own run id and the file it came from are
kept in its provenance)."""

from __future__ import annotations

from pathlib import Path

from gpuscope import workloads
from gpuscope.errors import UserError


def record_kind(rec: dict) -> str | None:
    """A record's workload kind: its case's, else its result's (a collectives point carries none in its case)."""
    case, res = rec.get("case") or {}, rec.get("result") or {}
    kind = case.get("kind") or workloads.result_kind(res)
    if kind is None and str(res.get("schema", "")).startswith("gpuscope.collective"):
        kind = "collective"
    return kind


def _key(rec: dict, kind: str) -> tuple[str, str]:
    """(key, readable name) of a record: its case id where it has one, else the kind's typed case's."""
    if rec.get("case_id"):
        return rec["case_id"], rec["case_id"].split("#")[0]
    try:
        c = workloads.from_dict(rec["case"], kind)
        return c.key, c.name
    except UserError:
        name = workloads.case_name(dict(rec["case"], kind=kind), strict=False)
        return workloads.case_id(dict(rec["case"], kind=kind), strict=False), name


def load_records(store, path: str | Path) -> int:
    """Store every record of one results file as a run of ``store``; the number stored. Lines that are not
    measurement records (no case and result objects, or no known kind) are left out."""
    from gpuscope.explain.compare import read_records

    p = Path(path)
    recs = read_records(p)
    run_id = store.new_run("records", [str(p)])
    seen: dict[str, int] = {}
    stored = 0
    for n, rec in enumerate(recs, 1):
        if not isinstance(rec.get("case"), dict) or not isinstance(rec.get("result"), dict):
            continue
        kind = record_kind(rec)
        if kind is None:
            continue
        key, name = _key(rec, kind)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:  # the same case measured again in one file: both are kept
            key = f"{key}@{n}"
        prov = dict(rec.get("provenance") or {}, imported_from=f"{p}:{n}", source_run_id=rec.get("run_id"))
        store.put(run_id, key, kind, name, rec["case"], rec["result"], prov)
        stored += 1
    return stored


def records_db(paths: list[str], db_path: str | Path) -> Path:
    """A new results database at ``db_path`` holding the records of ``paths``; one sentence when none holds a
    measurement."""
    from gpuscope.store.db import Store

    total = 0
    with Store.open(db_path) as st:
        for path in paths:
            total += load_records(st, path)
    if not total:
        raise UserError(f"--records: no measurement records in {', '.join(paths)}.")
    return Path(db_path)
