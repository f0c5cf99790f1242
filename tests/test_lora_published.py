"""LoRA / QLoRA peak memory against torchtune's published table (within 15%: the Llama 3.1 8B rows).

Source: pytorch/torchtune README.md, "Memory and training speed" (commit bd2a0fc7, 2026-04-23): "all the below
numbers are provided for batch size 2 (without gradient accumulation), a dataset packed to sequence length 2048,
and torch compile enabled"; Llama 3.1 8B LoRA on 1x 4090: 16.2 GiB peak memory per GPU; QLoRA on 1x 4090: 7.4 GiB.
And "Optimization flags" (Llama 3.2 3B, batch size 2, max sequence length 4096, packed, bf16, A100, compile,
chunked cross-entropy, activation checkpointing, activation offloading; LoRA and QLoRA without optimizer-in-backward
or 8-bit AdamW): "Peak Memory Active" LoRA 8.5 GiB, QLoRA 4.6 GiB.

Each row's configuration, from recipes/configs/llama3_1/8B_{lora,qlora}_single_device.yaml and
llama3_2/3B_{lora,qlora}_single_device.yaml at that commit: lora_attn_modules [q_proj, v_proj, output_proj]
(torchtune's output_proj is transformers' o_proj) with apply_lora_to_mlp (gate, up, down), not the output layer;
rank 8 / alpha 16 (8B), rank 64 / alpha 128 (3B); dropout 0; AdamW; activation checkpointing on; dtype bf16;
loss LinearCrossEntropyLoss (8 chunks) compiled: planned with ``loss="chunked"``.
Assumptions where torchtune differs from what the planner models (HF transformers + peft):
- torchtune keeps the adapters in bf16 (dtype bf16 for every parameter); the planner's are fp32 (peft): +0.1 GiB
  (8B, 21M adapter parameters: weights and AdamW states) to +0.5 GiB (3B, 97M).
- torch.compile of the whole model: the planner's activations are eager's (with checkpointing only each layer's
  input and one layer's working set are held, which compile changes little).
- the 3B rows also offload the checkpointed activations to the CPU; this file plans every row the HF + peft way
  (activations on the GPU, fp32 adapters), so it checks the 8B rows only. The 3B rows are reproduced with
  torchtune's own setup (activation offloading, bf16 adapters, chunked loss: the planner's offload_activations)
  in research/tests/test_lora_published_rows.py (LoRA +6.0%, QLoRA +12.3%).
- torchtune's QLoRA is torchao's NF4 (64-weight blocks, 8-bit scales in blocks of 256): the same 4.127 bits a
  weight as bitsandbytes' double-quantized NF4.
"""

from __future__ import annotations

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_train import estimate_lora_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

TARGETS = "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
GIB = 2**30
ROWS = [  # model, gpu, rank, alpha, micro-batch, seq, qlora, published GiB
    ("llama-3.1-8b", "rtx4090", 8, 16, 2, 2048, False, 16.2),
    ("llama-3.1-8b", "rtx4090", 8, 16, 2, 2048, True, 7.4),
]


@pytest.mark.parametrize("model, gpu, r, alpha, mb, seq, qlora, published", ROWS)
def test_torchtune_peak_memory(model, gpu, r, alpha, mb, seq, qlora, published):
    m = load_model(model)
    e = estimate_lora_train(m, load_hardware(gpu), lora_shape(m, r, TARGETS), micro_batch=mb, seq=seq,
                            recompute="full", qlora=qlora, alpha=alpha, loss="chunked")
    ours = e.peak_bytes_per_gpu / GIB
    assert abs(ours - published) / published <= 0.15, f"{model} qlora={qlora}: {ours:.2f} GiB vs {published} GiB"
