"""LoRA on a measured training case: peft's ``get_peft_model`` over the random-weight model measure/models builds.

Case keys (omitted when unset, so a full-training case keeps its key): ``lora_r`` (rank), ``lora_alpha``
(default: the rank), ``lora_targets`` ("all-linear" or comma-separated module names), ``lora_dropout`` (0).
The base is built in the compute dtype and frozen (``amp-bf16``: bf16 base, fp32 adapters, bf16 autocast, as
``get_peft_model`` + ``Trainer(bf16=True)``; ``amp-fp16`` the same in fp16; ``bf16``: bf16 base; ``fp32``: fp32),
the adapters stay in peft's fp32 (``autocast_adapter_dtype=True``), and only the adapters go to the optimizer.
QLoRA (bitsandbytes 4-bit) is not measured here.
"""

from __future__ import annotations

import torch

BASE_DTYPES = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def wants_lora(case: dict) -> bool:
    return case.get("lora_r") is not None


def lora_base_dtype(precision: str) -> torch.dtype:
    return BASE_DTYPES[precision]


def apply_lora(model, case: dict):
    """(the peft model, the result's LoRA fields): adapters on ``case['lora_targets']``, base frozen."""
    import peft

    r = int(case["lora_r"])
    targets = case.get("lora_targets") or "all-linear"
    cfg = peft.LoraConfig(r=r, lora_alpha=float(case.get("lora_alpha") or r),
                          lora_dropout=float(case.get("lora_dropout") or 0.0),
                          target_modules=targets if targets == "all-linear" else targets.split(","))
    pm = peft.get_peft_model(model, cfg)
    trainable = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    return pm, {"lora_trainable_params": trainable, "peft_version": peft.__version__,
                "lora_targets_resolved": sorted(pm.peft_config["default"].target_modules)}
