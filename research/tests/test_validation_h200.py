"""The planner against real runs on an NVIDIA H200 (research/results/2026-11-29-h200/measurements.jsonl, 28 cases:
transformers 5.17 / torch 2.11, random weights, bf16 `generate` and AMP/bf16/fp32 training with fused AdamW).

Uncalibrated catalog figures are used (the H200 entry's efficiencies were measured on that machine: GEMM and copy
ceilings, not these workloads). Targets (issue 2): peak memory within 5% of torch.cuda.max_memory_allocated,
prefill/step time within 15%. Cases the model is known to miss carry their own, wider bound and the reason: the
test fails if such a case gets worse, and also if it improves into the target band (then the exception must go).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.explain.compare import read_records
from validation_rows import check_row, row_params

RESULTS = Path(__file__).resolve().parents[1] / "results" / "2026-11-29-h200" / "measurements.jsonl"
RECORDS = read_records(RESULTS)

# (case name prefix, metric) -> (bound on |error|, why the model misses)
KNOWN_MISSES = {
    ("infer/llama-3.2-1b/b1-p512-g64-bf16", "prefill_s"):
        (0.30, "host-bound 512-token prefill; TTFT samples fell from 25.7 to 14.7 ms over 5 repeats (warming host)"),
    ("infer/phi-3-mini/b4-p2048-g32-bf16", "prefill_s"):
        (0.22, "Phi-3's sliding window makes transformers pass SDPA an explicit mask (3x slower than is_causal, "
               "now modelled: -26% became -17%); the rest (fused gate_up chunk, 96-wide heads) is not profiled"),
    ("infer/mixtral-8x7b/b1-p1024-g16-bf16", "prefill_s"):
        (0.50, "not the expert GEMMs: torch._grouped_mm ran at 88% (Mixtral) / 70% (DS-V2-Lite) of the dense rate "
               "(research/results/2026-11-29-h200-b/moe_attn.json); routing (top-k, sort, gather/scatter) is unmodelled"),
    ("infer/deepseek-v2-lite/b4-p1024-g16-bf16", "prefill_s"): (0.56, "as Mixtral prefill"),
    ("infer/qwen2.5-7b/b4-p4096-g32-bf16", "decode_s_per_token"):
        (0.42, "TPOT 34 ms against a bare decode forward of 19.9 ms: bimodal E2E samples (1.03 / 1.49 s)"),
    ("infer/gpt2-xl/b8-p512-g64-bf16", "decode_s_per_token"):
        (0.40, "measured in the first run, before the full-length warm-up (E2E samples 5.6/1.9/2.0 s); its bare decode "
               "forward (28.4 ms) is still 30% above the estimate: GPT-2 layers cost the host more than 23 kernels"),
}


ROWS = row_params(RECORDS)


def test_the_measured_set_is_complete():
    assert len(RECORDS) == 28
    kinds = {r["case"]["kind"] for r in RECORDS}
    assert kinds == {"infer", "train"}


@pytest.mark.parametrize("row", ROWS)
def test_estimate_vs_h200(row):
    check_row(row, (row.case, row.metric), KNOWN_MISSES)
