"""LoRA / QLoRA planner against two published tables (estimate/lora_train.py, estimate/lora_search.py).

1. Unsloth's README, "Context length benchmarks", "Llama 3.1 (8B) max. context length", column "Hugging Face + FA2"
   (https://github.com/unslothai/unsloth README.md, stored at commit 45ef9eab; the same table in
   https://unsloth.ai/blog/llama3-3, 10 Dec 2024): "We tested Llama 3.1 (8B) Instruct and did 4bit QLoRA on all
   linear layers (Q, K, V, O, gate, up and down) with rank = 32 with a batch size of 1. We padded all sequences to a
   certain maximum sequence length": 8 GB OOM, 12 GB 932, 16 GB 2,551, 24 GB 5,789, 40 GB 12,264, 48 GB 15,502,
   80 GB 28,454 tokens. Within 20%.
   The column is a line, not six measurements: every row lies on VRAM = 9.70 GB + 2.471 MB x tokens (checked below),
   so it says two things, a fixed part and a per-token part, and the small cards' rows hang on the fixed part.
   Assumptions (each a choice the table does not state):
   - HF + FA2 is transformers + peft + bitsandbytes (NF4, double quantization, bf16 compute), bf16 autocast, torch
     AdamW on peft's fp32 adapters, gradient checkpointing on every decoder layer (Unsloth's comparisons run HF with
     it), FlashAttention-2: no T x T scores, the memory the planner gives SDPA's flash kernel;
   - the transformers of December 2024 (<= 4.47): its loss shifted the fp32 logits with a contiguous copy
     (planned as ``loss="hf-shift"``; transformers 5 pads the labels instead and needs 4 T V bytes less);
   - "GB" is 10^9 bytes of device memory the run needs: the planner's peak plus CUDA's context and the allocator's
     slack (estimate/runtime.py). Read as GiB of that requirement, the rows come out +16% (80 GB) to +87% (12 GB);
   - padded sequences count in full (the padding is attended to as tokens).
   Reproduced: 8 GB out of memory (the planner's fixed part alone is 8.8 GB), and 40 to 80 GB within 20%
   (+19.0%, +18.3%, +17.1%). NOT reproduced: 12 GB +60%, 16 GB +32%, 24 GB +23%. The planner's line is
   8.81 GB + 2.136 MB a token (peak + CUDA context + slack), the column's 9.70 GB + 2.471 MB: HF held 0.9 GB and
   0.33 MB a token (16%) more than the transformers 5 / peft 0.21 / bitsandbytes 0.50 stack the planner is held to
   on the H200 (its checkpointed forward peaks within 1%, research/results/2026-12-02-h200-b/qlora.md). Looked
   for and not found in the code (so not modelled): the head already counts the most any transformers 4.44-4.47
   loss path holds at once (bf16 logits, their fp32 upcast, the shifted copy, log_softmax's output:
   2 + 4 + 4 + 4 = 14 V bytes a token, 1.80 MB); peft's prepare_model_for_kbit_training (fp32 embeddings and
   lm_head, an fp32 residual stream, autocast's saved bf16 copy of lm_head) would add 3.2 GB fixed and 0.26 MB a
   token, which leaves no room for 932 tokens on 12 GB; bitsandbytes' quant state is in NF4_BYTES_PER_WEIGHT;
   FlashAttention-2's unpadding copies are per layer (tens of KB a token, one layer at a time). An allocator's
   reserve read instead of its allocations, or a fragmented cache, would account for the rest; the table does not
   say what it measured. Kept below as known misses. (Before the checkpointed
   forward's fix the planner's line was 2.327 MB a token and 24-80 GB read +8% to +13%: one layer's saved set
   counted at the head, 0.19 MB a token, hid part of this gap.)
2. torchtune's README, "Optimization flags" (pytorch/torchtune, commit bd2a0fc7): Llama 3.2 3B, batch size 2, max
   sequence length 4096, packed, bf16, A100, torch.compile, chunked cross-entropy, activation checkpointing and
   activation offloading, LoRA and QLoRA without optimizer-in-backward or 8-bit AdamW: "Peak Memory Active" LoRA
   8.5 GiB, QLoRA 4.6 GiB. Within 15%. Configuration (recipes/configs/llama3_2/3B_{lora,qlora}_single_device.yaml):
   lora_attn_modules q_proj, v_proj, output_proj (o_proj) with apply_lora_to_mlp, rank 64, alpha 128, dropout 0.
   Modelled: ``loss="chunked"``, ``offload_activations=True`` (the checkpointed layer inputs on the host, two in
   flight), ``adapter_b=2`` (torchtune keeps every parameter in bf16: adapters, their gradients and AdamW states,
   no autocast copies). Not modelled: torch.compile's fusions (the planner's activations are eager's).
   The Llama 3.1 8B rows of the same README are held by tests/test_lora_published.py with peft's fp32 adapters;
   here they are checked again with torchtune's bf16 adapters.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_search import longest_seq
from gpuscope.estimate.lora_train import estimate_lora_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

GIB = 2**30
UNSLOTH_HF_FA2 = {8: None, 12: 932, 16: 2551, 24: 5789, 40: 12264, 48: 15502, 80: 28454}  # GB -> tokens
UNSLOTH_KNOWN_MISS = {12: (0.5, 0.7), 16: (0.25, 0.4), 24: (0.2, 0.27)}  # GB -> the error's range today
TT_TARGETS = "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


def _card(gb: float):
    """An 80 GB A100's rates (they do not matter for a fit) with ``gb`` x 10^9 bytes of device memory."""
    return replace(load_hardware("a100"), device_total_bytes=int(gb * 1e9), memory_bytes=int(gb * 1e9))


def test_unsloth_column_is_a_line():
    pts = [(gb, t) for gb, t in UNSLOTH_HF_FA2.items() if t]
    (g0, t0), (g1, t1) = pts[1], pts[-1]
    per_token = (g1 - g0) / (t1 - t0)
    fixed = g0 - per_token * t0
    assert fixed == pytest.approx(9.70, abs=0.01) and per_token * 1e3 == pytest.approx(2.471, abs=0.002)
    for gb, t in pts:
        assert gb == pytest.approx(fixed + per_token * t, abs=0.02)


@pytest.mark.parametrize("gb, published", [(gb, t) for gb, t in UNSLOTH_HF_FA2.items() if gb not in UNSLOTH_KNOWN_MISS])
def test_unsloth_hf_fa2_max_context(gb, published):
    m = load_model("llama-3.1-8b")
    c = longest_seq(m, _card(gb), lora_shape(m, 32), qlora=True, recompute="full", cap=10**6, loss="hf-shift",
                    step=16)
    if published is None:
        assert c is None, f"{gb} GB: the table says OOM, the planner fits {c.seq}"
        return
    assert c is not None and abs(c.seq - published) / published <= 0.20, f"{gb} GB: {c and c.seq} vs {published}"


@pytest.mark.parametrize("gb", sorted(UNSLOTH_KNOWN_MISS))
def test_unsloth_small_card_rows_are_known_misses(gb):
    """Kept so that a change which fixes them (or makes them worse) is seen (module docstring)."""
    m = load_model("llama-3.1-8b")
    c = longest_seq(m, _card(gb), lora_shape(m, 32), qlora=True, recompute="full", cap=10**6, loss="hf-shift",
                    step=16)
    low, high = UNSLOTH_KNOWN_MISS[gb]
    assert low < (c.seq - UNSLOTH_HF_FA2[gb]) / UNSLOTH_HF_FA2[gb] < high



def test_unsloth_70b_rows_say_the_gap_grows_with_the_model():
    """The same README's Llama 3.3 (70B) table, same setup on an 80 GB A100: HF + FA2 48 GB OOM, 80 GB 6,916 tokens
    (planned with llama-3.1-70b's config, the same architecture). 48 GB out of memory is reproduced (the fixed part
    alone is 49 GB); 80 GB reads +39% (9,648 tokens): at 6,916 tokens the planner needs 71.1 GB, HF 80 GB. A
    constant the planner lacks (a CUDA context, say) would be the 8B column's 0.9 GB here too and leave 8 GB, 1.15 MB
    a token, against the 8B's 0.33: what HF carried grows with the model (module docstring: not found)."""
    m = load_model("llama-3.1-70b")
    kw = dict(qlora=True, recompute="full", cap=10**6, loss="hf-shift", step=16)
    assert longest_seq(m, _card(48), lora_shape(m, 32), **kw) is None
    c = longest_seq(m, _card(80), lora_shape(m, 32), **kw)
    assert 0.3 < (c.seq - 6916) / 6916 < 0.5

TORCHTUNE_ROWS = [  # model, gpu, rank, alpha, micro-batch, seq, qlora, offload activations, published GiB
    ("llama-3.2-3b", "a100", 64, 128, 2, 4096, False, True, 8.5),
    ("llama-3.2-3b", "a100", 64, 128, 2, 4096, True, True, 4.6),
    ("llama-3.1-8b", "rtx4090", 8, 16, 2, 2048, False, False, 16.2),
    ("llama-3.1-8b", "rtx4090", 8, 16, 2, 2048, True, False, 7.4),
]


@pytest.mark.parametrize("model, gpu, r, alpha, mb, seq, qlora, offload, published", TORCHTUNE_ROWS)
def test_torchtune_peak_memory_with_its_setup(model, gpu, r, alpha, mb, seq, qlora, offload, published):
    m = load_model(model)
    e = estimate_lora_train(m, load_hardware(gpu), lora_shape(m, r, TT_TARGETS), micro_batch=mb, seq=seq,
                            recompute="full", qlora=qlora, alpha=alpha, loss="chunked", offload_activations=offload,
                            adapter_b=2.0)
    ours = e.peak_bytes_per_gpu / GIB
    assert abs(ours - published) / published <= 0.15, f"{model} qlora={qlora}: {ours:.2f} vs {published} GiB"


def test_activation_offloading_saves_all_but_two_layer_inputs():
    m = load_model("llama-3.2-3b")
    kw = dict(micro_batch=2, seq=4096, recompute="full", loss="chunked")
    shape = lora_shape(m, 64, TT_TARGETS)
    on = estimate_lora_train(m, load_hardware("a100"), shape, offload_activations=True, **kw)
    off = estimate_lora_train(m, load_hardware("a100"), shape, **kw)
    layer_input = 2 * 4096 * m.hidden_size * 2
    saved = (m.num_layers - 2) * layer_input
    assert off.phases_bytes["forward"] - on.phases_bytes["forward"] == pytest.approx(saved)
    # the backward's peak moves to a later layer as the adapters' gradients fill in: at most the same saving
    assert 0 < off.peak_bytes_per_gpu - on.peak_bytes_per_gpu <= saved * (1 + 1e-9)
