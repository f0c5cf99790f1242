"""LoRA / QLoRA fine-tuning plans (estimate/lora_memory.py, estimate/lora_train.py, `plan train --lora-r`).

Properties: memory grows with rank, targets, micro-batch and sequence; QLoRA is never above LoRA at the same
shape; a full fine-tune (estimate_train) is never below LoRA; the breakdown parts sum to the peak. CLI: the JSON
keys of shared/CONTRACT.md plus ``lora.trainable_params``; bad input is one sentence and exit 2.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.estimate.lora import lora_params, lora_shape
from gpuscope.estimate.lora_train import estimate_lora_train
from gpuscope.estimate.train import estimate_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

MODELS = ("llama-3.2-1b", "qwen2.5-0.5b", "gpt2", "phi-3-mini", "gemma-2b")
ATTN = {"llama-3.2-1b": "q_proj,v_proj", "qwen2.5-0.5b": "q_proj,v_proj", "gpt2": "c_attn",
        "phi-3-mini": "qkv_proj", "gemma-2b": "q_proj,v_proj"}
H200 = load_hardware("h200")


def _peak(name, r=16, targets="all-linear", mb=1, seq=512, qlora=False, recompute="none", precision="amp-bf16",
          dropout=0.0):
    m = load_model(name)
    e = estimate_lora_train(m, H200, lora_shape(m, r, targets, dropout), micro_batch=mb, seq=seq, qlora=qlora,
                            recompute=recompute, precision=precision)
    return e.peak_bytes_per_gpu


shapes = dict(name=st.sampled_from(MODELS), r=st.sampled_from([1, 4, 8, 16, 64, 256]), mb=st.integers(1, 4),
              seq=st.sampled_from([64, 256, 1024, 2048]), recompute=st.sampled_from(["none", "full"]),
              precision=st.sampled_from(["amp-bf16", "amp-fp16", "bf16"]), dropout=st.sampled_from([0.0, 0.1]))


@settings(max_examples=40, deadline=None)
@given(**shapes)
def test_memory_grows_with_rank_batch_and_sequence(name, r, mb, seq, recompute, precision, dropout):
    kw = dict(recompute=recompute, precision=precision, dropout=dropout)
    p = _peak(name, r, mb=mb, seq=seq, **kw)
    assert _peak(name, 2 * r, mb=mb, seq=seq, **kw) > p
    assert _peak(name, r, mb=mb + 1, seq=seq, **kw) > p
    assert _peak(name, r, mb=mb, seq=2 * seq, **kw) > p


@settings(max_examples=30, deadline=None)
@given(**shapes)
def test_more_targets_more_memory_and_qlora_never_above_lora(name, r, mb, seq, recompute, precision, dropout):
    kw = dict(mb=mb, seq=seq, recompute=recompute, precision=precision, dropout=dropout)
    assert _peak(name, r, "all-linear", **kw) > _peak(name, r, ATTN[name], **kw)
    assert _peak(name, r, qlora=True, **kw) <= _peak(name, r, **kw)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(MODELS), r=st.sampled_from([8, 64, 256]), mb=st.integers(1, 4),
       seq=st.sampled_from([128, 1024, 2048]), recompute=st.sampled_from(["none", "full"]),
       precision=st.sampled_from(["amp-bf16", "amp-fp16", "fp32"]))
def test_full_fine_tune_never_below_lora(name, r, mb, seq, recompute, precision):
    """Not at ``bf16`` (no autocast): there peft casts every adapter's input to its fp32 weights, one fp32 copy per
    target (saved_tensors_hooks on CPU: two targets reading one bf16 x save two fp32 copies), which can outweigh
    pure-bf16 full training's 16-bit activations at long sequences (Llama-3.2-1B, 4 x 2048: 36.0 against 34.4 GB)."""
    m = load_model(name)
    full = estimate_train(m, H200, micro_batch=mb, seq=seq, recompute=recompute, precision=precision)
    assert full.peak_bytes_per_gpu >= _peak(name, r, mb=mb, seq=seq, recompute=recompute, precision=precision)


@pytest.mark.parametrize("qlora", [False, True])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_breakdown_sums_to_peak(qlora, recompute):
    m = load_model("llama-3.1-8b")
    e = estimate_lora_train(m, H200, lora_shape(m, 16), micro_batch=2, seq=2048, qlora=qlora, recompute=recompute)
    assert sum(e.breakdown_bytes.values()) == pytest.approx(e.peak_bytes_per_gpu, rel=1e-9)
    assert {"base_weights", "adapter_weights", "adapter_grads", "adapter_optimizer_states",
            "activations"} <= set(e.breakdown_bytes)


def test_qlora_base_is_nf4_with_double_quant():
    """Llama-3.1-8B: 6.98e9 decoder Linear weights at 4.127 bits + 1.05e9 embedding/lm_head/norm params in bf16."""
    m = load_model("llama-3.1-8b")
    e = estimate_lora_train(m, H200, lora_shape(m, 16), micro_batch=1, seq=512, qlora=True)
    linear = 32 * (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336)
    rest = 8_030_261_248 - linear
    assert e.breakdown_bytes["base_weights"] == pytest.approx(linear * 4.127 / 8 + rest * 2, rel=1e-4)


def test_mfu_convention_is_4n_plus_6_adapters():
    m = load_model("llama-3.2-1b")
    e = estimate_lora_train(m, H200, lora_shape(m, 8), micro_batch=1, seq=1024)
    pc = e.params
    attn = 12 * m.num_layers * 1024 * m.q_dim
    assert e.flops["model_per_token"] == pytest.approx(4 * pc["matmul_active"] + 6 * lora_params(m, 8) + attn)


# ---- CLI ---------------------------------------------------------------------------------------------------------
def _cli(*args):
    from typer.testing import CliRunner

    import gpuscope.cli as cli

    cli._register()
    return CliRunner().invoke(cli.app, ["plan", "train", *args])


def test_cli_lora_json_keys():
    r = _cli("--model", "llama-3.1-8b", "--gpu", "rtx4090", "--lora-r", "16", "--lora-alpha", "32",
             "--lora-targets", "q_proj,k_proj,v_proj,o_proj", "--recompute", "full", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["schema"] == "gpuscope.estimate/1" and isinstance(d["fits"], bool)
    for key in ("peak_bytes_per_gpu", "breakdown_bytes"):
        assert key in d["memory"]
    assert d["time"]["step_s"] > 0 and d["throughput"]["tokens_per_s"] > 0 and 0 < d["mfu"] < 1
    assert d["lora"]["trainable_params"] == 32 * 16 * (2 * 4096 + 2 * (4096 + 1024) + 2 * 4096) == 13_631_488
    assert d["lora"]["scaling"] == 2.0
    assert d["memory"]["breakdown_bytes"]["adapter_weights"] == 4 * 13_631_488


@pytest.mark.parametrize("args, words", [
    (("--lora-r", "0"), "--lora-r must be a positive integer"),
    (("--lora-r", "8", "--lora-targets", "q_proj,wq"), "no linear module named 'wq'"),
    (("--qlora",), "--qlora needs --lora-r"),
    (("--lora-r", "8", "--qlora", "--precision", "fp32"), "--qlora computes in bf16 or fp16"),
    (("--lora-r", "8", "--lora-dropout", "1"), "--lora-dropout must be in [0, 1)"),
    (("--lora-r", "8", "--num-gpus", "4"), "plans one GPU"),
])
def test_cli_bad_lora_input_is_one_sentence(args, words, capsys):
    from gpuscope.cli import main

    with pytest.raises(SystemExit) as e:
        main(["plan", "train", "--model", "llama-3.2-1b", "--gpu", "h100", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "Traceback" not in err and "\n" not in err
