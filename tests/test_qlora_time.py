"""QLoRA step time (estimate/lora_train.py): what bitsandbytes' MatMul4Bit does per frozen 4-bit Linear is priced
once in the forward, again in the backward and again in a recompute (3 kernels and 2.77 bytes a weight each time),
and its Python's host time as traced per phase. Planner only (no torch)."""

from __future__ import annotations

import pytest

from gpuscope.estimate import lora_train
from gpuscope.estimate.engines import engine_for
from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_memory import NF4_BYTES_PER_WEIGHT, quantized_params
from gpuscope.estimate.lora_train import (BNB_DEQUANT_BYTES_PER_WEIGHT, BNB_DEQUANT_KERNELS, bnb_backward_linears,
                                          estimate_lora_train, quantized_linears)
from gpuscope.estimate.train import train_host_for
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

HW = load_hardware("h200")


def _plan(name="llama-3.1-8b", **kw):
    m = load_model(name)
    args = dict(micro_batch=1, seq=2048, qlora=True) | kw
    return m, estimate_lora_train(m, HW, lora_shape(m, 16), **args)


def test_dequant_bytes_a_weight():
    """NF4 codes, both absmax levels and the offset add's fp32 traffic, the bf16 weight written: above the stored
    4.127 bits + 2 bytes, below 3 bytes."""
    assert BNB_DEQUANT_BYTES_PER_WEIGHT == pytest.approx(2.7659, abs=1e-4)
    assert NF4_BYTES_PER_WEIGHT + 2.0 < BNB_DEQUANT_BYTES_PER_WEIGHT < 3.0


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen2.5-7b", "gpt2-medium"])
def test_every_quantized_weight_is_dequantised_in_forward_and_backward(name):
    m, est = _plan(name, with_ops=True)
    ops = {o["name"]: o for o in est.ops if o["name"].startswith("nf4_dequant")}
    assert set(ops) == {"nf4_dequant", "nf4_dequant_bwd"}
    for o in ops.values():  # the timed ops hold the totals over the layers
        assert o["count"] == m.num_layers
        assert o["bytes"] == pytest.approx(quantized_params(m) * BNB_DEQUANT_BYTES_PER_WEIGHT)
        assert o["kernels"] == BNB_DEQUANT_KERNELS * quantized_linears(m)
    assert quantized_linears(m) == m.num_layers * (7 if m.gated_mlp else 4)


def test_no_dequantisation_without_qlora():
    _, est = _plan(qlora=False, with_ops=True)
    assert not [o for o in est.ops if o["name"].startswith("nf4_dequant")]


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_bitsandbytes_python_host_per_phase(monkeypatch, recompute):
    """The traced host of gemm_4bit (forward, and the recompute that re-runs it) and of MatMul4Bit.backward, less
    what TrainHost already prices for their 3 kernels in that phase; the backward for all but layer 0's q, k, v."""
    m, with_py = _plan(recompute=recompute)
    th, launch = train_host_for(HW), engine_for("eager", HW).launch_s
    k = BNB_DEQUANT_KERNELS
    want = {"forward": (lora_train.BNB_FORWARD_HOST_UNITS - k * th.fwd) * quantized_linears(m),
            "recompute": (lora_train.BNB_FORWARD_HOST_UNITS - k * th.recompute) * quantized_linears(m)
            if recompute == "full" else 0.0,
            "backward": (lora_train.BNB_BACKWARD_HOST_UNITS - k * th.bwd) * (quantized_linears(m) - 3)}
    assert lora_train._bnb_host_s(m, th, launch, recompute == "full") == pytest.approx(
        {p: u * launch for p, u in want.items()})
    monkeypatch.setattr(lora_train, "BNB_FORWARD_HOST_UNITS", 0.0)
    monkeypatch.setattr(lora_train, "BNB_BACKWARD_HOST_UNITS", 0.0)
    _, without = _plan(recompute=recompute)
    host = with_py.time["host_s_per_micro_batch"] - without.time["host_s_per_micro_batch"]
    assert host == pytest.approx(sum(want.values()) * launch)
    assert with_py.time["forward_s"] > without.time["forward_s"]


def test_the_first_layers_q_k_v_run_no_backward():
    """Their input is the frozen embedding's output (CUDA trace: 4 MatMul4Bit backwards a step in a 1-layer model)."""
    assert bnb_backward_linears(load_model("llama-3.1-8b")) == 224 - 3


def test_recompute_dequantises_a_third_time(monkeypatch):
    """Checkpointing re-runs each layer's forward, its dequantisation included: the dequant bytes move the
    recompute's GPU time by the forward pass's."""
    _, est = _plan(recompute="full", with_ops=True)
    monkeypatch.setattr(lora_train, "BNB_DEQUANT_BYTES_PER_WEIGHT", 0.0)
    _, light = _plan(recompute="full", with_ops=True)
    def dequant_s(e):
        return next(o["gpu_s"] for o in e.ops if o["name"] == "nf4_dequant")
    moved = dequant_s(est) - dequant_s(light)
    assert moved > 0.004  # Llama-3.1-8B: 19.3 GB a pass
    assert est.time["recompute_s"] - light.time["recompute_s"] == pytest.approx(moved)


def test_host_bound_h200_step_qlora_slower_than_lora():
    """Micro-batch 1 x 2048 on the H200 is host-bound: bitsandbytes' kernels and Python backward make QLoRA's step
    longer than LoRA's (0.282 s against 0.228 s measured: research/results/2026-12-02-h200/qlora.md)."""
    _, q = _plan()
    _, lo = _plan(qlora=False)
    assert q.time["step_s"] > 1.2 * lo.time["step_s"]
    assert q.time["host_s_per_micro_batch"] > q.time["gpu_s_per_micro_batch"]
