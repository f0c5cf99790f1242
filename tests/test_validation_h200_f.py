"""The sixth H200 session (results/2026-11-30-h200-f, README.md there): HF generate with transformers'
DeferredStopCheck switched on for CUDA (bench --defer-stop, measure/defer_stop.py) and the planner's hf-graph-defer
engine against it; the same session's copy ceiling for issue 3's 70%-of-copy line.

Targets (memory 5%, prefill/step 15%, decode 20%) and the known-miss rule: tests/validation_rows.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.explain.compare import read_records
from validation_rows import check_row, row_params

HERE = Path(__file__).resolve().parents[1] / "results" / "2026-11-30-h200-f"
RECORDS = read_records(HERE / "measurements.jsonl")
WORKLOADS = [r for r in RECORDS if r["case"]["kind"] == "infer"]
DIAG = {v["variant"]: v for v in json.loads((HERE / "defer_diag_1b.json").read_text())["variants"]}

HOST_PREFILL = ("host-bound eager prefill of Llama-3.1-8B p128 on this VM's host: TTFT 32-40 ms against 25.8-27.5 "
                "planned (27-62 ms in earlier sessions; tests/test_validation_h200_e.py)")
KNOWN_MISSES = {
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-hf-graph-defer", "prefill_s"): (0.40, HOST_PREFILL),
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-hf-graph-fused-defer", "prefill_s"): (0.30, HOST_PREFILL),
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-hf-graph", "prefill_s"): (0.30, HOST_PREFILL),
    ("infer/llama-3.1-8b/b1-p128-g256-bf16-gs-compile-fused", "prefill_s"): (0.25, HOST_PREFILL),
}


def _by_name(name: str) -> dict:
    (r,) = [r for r in WORKLOADS if r["case_id"].split("#")[0] == name]
    return r["result"]


def test_the_set():
    assert len(RECORDS) == 14 and len(WORKLOADS) == 6
    assert all(r["result"]["status"] == "ok" and r["result"]["device_name"] == "NVIDIA H200" for r in RECORDS)
    deferred = [r for r in WORKLOADS if r["case"].get("defer_stop")]
    assert len(deferred) == 4 and all(r["result"]["stop_check"] == "deferred" for r in deferred)


def test_deferred_stop_removes_the_per_token_sync_and_keeps_the_tokens():
    """scripts/gpu_hf_graph.py on Llama-3.2-1B p128 g128 (torch.profiler over generate of 16 tokens less 1): the
    static-cache generate's one cudaStreamSynchronize per token becomes one event wait on the token before; plain
    generate's two syncs a token become one. The greedy tokens equal the reference's; TPOT 2.57 -> 1.64 ms with
    the same GPU work (1.43 / 1.42 ms a token)."""
    d, dd, e, ed = DIAG["default"], DIAG["defer"], DIAG["eager"], DIAG["eager_defer"]
    assert d["decode_launch_per_token"]["cudaStreamSynchronize"] == 1
    assert dd["decode_launch_per_token"]["cudaStreamSynchronize"] == 0
    assert dd["decode_launch_per_token"]["cudaEventSynchronize"] == pytest.approx(1, abs=0.1)
    assert e["decode_launch_per_token"]["cudaStreamSynchronize"] == 2
    assert ed["decode_launch_per_token"]["cudaStreamSynchronize"] == 1
    assert dd["tokens_equal_to_default"] and ed["tokens_equal_to_eager"]
    assert dd["deferred_applied"] == [True] and ed["deferred_applied"] == [True]
    assert dd["generated_tokens"] == ed["generated_tokens"] == 128
    assert dd["tpot_s"] < 0.7 * d["tpot_s"]
    assert dd["decode_gpu_us_per_token"] == pytest.approx(d["decode_gpu_us_per_token"], rel=0.02)
    # what is left above the GPU's time is about the graph loop's 0.4 ms residual, not generate's host work
    assert dd["tpot_s"] - dd["decode_gpu_us_per_token"] * 1e-6 < 0.3e-3


def test_hf_graph_reaches_70_percent_of_copy_with_deferred_stop_and_fused_projections():
    """Issue 3: hf-graph decode of a 7B-class bf16 model at batch 1 >= 70% of the measured copy bandwidth.
    Llama-3.1-8B p128 g256 against this session's copy (4174 GB/s): hf-graph as transformers runs it 2070 GB/s
    (50%); with --defer-stop 2790 (67%); with --defer-stop --fuse-proj 3125 (75%), the same as gpuscope's own
    gs-compile --fuse-proj loop (3124) in the same session."""
    (copy,) = [r["result"]["gbs"] for r in RECORDS if r["case_id"].startswith("micro/memory/copy/")]
    rate = {n: _by_name(f"infer/llama-3.1-8b/b1-p128-g256-bf16-{n}")["decode_weights_gbs"] / copy
            for n in ("hf-graph", "hf-graph-defer", "hf-graph-fused-defer", "gs-compile-fused")}
    assert copy > 4000
    assert rate["hf-graph"] < 0.55 and 0.6 < rate["hf-graph-defer"] < 0.7
    assert rate["hf-graph-fused-defer"] >= 0.70
    assert rate["hf-graph-fused-defer"] == pytest.approx(rate["gs-compile-fused"], rel=0.01)


@pytest.mark.parametrize("row", row_params(WORKLOADS))
def test_estimate_vs_h200_sixth_session(row):
    check_row(row, (row.case, row.metric), KNOWN_MISSES)


def test_hf_graph_defer_decode_against_the_planner():
    """The planner's hf-graph-defer (max(GPU + 0.4 ms, host per step)): 8B -4.6%, 8B fused -0.6%, 1B p512 +6.1%;
    the same session's plain hf-graph 8B read -16% against hf-graph's serial model (host in series)."""
    err = {p.values[0].case: p.values[0].error for p in row_params(WORKLOADS)
           if p.values[0].metric == "decode_s_per_token"}
    for name in ("llama-3.1-8b/b1-p128-g256-bf16-hf-graph-defer", "llama-3.1-8b/b1-p128-g256-bf16-hf-graph-fused-defer",
                 "llama-3.2-1b/b1-p512-g128-bf16-hf-graph-defer"):
        assert abs(err["infer/" + name]) < 0.08, (name, err["infer/" + name])
