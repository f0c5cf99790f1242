"""peft's prepare_model_for_kbit_training as the QLoRA memory planner models it (lora_memory.py, ``kbit_prep``):
fp32 embeddings, norms and lm_head (2 more bytes a parameter that is not 4-bit), autocast's bf16 copy of lm_head saved
through the head, and an fp32 residual stream (the checkpointed layer inputs at 4 bytes)."""

from __future__ import annotations

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_memory import lora_train_memory, quantized_params
from gpuscope.estimate.params import count_params
from gpuscope.specs.models import load_model


def _forward(m, seq, prep):
    return lora_train_memory(m, count_params(m), lora_shape(m, 32), micro_batch=1, seq=seq, precision="amp-bf16",
                             optimizer="adamw", recompute="full", grad_accum=1, fused=True, qlora=True,
                             loss="hf-shift", kbit_prep=prep)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen2.5-7b"])
def test_fixed_and_per_token_parts(model):
    m = load_model(model)
    pc = count_params(m)
    fixed = 2.0 * (pc.total - quantized_params(m)) + 2.0 * m.vocab_size * m.hidden_size
    for seq in (1024, 8192):
        on, off = _forward(m, seq, True), _forward(m, seq, False)
        extra = on.phases["forward"] - off.phases["forward"]
        assert extra == pytest.approx(fixed + 2.0 * m.num_layers * seq * m.hidden_size)
        assert on.breakdown["base_weights"] - off.breakdown["base_weights"] == pytest.approx(
            2.0 * (pc.total - quantized_params(m)))
        # the optimizer step holds the fp32 parameters, not the head's copy
        assert on.phases["optimizer"] - off.phases["optimizer"] == pytest.approx(2.0 * (pc.total - quantized_params(m)))
