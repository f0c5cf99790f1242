"""The QLoRA activation model against what autograd saves through peft's bitsandbytes layer (CPU backend).

peft's bnb ``Linear4bit`` casts x to the adapters' fp32 only when ``torch.is_autocast_enabled()`` is false. Asked
without a device that reads CUDA's autocast: true in a CUDA bf16 run, false under the CPU's. So on the CPU the bnb
layer casts (and saves a copy per target, as plain LoRA), and this test makes the call answer for the CPU's autocast
as it answers for CUDA's on a GPU: then x reaches lora_A uncast and targets reading one tensor save it once
(estimate/lora_memory._adapter_saved's ``shared``; o_proj's input is SDPA's saved output). The planner's decoder
layers + the final norm's fp32 copy (4 T h) + autocast's 16-bit adapter copies (2 A) must match the bytes saved in
that branch within 6% (q, k, v adapted: +5.3%, the frozen base's part, which reads +4.9% through plain LoRA's layer
in tests/test_lora_saved_cpu.py too; all-linear +4.2%; o_proj and down_proj -0.8%), and the CPU's own (casting) branch must save more wherever targets share an input.
"""

from __future__ import annotations

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_memory import LoraDtypes, lora_layer_saved_bytes
from gpuscope.specs.hf_config import spec_from_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytest.importorskip("bitsandbytes")

CFG = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, vocab_size=300, max_position_embeddings=256)
B, S = 2, 128


def _saved_bytes(model) -> int:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    ids = torch.randint(0, CFG["vocab_size"], (B, S))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids)
    del out
    return sum(seen.values())


def _planned(targets, shared: bool) -> float:
    m = spec_from_config(CFG)
    shape = lora_shape(m, 8, targets if isinstance(targets, str) else ",".join(targets))
    dt = LoraDtypes.of("amp-bf16")
    layers = sum(sum(lora_layer_saved_bytes(m, B, S, dt, list(shape.sites_per_layer[i]), 8, 0.0, first=i == 0,
                                            shared=shared).values()) for i in range(m.num_layers))
    return layers + 4 * B * S * m.hidden_size + 2 * shape.trainable


def _qlora_model(targets):
    from gpuscope.measure.llm.lora import quantize_nf4

    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**CFG)
    base = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(torch.bfloat16)
    quantize_nf4(base, torch.bfloat16)
    model = peft.get_peft_model(base, peft.LoraConfig(r=8, target_modules=targets, lora_dropout=0.0))
    model.train()
    return model


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "k_proj", "v_proj"], ["o_proj", "down_proj"]])
def test_qlora_saved_activations_as_on_cuda(targets, monkeypatch):
    real_cpu = _saved_bytes(_qlora_model(targets))  # the CPU's branch: cast per target (plain LoRA's model)
    plain = torch.is_autocast_enabled
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *a: plain(*a) if a else plain("cpu"))
    real_cuda_branch = _saved_bytes(_qlora_model(targets))
    assert _planned(targets, shared=True) == pytest.approx(real_cuda_branch, rel=0.06)
    if targets != ["o_proj", "down_proj"]:  # several targets read one tensor: the shared branch saves less
        assert real_cuda_branch < real_cpu
