"""Measured results for `gpuscope compare` / `advise`, read from the results store (``gpuscope bench`` rows).

``from_store(path, model, workload)`` returns a ``MeasuredSet``: ``values`` ({hardware key: {metric: value}}, the
mapping ``compare_hw.compare(measured=...)`` takes) and ``origin`` (for each hardware key: the store path, the row
id, run, device name, time, and which result field each metric came from).

Selection:
- rows of the workload's kind with status ``ok``; the newest (highest id) matching row per hardware key wins;
- the row's ``device_name`` is mapped to a catalog key (``specs.hardware.catalog_key_for_device``, as bench and
  ``results compare`` map it); rows of unknown devices (CPU, unlisted GPUs) are skipped;
- the model matches when its architecture is the same (the ModelSpec of the row's inline config or preset, without
  name/source/notes, equals the compared one's);
- inference: batch, prompt, gen, engine (compare ``graph`` = bench ``gs-compile``, ``hf-graph`` = ``hf-graph``,
  ``eager`` = ``hf-eager``, the bench default), kv dtype = weight dtype, and the dtype AND card count compare
  chooses for that GPU: the bench measures one card, so a row is used only where compare's plan is that dtype on
  1 card (``--dtype auto`` resolves per GPU);
- training: micro_batch, seq, precision (after compare's bf16 -> fp16 fallback), recompute, optimizer; only
  ``--grad-accum 1 --offload none`` (what the bench runs).

Metrics:
- inference: ``ttft_s`` = result.ttft_s; ``decode_tokens_per_s`` = result.decode_tokens_per_s;
  ``e2e_tokens_per_s`` = batch * gen / result.e2e_s; ``peak_gib_per_gpu`` = result.peak_generate_bytes / 2^30;
- training: ``tokens_per_s_per_gpu`` = result.tokens_per_s; ``mfu`` = estimated MFU x measured / estimated tokens/s
  (same FLOP count, measured time); ``peak_gib_per_gpu`` = result.peak_bytes / 2^30;
- ``power_w`` = NVML median board power over the case (``result.nvml.summary.power_w_median``; the median, not the
  mean: the sampling window also covers process start and model load, which pull the mean towards idle), where the
  row has NVML samples.

The file is opened read-only (never created, migrated or written); pure Python apart from sqlite3.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from gpuscope.errors import UserError
from gpuscope.estimate.engines import planner_engine
from gpuscope.specs.hardware import catalog_key_for_device

GIB = 2**30


@dataclass
class MeasuredSet:
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    origin: dict[str, dict] = field(default_factory=dict)
    db: str | None = None

    def to_dict(self) -> dict:
        return {"db": self.db, "rows": self.origin}


# --- opening ---------------------------------------------------------------------------------------------------
def open_readonly(path: str | Path):
    """A ``Store`` on an existing results database, read-only; None for an empty (0-byte) file. UserError (one
    sentence) for a missing, foreign, newer, older-schema or corrupt file, which is left untouched."""
    from gpuscope.store import db as dbm

    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"results database '{p}' does not exist; run `gpuscope bench` to create one or pass "
                        "another --db path.")
    if p.is_dir():
        raise UserError(f"results database '{p}' is a directory; --db takes a file path.")
    if p.stat().st_size == 0:
        return None
    dbm._check_header(p)
    # immutable: no -wal/-shm side files are made when none exist (nothing else has the file open)
    wal = p.with_name(p.name + "-wal").exists()
    uri = p.resolve().as_uri() + ("?mode=ro" if wal else "?mode=ro&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=30)
    except sqlite3.Error as exc:
        raise UserError(f"results database '{p}' cannot be opened ({exc}).") from None
    conn.row_factory = sqlite3.Row
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if version < dbm.SCHEMA_VERSION and app_id == dbm.APPLICATION_ID:
            raise UserError(f"results database '{p}' has the older schema version {version}; open it once with "
                            "`gpuscope results list --db ...` to upgrade it.")
        if version < dbm.SCHEMA_VERSION and app_id != dbm.APPLICATION_ID and not conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]:
            conn.close()
            return None  # an empty SQLite file: no measurements
        dbm.Store._check_and_migrate(conn, p, True)  # read-only here: no migration is left to run
    except UserError:
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise UserError(f"results database '{p}' is corrupt or unreadable ({exc}); it was left untouched.") from None
    return dbm.Store(conn, p)


# --- matching --------------------------------------------------------------------------------------------------
def _arch(spec):
    return dataclasses.replace(spec, name="", source="", notes=())


def _row_model(case: dict, cache: dict):
    from gpuscope.specs.hf_config import spec_from_config
    from gpuscope.specs.models import load_model

    ck = json.dumps([case.get("model"), case.get("config")], sort_keys=True, default=str)
    if ck not in cache:
        try:
            if isinstance(case.get("config"), dict):
                cache[ck] = _arch(spec_from_config(case["config"], name=case.get("model") or "inline"))
            else:
                cache[ck] = _arch(load_model(case["model"]))
        except Exception:  # a preset or file that is gone, or an odd config: not comparable
            cache[ck] = None
    return cache[ck]


def _pos(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def _power(res: dict) -> float | None:
    summ = (res.get("nvml") or {}).get("summary") or {}
    return _pos(summ.get("power_w_median"))


def _infer_metrics(model, hw, w, case: dict, res: dict, plan_cache: dict) -> dict[str, tuple[float, str]] | None:
    from gpuscope.explain.compare_hw import fit_infer

    if (case.get("batch"), case.get("prompt"), case.get("gen")) != (w.batch, w.prompt, w.gen):
        return None
    if planner_engine(case) != w.engine or (case.get("defer_stop") and w.engine == "eager"):
        return None  # hf-eager under --defer-stop is planned as eager, but it is not what eager measures
    if case.get("fuse_proj") or case.get("attn", "sdpa") != "sdpa":
        return None  # compare plans HF's own projections and SDPA: a fused or other-attention run is another model
    dtype = case.get("dtype", "bf16")
    if w.kv_dtype not in (None, dtype):
        return None
    if w.dtype not in ("auto", dtype) and not (w.dtype == "bf16" and dtype == "fp16"):
        return None
    if hw.key not in plan_cache:
        try:
            _, chosen, _ = fit_infer(model, hw, w)
        except UserError:
            chosen = None
        plan_cache[hw.key] = chosen
    chosen = plan_cache[hw.key]
    if chosen is None or chosen[1] != 1 or chosen[0] != dtype:
        return None  # compare plans another dtype or several cards on this GPU: the row is not that workload
    out: dict[str, tuple[float, str]] = {}
    for metric, value, how in (
            ("ttft_s", _pos(res.get("ttft_s")), "result.ttft_s"),
            ("decode_tokens_per_s", _pos(res.get("decode_tokens_per_s")), "result.decode_tokens_per_s"),
            ("e2e_tokens_per_s", w.batch * w.gen / res["e2e_s"] if _pos(res.get("e2e_s")) else None,
             "batch * gen / result.e2e_s"),
            ("peak_gib_per_gpu", _pos(res.get("peak_generate_bytes")) and res["peak_generate_bytes"] / GIB,
             "result.peak_generate_bytes / 2^30"),
            ("power_w", _power(res), "result.nvml.summary.power_w_median")):
        if value:
            out[metric] = (value, how)
    return out


def _train_metrics(model, hw, w, case: dict, res: dict, est_cache: dict) -> dict[str, tuple[float, str]] | None:
    from gpuscope.estimate.train import estimate_train

    if w.grad_accum != 1 or w.offload != "none":
        return None
    precision = w.precision
    if precision in ("amp-bf16", "bf16") and not hw.supports("bf16") and hw.supports("fp16"):
        precision = "amp-fp16"
    if (case.get("micro_batch"), case.get("seq"), case.get("precision", "amp-bf16"), case.get("recompute", "none"),
            case.get("optimizer", "adamw")) != (w.micro_batch, w.seq, precision, w.recompute, w.optimizer):
        return None
    out: dict[str, tuple[float, str]] = {}
    tps = _pos(res.get("tokens_per_s"))
    if tps:
        out["tokens_per_s_per_gpu"] = (tps, "result.tokens_per_s")
        if hw.key not in est_cache:
            try:
                est_cache[hw.key] = estimate_train(model, hw, micro_batch=w.micro_batch, seq=w.seq,
                                                   precision=precision, optimizer=w.optimizer,
                                                   recompute=w.recompute, grad_accum=1, offload="none", num_gpus=1)
            except UserError:
                est_cache[hw.key] = None
        est = est_cache[hw.key]
        est_tps = est.throughput.get("tokens_per_s_per_gpu") if est is not None else None
        if est is not None and _pos(est.mfu) and _pos(est_tps):
            out["mfu"] = (est.mfu * tps / est_tps, "estimated MFU x result.tokens_per_s / estimated tokens/s")
    peak = _pos(res.get("peak_bytes"))
    if peak:
        out["peak_gib_per_gpu"] = (peak / GIB, "result.peak_bytes / 2^30")
    pw = _power(res)
    if pw:
        out["power_w"] = (pw, "result.nvml.summary.power_w_median")
    return out


def from_store(path: str | Path, model, workload) -> MeasuredSet:
    """Measured values for `model` under `workload` (compare_hw.InferWorkload or TrainWorkload), per catalog key."""
    from gpuscope.explain.compare_hw import InferWorkload
    from gpuscope.specs.hardware import load_hardware

    infer = isinstance(workload, InferWorkload)
    kind = "infer" if infer else "train"
    out = MeasuredSet(db=str(Path(path).expanduser()))
    st = open_readonly(path)
    if st is None:
        return out
    try:
        try:
            rows = [r for r in reversed(st.all(kind)) if r["status"] == "ok"]  # newest first
        except sqlite3.DatabaseError as exc:
            raise UserError(f"results database '{out.db}' is corrupt or unreadable ({exc}); it was left "
                            "untouched.") from None
    finally:
        st.close()
    want = _arch(model)
    model_cache: dict = {}
    plan_cache: dict = {}
    for r in rows:
        res, case = r.get("result") or {}, r.get("config") or {}
        key = catalog_key_for_device(r.get("device_name") or res.get("device_name"))
        if key is None or key in out.values:
            continue
        if _row_model(case, model_cache) != want:
            continue
        hw = load_hardware(key)
        fn = _infer_metrics if infer else _train_metrics
        got = fn(model, hw, workload, case, res, plan_cache)
        if not got:
            continue
        out.values[key] = {m: v for m, (v, _) in got.items()}
        out.origin[key] = {"source": "store", "db": out.db, "id": r["id"], "run_id": r["run_id"], "key": r["key"],
                           "created_utc": r["created_utc"], "hostname": r["hostname"],
                           "device_name": r.get("device_name"),
                           "metrics": {m: how for m, (_, how) in got.items()}}
    return out


def merge(store: MeasuredSet | None, file_values: dict, file_path: str | None) -> tuple[dict, dict]:
    """(values, origin per hardware key and metric): the --measured file wins over the store, metric by metric."""
    values: dict[str, dict[str, float]] = {}
    origin: dict[str, dict[str, dict]] = {}
    if store is not None:
        for key, vals in store.values.items():
            o = store.origin[key]
            values[key] = dict(vals)
            origin[key] = {m: {"source": "store", "db": o["db"], "id": o["id"], "field": o["metrics"][m]}
                           for m in vals}
    for key, vals in (file_values or {}).items():
        values.setdefault(key, {}).update(vals)
        origin.setdefault(key, {}).update({m: {"source": "file", "path": file_path} for m in vals})
    return values, origin


def note_for(key: str, origin: dict[str, dict], store: MeasuredSet | None) -> str | None:
    """One line for a row's notes: where its measured numbers came from."""
    if not origin:
        return None
    parts = []
    db = [m for m, o in origin.items() if o["source"] == "store"]
    if db and store is not None and key in store.origin:
        o = store.origin[key]
        parts.append(f"measured in results store {o['db']} (id {o['id']}, {o['device_name']}, {o['created_utc']}): "
                     + ", ".join(sorted(db)))
    fl = sorted(m for m, o in origin.items() if o["source"] == "file")
    if fl:
        parts.append(f"measured in {origin[fl[0]]['path']}: " + ", ".join(fl))
    return "; ".join(parts)
