"""LoRA and QLoRA on a measured training case: peft's ``get_peft_model`` over the random-weight model measure/models
builds, under QLoRA after bitsandbytes has quantised its decoder Linear layers to 4-bit NF4.

Case keys (omitted when unset, so a full-training case keeps its key): ``lora_r`` (rank), ``lora_alpha``
(default: the rank), ``lora_targets`` ("all-linear" or comma-separated module names), ``lora_dropout`` (0),
``qlora`` (false).
The base is built in the compute dtype and frozen (``amp-bf16``: bf16 base, fp32 adapters, bf16 autocast, as
``get_peft_model`` + ``Trainer(bf16=True)``; ``amp-fp16`` the same in fp16; ``bf16``: bf16 base; ``fp32``: fp32),
the adapters stay in peft's fp32 (``autocast_adapter_dtype=True``), and only the adapters go to the optimizer.

QLoRA (``qlora``): what ``from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True,
bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=<the base dtype>))`` holds,
built without a checkpoint: the random-weight 16-bit model is built on the device, then every ``nn.Linear`` of it
except the output layer (transformers' bitsandbytes quantizer skips the output embedding) is replaced by a
``bitsandbytes.nn.Linear4bit`` whose ``Params4bit`` is quantised from that weight as it moves to the device (64-weight
blocks, absmax quantised again in blocks of 256); the 16-bit weight is freed as its module goes. The model is
marked ``is_loaded_in_4bit`` as the quantizer marks it, so peft wraps those layers with its bnb ``Linear4bit``
adapter layer. ``peft.prepare_model_for_kbit_training`` is not called: it would upcast the embeddings, norms and
lm_head to fp32, which ``Trainer`` alone does not do.
"""

from __future__ import annotations

import torch

BASE_DTYPES = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def wants_lora(case: dict) -> bool:
    return case.get("lora_r") is not None


def lora_base_dtype(precision: str) -> torch.dtype:
    return BASE_DTYPES[precision]


def quantize_nf4(model, compute_dtype: torch.dtype) -> dict:
    """Every ``nn.Linear`` but the output layer replaced in place by bitsandbytes' NF4 ``Linear4bit`` with double
    quantization (module docstring); returns the result's QLoRA fields."""
    try:
        import bitsandbytes as bnb
    except ImportError as e:
        raise RuntimeError(f"qlora needs bitsandbytes, which is not importable here ({e}); pip install "
                           "bitsandbytes") from None

    head = model.get_output_embeddings()
    names = [name for name, mod in model.named_modules() if type(mod) is torch.nn.Linear and mod is not head]
    for name in names:  # one at a time: each 16-bit weight is freed as its module is replaced
        lin = model.get_submodule(name)
        q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None,
                              compute_dtype=compute_dtype, compress_statistics=True, quant_type="nf4",
                              device="meta")
        q.weight = bnb.nn.Params4bit(lin.weight.data, requires_grad=False, compress_statistics=True,
                                     quant_type="nf4", module=q).to(lin.weight.device)
        if lin.bias is not None:
            q.bias = torch.nn.Parameter(lin.bias.data, requires_grad=False)
        q.requires_grad_(False)
        model.set_submodule(name, q)
        del lin, q
    model.is_loaded_in_4bit = True  # as transformers' Bnb4BitHfQuantizer marks a 4-bit model (peft reads it)
    return {"qlora": True, "bnb_version": bnb.__version__, "quantized_linears": len(names), "bnb_quant_type": "nf4",
            "bnb_double_quant": True, "bnb_compute_dtype": str(compute_dtype).replace("torch.", "")}


def apply_lora(model, case: dict):
    """(the peft model, the result's LoRA fields): under ``case['qlora']`` the base quantised first; adapters on
    ``case['lora_targets']``, base frozen."""
    import peft

    fields = quantize_nf4(model, lora_base_dtype(case.get("precision", "amp-bf16"))) if case.get("qlora") else {}
    r = int(case["lora_r"])
    targets = case.get("lora_targets") or "all-linear"
    cfg = peft.LoraConfig(r=r, lora_alpha=float(case.get("lora_alpha") or r),
                          lora_dropout=float(case.get("lora_dropout") or 0.0),
                          target_modules=targets if targets == "all-linear" else targets.split(","))
    pm = peft.get_peft_model(model, cfg)
    trainable = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    fields.update({"lora_trainable_params": trainable, "peft_version": peft.__version__,
                   "lora_targets_resolved": sorted(pm.peft_config["default"].target_modules)})
    return pm, fields
