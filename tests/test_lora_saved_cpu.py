"""The LoRA activation model (estimate/lora_memory.lora_layer_saved_bytes) against what autograd really saves.

A tiny random-weight Llama in bf16 is wrapped by ``peft.get_peft_model`` (fp32 adapters) and run forward under
bf16 autocast on the CPU; ``torch.autograd.graph.saved_tensors_hooks`` records every tensor saved for backward.
Parameters (the frozen base's weights, saved by reference) are left out, each storage counted once. The planner's
decoder layers + the final norm's fp32 copy (4 T h) + autocast's 16-bit adapter copies (2 A) must match within
5%. Without dropout only: the CPU's dropout mask is in x's dtype, CUDA's (which the planner counts) is bool.
"""

from __future__ import annotations

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_memory import LoraDtypes, lora_layer_saved_bytes
from gpuscope.specs.hf_config import spec_from_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

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


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "v_proj"], ["o_proj", "down_proj"]])
def test_saved_activations_match_autograd(targets):
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**CFG)
    base = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(torch.bfloat16)
    model = peft.get_peft_model(base, peft.LoraConfig(r=8, target_modules=targets, lora_dropout=0.0))
    model.train()
    real = _saved_bytes(model)
    m = spec_from_config(CFG)
    shape = lora_shape(m, 8, targets if isinstance(targets, str) else ",".join(targets))
    dt = LoraDtypes.of("amp-bf16")
    layers = sum(sum(lora_layer_saved_bytes(m, B, S, dt, list(shape.sites_per_layer[i]), 8, 0.0,
                                            first=i == 0).values())
                 for i in range(m.num_layers))
    ours = layers + 4 * B * S * m.hidden_size + 2 * shape.trainable
    assert ours == pytest.approx(real, rel=0.05), f"planner {ours:,.0f} bytes, autograd saved {real:,}"
