"""QLoRA where the GPU sets the step, and where bitsandbytes' host time goes (research/results/2026-12-02-h200-b/
qlora.md): the two `bench train --qlora` runs of Llama-3.1-8B (r16 all-linear, micro-batch 4 x 2048, with and
without gradient checkpointing; qlora.jsonl, exported from call2/gpu_qlora2/gpu_qlora2.sqlite) planned again on the
catalog H200 as `bench train --gpu h200` planned them, and the CUDA trace of call2/gpu_qlora2/trace/ (one and three
decoder layers, bf16 / NF4 / LoRA / QLoRA) that sets estimate/lora_train.py's BNB_*_HOST_UNITS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rowcheck import check_rows, qlora_results, records, rows

from gpuscope.estimate import lora_train
from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_train import estimate_lora_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

RUNS = Path(__file__).resolve().parents[1] / "results"
HERE = RUNS / "2026-12-02-h200-b"
QLORA = HERE / "qlora.jsonl"
TRACE = HERE / "call2" / "gpu_qlora2" / "trace"
LORA = RUNS / "2026-12-01-h200" / "lora.jsonl"
CKPT = "train/llama-3.1-8b/mb4-s2048-amp-bf16-rc_full-qlora_r16"
NO_CKPT = "train/llama-3.1-8b/mb4-s2048-amp-bf16-rc_none-qlora_r16"
LORA_CKPT = "train/llama-3.1-8b/mb4-s2048-amp-bf16-rc_full-lora_r16"


def test_the_runs_and_their_path():
    """bitsandbytes 0.50.2 NF4 with double quantization, 224 quantized Linears, 8192 tokens a micro-batch: past
    1536, the dequantise-then-F.linear path the planner prices."""
    for res in qlora_results(QLORA, {CKPT, NO_CKPT}):
        assert res["micro_batch"] * res["seq"] == 8192 and res["device_name"] == "NVIDIA H200"


@pytest.mark.parametrize("case", [CKPT, NO_CKPT])
def test_planned_within_target(case):
    """Peak, forward, backward and optimizer peaks within 5%, the step within 15% (+7.9% and +8.4%)."""
    got = rows(records(QLORA)[case])
    check_rows(got, case)
    assert abs(got["peak_bytes"].error) < 0.01 and abs(got["forward_peak_bytes"].error) < 0.01


def test_qlora_is_faster_than_lora_where_the_gpu_sets_the_step():
    """Micro-batch 4 x 2048 with checkpointing: the QLoRA step (0.977 s) is shorter than the LoRA step of
    2026-12-01 on the same kind of H200 and software (1.049 s), as planned (1.055 against 1.139 s): peft's bnb layer
    skips the fp32 casts of x that its bf16 layer makes under autocast, more bytes than three dequant passes."""
    q = rows(records(QLORA)[CKPT])["step_s"]
    lo = rows(records(LORA)[LORA_CKPT])["step_s"]
    assert q.measured < 0.95 * lo.measured and q.estimated < 0.95 * lo.estimated
    lres = records(LORA)[LORA_CKPT]["result"]
    qres = records(QLORA)[CKPT]["result"]
    assert (lres["peft_version"], lres["device_name"]) == (qres["peft_version"], qres["device_name"])


def test_the_planner_has_both_runs_gpu_bound():
    """At 8192 tokens the host no longer sets the step (it did at 2048: 2026-12-02-h200)."""
    m = load_model("llama-3.1-8b")
    for rc in ("full", "none"):
        t = estimate_lora_train(m, load_hardware("h200"), lora_shape(m, 16), micro_batch=4, seq=2048, recompute=rc,
                                qlora=True).time
        assert t["gpu_s_per_micro_batch"] > 1.5 * t["host_s_per_micro_batch"]


def _trace() -> dict:
    return json.loads((TRACE / "trace_times.json").read_text())


def test_the_host_units_are_the_traced_per_linear_costs():
    """NF4 against bf16 frozen Linears, (3 layers - 1 layer) / 14, un-profiled medians of 10: forward 217.7 us,
    backward 169.0 us a Linear, in launch_s of the catalog H200 (17.2 us)."""
    diff = _trace()["difference_us_per_linear"]["nf4-bf16"]
    assert lora_train.BNB_FORWARD_HOST_UNITS * 17.2 == pytest.approx(diff["fwd_issue"], abs=0.05)
    assert lora_train.BNB_BACKWARD_HOST_UNITS * 17.2 == pytest.approx(diff["bwd_issue"], abs=0.05)


def test_matmul4bit_backward_runs_python_and_skips_layer_0_qkv():
    """MatMul4Bit.backward timed in place: ~220 us a call, F.dequantize_4bit ~160 us of it (two torch.library ops
    with Python kernels and an add); 4 calls a step in one layer under peft (o, gate, up, down: q, k, v read the
    frozen embedding's output), 7 a layer after it; with the input made to need a gradient (nf4), 7 in every layer."""
    t, iters = _trace(), _trace()["iters"]
    for key in ("nf4_L1", "nf4_L3", "qlora_L1", "qlora_L3"):
        mm = t[key]["matmul4bit"]
        assert 200 < mm["backward"] < 250 and 150 < mm["dequantize_4bit"] < 175
        assert mm["dequantize_4bit"] < mm["backward"]
    assert t["qlora_L1"]["matmul4bit"]["backward_calls"] == 4 * iters
    assert t["qlora_L3"]["matmul4bit"]["backward_calls"] == (4 + 14) * iters
    assert t["nf4_L1"]["matmul4bit"]["backward_calls"] == 7 * iters


def test_the_profile_names_the_ops():
    """torch.profiler of one QLoRA step (1 layer): 7 gemm_4bit forwards (Python-kernel op), 4 MatMul4BitBackward
    nodes, each with one dequantize_blockwise and one dequantize_4bit; no synchronize inside bitsandbytes (the three
    cudaDeviceSynchronize are the harness's two and the profiler's own)."""
    rows = {r["name"]: r for r in json.loads((TRACE / "profile_qlora.json").read_text())}
    assert rows["bitsandbytes::gemm_4bit"]["count"] == 7
    assert rows["MatMul4BitBackward"]["count"] == 4
    assert rows["bitsandbytes::dequantize_blockwise"]["count"] == 4
    assert rows["bitsandbytes::dequantize_4bit"]["count"] == 4
    assert rows["cudaDeviceSynchronize"]["count"] == 3
    per_call = rows["bitsandbytes::gemm_4bit"]["cpu_total_us"] / 7
    assert per_call > 2 * rows["aten::linear"]["cpu_total_us"] / rows["aten::linear"]["count"]
