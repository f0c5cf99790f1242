"""`bench train --qlora --lora-r` on the CPU: bitsandbytes' CPU backend quantises a tiny random-weight Llama to NF4
(double quantization, bf16 compute) and peft wraps its 4-bit layers; one warm-up and two timed steps run with the
QLoRA estimate beside. What the CPU cannot test: the CUDA kernels' speed and CUDA memory (no max_memory_allocated on
a CPU): research/scripts/gpu_qlora.sh measures those on an H200.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("bitsandbytes")

from gpuscope.errors import UserError  # noqa: E402
from gpuscope.estimate.lora import lora_params  # noqa: E402
from gpuscope.estimate.lora_memory import NF4_BYTES_PER_WEIGHT, quantized_params  # noqa: E402
from gpuscope.specs.hardware import load_hardware  # noqa: E402
from gpuscope.specs.hf_config import spec_from_config  # noqa: E402
from gpuscope.workloads import train as train_kind  # noqa: E402
from gpuscope.workloads.sets import TINY_LLAMA, train_case  # noqa: E402


def test_qlora_case_key_and_checks():
    lora = train_case("tiny-llama", 2, 64, config=TINY_LLAMA, lora_r=8)
    q = train_case("tiny-llama", 2, 64, config=TINY_LLAMA, lora_r=8, qlora=True)
    assert "qlora" not in lora and q["qlora"] is True
    assert train_kind.CASE.from_dict(q).name.endswith("-qlora_r8")
    assert train_kind.CASE.from_dict(q).key != train_kind.CASE.from_dict(lora).key
    with pytest.raises(UserError, match="--qlora needs --lora-r"):
        train_case("tiny-llama", 2, 64, config=TINY_LLAMA, qlora=True)
    with pytest.raises(UserError, match="16-bit"):
        train_case("tiny-llama", 2, 64, precision="fp32", config=TINY_LLAMA, lora_r=8, qlora=True)


def test_quantize_nf4_replaces_every_decoder_linear():
    import bitsandbytes as bnb
    import torch
    from transformers import AutoModelForCausalLM

    from gpuscope.measure.llm.lora import apply_lora
    from gpuscope.measure.models.hf_model import hf_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config(TINY_LLAMA), dtype=torch.bfloat16)
    bf16_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    pm, fields = apply_lora(model, {"lora_r": 4, "qlora": True, "precision": "amp-bf16"})
    m = spec_from_config(TINY_LLAMA)
    frozen = sum(p.numel() * p.element_size() for p in pm.parameters() if not p.requires_grad)
    assert bf16_bytes - frozen == 1.5 * quantized_params(m)  # 2 bytes a weight -> half a byte (packed NF4)
    assert fields["quantized_linears"] == 7 * m.num_layers and fields["lora_trainable_params"] == lora_params(m, 4)
    four_bit = [mod for mod in pm.modules() if type(mod) is bnb.nn.Linear4bit]
    assert len(four_bit) == fields["quantized_linears"]
    packed = sum(mod.weight.numel() for mod in four_bit)  # uint8, two 4-bit weights a byte
    assert packed * 2 == quantized_params(m)
    assert all(mod.weight.quant_state.nested and mod.weight.quant_state.blocksize == 64 for mod in four_bit)
    assert type(pm.get_output_embeddings()) is torch.nn.Linear  # lm_head stays bf16
    assert 0.5 < NF4_BYTES_PER_WEIGHT < 0.52


def test_tiny_qlora_train_case_runs_with_estimate_beside():
    d = train_case("tiny-llama", 2, 64, precision="amp-bf16", steps=2, warmup=1, config=TINY_LLAMA, lora_r=8,
                   qlora=True, device="cpu")
    case = train_kind.CASE.from_dict(d)
    res = train_kind.run(case)
    assert res["status"] == "ok", res
    m = spec_from_config(TINY_LLAMA)
    assert res["qlora"] and res["bnb_quant_type"] == "nf4" and res["bnb_double_quant"]
    assert res["lora_trainable_params"] == lora_params(m, 8) and res["loss_finite"]
    est = train_kind.estimate(case, load_hardware("h200"))
    assert est.lora["qlora"] and est.inputs["qlora"]
    lora_est = train_kind.estimate(train_kind.CASE.from_dict({**d, "qlora": False}), load_hardware("h200"))
    assert est.breakdown_bytes["base_weights"] < lora_est.breakdown_bytes["base_weights"]
