"""Measured collective bandwidths from the results store replace the datasheet links in multi-GPU plans."""

from __future__ import annotations

import json
import subprocess
import sys

from gpuscope.explain.measured_links import measured_links
from gpuscope.store.db import Store


def _row(op="all_reduce", nbytes=2**30, busbw=300.0, nnodes=1, per_node=2, backend="nccl", correct=True):
    return {"schema": "gpuscope.collective/1", "op": op, "nbytes": nbytes, "busbw_gbs": busbw, "nnodes": nnodes,
            "nproc_per_node": per_node, "world_size": nnodes * per_node, "backend": backend, "correct": correct,
            "status": "ok"}


def _store(path, rows):
    with Store.open(path) as st:
        for i, r in enumerate(rows):
            st.put("run1", f"collective/{i}", "collective", f"c{i}", {"op": r["op"]}, r,
                   {"device_name": "NVIDIA H200", "hostname": "node0"})


def test_measured_links_pick_the_large_correct_nccl_rows(tmp_path):
    db = tmp_path / "r.sqlite"
    _store(db, [_row(nbytes=2**20, busbw=10.0),            # too small: latency regime
                _row(busbw=250.0, correct=False),            # wrong result
                _row(busbw=300.0, backend="gloo"),           # not NCCL
                _row(nbytes=2**31, busbw=360.0),             # intra: this one
                _row(nnodes=2, per_node=8, busbw=320.0)])    # inter: 320 / 8
    links = measured_links(str(db), "nvidia_h200_sxm")
    assert links["intra_gbs"] == 360.0 and links["inter_gbs"] == 40.0
    assert measured_links(str(db), "nvidia_h100_sxm") == {}


def test_plan_train_db_changes_the_comm_time(tmp_path):
    db = tmp_path / "r.sqlite"
    _store(db, [_row(nbytes=2**31, busbw=36.0)])  # a tenth of the datasheet-derived NVLink ring
    args = [sys.executable, "-m", "gpuscope", "plan", "train", "--model", "llama-3.1-8b", "--gpu", "h200",
            "--num-gpus", "8", "--tp", "8", "--global-batch", "8", "--seq", "4096", "--json"]
    plain = json.loads(subprocess.run(args, capture_output=True, text=True).stdout)
    slow = json.loads(subprocess.run(args + ["--db", str(db)], capture_output=True, text=True).stdout)
    assert slow["time"]["tp_comm_s"] > 5 * plain["time"]["tp_comm_s"]
    missing = subprocess.run(args + ["--db", str(tmp_path / "none.sqlite")], capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stdout == ""
