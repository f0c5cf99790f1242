"""Measured interconnect bandwidths from the results store (`gpuscope bench collectives` rows) for the planner's
topology: they replace the datasheet-derived link figures of estimate/topology.topology_for.

- intra_gbs: the ring all-reduce bus bandwidth measured inside one node (nnodes 1, NCCL/RCCL, result checked
  correct), at the largest size measured of at least 256 MiB (the bandwidth regime; small sizes measure latency);
  comm.py's model takes the in-node ring busbw as the per-GPU link rate.
- inter_gbs: from a multi-node all-reduce of at least 256 MiB: comm.py models its busbw as min(intra, k x inter)
  with k ranks per node, so inter = busbw / k.
Only rows whose device maps to the planned GPU's catalog key count; the newest qualifying row wins.
"""

from __future__ import annotations

from dataclasses import replace

from gpuscope.explain.measured_source import open_readonly
from gpuscope.specs.hardware import catalog_key_for_device

MIN_BYTES = 256 * 2**20


def measured_links(db: str, hw_key: str) -> dict:
    """{"intra_gbs": .., "inter_gbs": .., "rows": [ids]} with what the store has for this GPU (possibly empty)."""
    store = open_readonly(db)
    if store is None:
        return {}
    best: dict[str, tuple[int, float, int]] = {}  # kind -> (nbytes, value, row id), newest first wins ties
    try:
        rows = store.list(kind="collective")
    finally:
        store.conn.close()
    for row in rows:  # newest first
        r = row["result"]
        if (row.get("status") != "ok" or r.get("op") != "all_reduce" or not r.get("correct")
                or r.get("backend") not in ("nccl", "rccl") or (r.get("nbytes") or 0) < MIN_BYTES
                or not r.get("busbw_gbs")):
            continue
        if catalog_key_for_device(row.get("device_name")) != hw_key:
            continue
        nnodes = int(r.get("nnodes") or 1)
        per_node = int(r.get("nproc_per_node") or r.get("world_size") or 1)
        kind, value = ("intra_gbs", r["busbw_gbs"]) if nnodes == 1 else ("inter_gbs", r["busbw_gbs"] / per_node)
        if kind not in best or r["nbytes"] > best[kind][0]:
            best[kind] = (r["nbytes"], float(value), row["id"])
    out = {k: v[1] for k, v in best.items()}
    if out:
        out["rows"] = [v[2] for v in best.values()]
    return out


def with_measured_links(hw, db: str):
    """The hardware spec with measured link bandwidths from the store in its `measured` table (if any)."""
    links = measured_links(db, hw.key)
    figures = {k: v for k, v in links.items() if k in ("intra_gbs", "inter_gbs")}
    if not figures:
        return hw, links
    return replace(hw, measured={**(hw.measured or {}), **figures}), links
