"""LoRA trainable parameters (estimate/lora.py) against peft's ``get_peft_model`` on the meta device.

For every tiny config of tests/test_params_meta.py (every supported family) and every preset at its real size,
the transformers model is built on the meta device and wrapped by ``peft.get_peft_model`` (also on the meta
device: nothing is allocated); ``lora_params`` must equal the sum of ``numel`` of the parameters peft marks
trainable, exactly, for ``all-linear`` and for an attention-only list.
"""

from __future__ import annotations

import pytest

from gpuscope.estimate.lora import ALL_LINEAR, lora_params, target_names
from gpuscope.specs.hf_config import spec_from_config
from gpuscope.specs.models import preset_config, preset_names

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from test_params_meta import TINY, _clean, build_meta  # noqa: E402


def _peft_trainable(cfg: dict, r: int, targets) -> int:
    model = build_meta(cfg)
    lc = peft.LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=targets)
    with torch.device("meta"):
        pm = peft.get_peft_model(model, lc)
    return sum(p.numel() for p in pm.parameters() if p.requires_grad)


def _attention_only(names: tuple[str, ...]) -> list[str]:
    attn = [n for n in names if n in ("q_proj", "v_proj", "c_attn", "query_key_value", "qkv_proj", "kv_b_proj")]
    return attn or list(names[:1])


def _check(cfg: dict, label: str, r: int) -> None:
    spec = spec_from_config(cfg, name=label)
    for targets in (ALL_LINEAR, _attention_only(target_names(spec))):
        ours = lora_params(spec, r, targets)
        theirs = _peft_trainable(cfg, r, targets)
        assert ours == theirs, f"{label} r={r} targets={targets}: gpuscope {ours:,}, peft {theirs:,}"


@pytest.mark.parametrize("label", sorted(TINY))
def test_tiny_config_lora_params_match_peft(label):
    _check(_clean(TINY[label]), label, 8)


@pytest.mark.parametrize("name", preset_names())
def test_preset_lora_params_match_peft(name):
    _check(preset_config(name), name, 16)
