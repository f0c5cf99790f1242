"""LoRA / QLoRA planner against two published tables (estimate/lora_train.py, estimate/lora_search.py).

1. Unsloth's README, "Context length benchmarks", "Llama 3.1 (8B) max. context length", column "Hugging Face + FA2"
   (https://github.com/unslothai/unsloth README.md, stored at commit 45ef9eab; the same table in
   https://unsloth.ai/blog/llama3-3, 10 Dec 2024): "We tested Llama 3.1 (8B) Instruct and did 4bit QLoRA on all
   linear layers (Q, K, V, O, gate, up and down) with rank = 32 with a batch size of 1. We padded all sequences to a
   certain maximum sequence length": 8 GB OOM, 12 GB 932, 16 GB 2,551, 24 GB 5,789, 40 GB 12,264, 48 GB 15,502,
   80 GB 28,454 tokens; and "Llama 3.3 (70B) max. context length" ("on a 80GB A100", same setup): 48 GB OOM,
   80 GB 6,916. Within 20%.
   Both columns of the 8B table are exact lines in VRAM (HF + FA2: 9.70 + 2.471 per 1,000 tokens; Unsloth's own:
   4,719 tokens a GB), so the rows are a fit of measured peaks extrapolated to each card's nominal size, not a
   run per card: what the rows say is a fixed part and a per-token part.
   Assumptions (each a choice the table does not state; each held below):
   - HF + FA2 is the HF QLoRA recipe of December 2024: transformers (<= 4.47) + bitsandbytes NF4 with double
     quantization and bf16 compute, peft's ``prepare_model_for_kbit_training`` before ``get_peft_model`` (planned
     as ``kbit_prep``: embeddings, norms and lm_head cast to fp32, hence an fp32 residual stream, fp32 checkpointed
     layer inputs and autocast's bf16 copy of lm_head saved for its backward; lora_memory.py), bf16 autocast,
     torch AdamW (the Trainer's default) on peft's fp32 adapters, gradient checkpointing on every decoder layer,
     FlashAttention-2 (no T x T scores: the memory the planner gives SDPA's flash kernel);
   - that transformers' loss shifted the fp32 logits with a contiguous copy (``loss="hf-shift"``);
   - "GB" is GiB (2^30 bytes) of ``torch.cuda.max_memory_reserved()``: Unsloth's own reporting
     (``max_memory_reserved() / 1024**3`` printed as GB in its notebooks and scripts, e.g. its
     tests/kaggle/t4_smoke/run_t4_smoke.py), and a card's nominal "80 GB" is 80 GiB of DRAM. The reserved peak
     is the planner's allocated peak plus the allocator's slack (estimate/runtime.py), without CUDA's context
     (outside the allocator);
   - padded sequences count in full (the padding is attended to as tokens).
   Reproduced: 8B 8 GB out of memory, 12-80 GB -7.3%, +3.5%, +7.5%, +8.9%, +9.2%, +9.7%; 70B 48 GB out of
   memory, 80 GB +0.6%. The planner's line through the rows' lengths, in those units, is 10.05 GiB + 2.241 GiB a
   1,000 tokens against the column's 9.70 + 2.471: the fixed part 4% high, the per-token part 9% short (0.25 MB a
   token HF held that is not modelled: about one bf16 copy of the logits, 2 V bytes = 0.26 MB, but no such tensor
   was found in transformers 4.46-4.47's loss path; not modelled), which is why the errors grow from -7% to +10%
   with the card. The rows hang on prepare_model_for_kbit_training: without it (the stack bench runs,
   transformers 5 / peft 0.21 / bitsandbytes 0.50, held within 1% on the H200) the same reading gives +29% to
   +168% (8B) and +72% (70B 80 GB), and the earlier reading (10^9 bytes of the whole need, CUDA's context
   included) +17% to +60% and +40%: the gap grew with the model because the fp32 stream and fp32 head do.
   With bitsandbytes' 8-bit AdamW instead the 8B rows stay within 20% (+10% to +15%) but the 70B fits at 48 GB,
   against the table: torch AdamW is what the two tables say together. Read as 10^9 bytes with the context, the
   12 GB row is out of memory under kbit_prep.
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
from gpuscope.estimate.runtime import CUDA_CONTEXT_BYTES
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

GIB = 2**30
UNSLOTH_HF_FA2 = {8: None, 12: 932, 16: 2551, 24: 5789, 40: 12264, 48: 15502, 80: 28454}  # GB -> tokens
UNSLOTH_OWN = {8: 2972, 12: 21848, 16: 40724, 24: 78475, 40: 153977, 48: 191728, 80: 342733}
UNSLOTH_70B_HF_FA2 = {48: None, 80: 6916}
TT_TARGETS = "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
HF_RECIPE = dict(qlora=True, recompute="full", cap=10**6, loss="hf-shift", step=16)


def _card(gb: float):
    """An 80 GB A100's rates (they do not matter for a fit) with ``gb`` x 10^9 bytes of device memory."""
    return replace(load_hardware("a100"), device_total_bytes=int(gb * 1e9), memory_bytes=int(gb * 1e9))


def _reserved_card(gib: float):
    """A card on which the planner's fit means a reserved peak of at most ``gib`` GiB: the planner requires peak +
    allocator slack + CUDA's context, and a reserved reading holds no context."""
    total = int(gib * GIB + CUDA_CONTEXT_BYTES)
    return replace(load_hardware("a100"), device_total_bytes=total, memory_bytes=total)


def _line(col: dict) -> tuple[float, float]:
    pts = [(gb, t) for gb, t in col.items() if t]
    (g0, t0), (g1, t1) = pts[0], pts[-1]
    per_token = (g1 - g0) / (t1 - t0)
    for gb, t in pts:
        assert gb == pytest.approx(g0 + per_token * (t - t0), abs=0.02)
    return g0 - per_token * t0, per_token


def test_unsloth_columns_are_lines():
    """Both columns lie on a line in VRAM to 0.02 GB: extrapolated from measured peaks, not a run per card."""
    fixed, per_token = _line(UNSLOTH_HF_FA2)
    assert fixed == pytest.approx(9.70, abs=0.01) and per_token * 1e3 == pytest.approx(2.471, abs=0.002)
    fixed, per_token = _line(UNSLOTH_OWN)
    assert 1 / per_token == pytest.approx(4719, abs=2)


def _errors(model: str, col: dict, **kw) -> dict:
    m = load_model(model)
    out = {}
    for gb, published in col.items():
        c = longest_seq(m, _reserved_card(gb), lora_shape(m, 32), **HF_RECIPE, **kw)
        out[gb] = None if c is None else (c.seq if published is None else (c.seq - published) / published)
    return out


@pytest.mark.parametrize("model, col", [("llama-3.1-8b", UNSLOTH_HF_FA2), ("llama-3.1-70b", UNSLOTH_70B_HF_FA2)])
def test_unsloth_hf_fa2_max_context(model, col):
    """The HF QLoRA recipe (prepare_model_for_kbit_training, torch AdamW), GiB of reserved memory: every row within
    20% (within 10%: -7.3% to +9.7% for the 8B, +0.6% for the 70B's 80 GB), the OOM rows out of memory. The 70B
    (Llama 3.3) is planned with llama-3.1-70b's config, the same architecture."""
    errs = _errors(model, col, kbit_prep=True)
    for gb, published in col.items():
        if published is None:
            assert errs[gb] is None, f"{model} {gb} GB: the table says OOM, the planner fits {errs[gb]}"
        else:
            assert errs[gb] is not None and abs(errs[gb]) <= 0.10, f"{model} {gb} GB: {errs[gb]}"


def test_unsloth_rows_hang_on_prepare_model_for_kbit_training():
    """Without it (bench's stack) the same reading runs +29% (80 GB) to +168% (12 GB) long for the 8B and +72% for
    the 70B; the previous reading (10^9 bytes, CUDA's context in) +17% to +60% and +40%: the fixed part and the
    per-token part both fall short, by the fp32 head and stream."""
    errs = _errors("llama-3.1-8b", UNSLOTH_HF_FA2)
    assert all(errs[gb] > 0.25 for gb in (12, 16, 24, 40, 48, 80)) and errs[12] > 1.5
    assert _errors("llama-3.1-70b", UNSLOTH_70B_HF_FA2)[80] > 0.6
    m = load_model("llama-3.1-8b")
    old = [longest_seq(m, _card(gb), lora_shape(m, 32), **HF_RECIPE) for gb in (12, 80)]
    assert (old[0].seq - 932) / 932 > 0.5 and (old[1].seq - 28454) / 28454 > 0.15


def test_unsloth_tables_say_torch_adamw():
    """bitsandbytes' 8-bit AdamW keeps the 8B rows within 20% (+10% to +15%), but then the 70B fits at 48 GB, which
    the table says does not."""
    errs = _errors("llama-3.1-8b", UNSLOTH_HF_FA2, kbit_prep=True, optimizer="adamw-8bit")
    assert errs[8] is None and all(0.05 < errs[gb] < 0.20 for gb in (12, 16, 24, 40, 48, 80))
    assert _errors("llama-3.1-70b", UNSLOTH_70B_HF_FA2, kbit_prep=True, optimizer="adamw-8bit")[48] is not None


def test_unsloth_peak_is_the_forwards_head():
    """kbit_prep models the recomputed layer's saved set as the bf16 stream's (lora_memory.py). What the fp32 stream
    adds to it: the MLP's gate, up and act(gate) in fp32 (bitsandbytes casts each output back to fp32; +12 T I
    bytes counted whole) and autocast's own bf16 copy of x for each adapter where an fp32 x is no longer shared
    (+6 T h). The forward's head stays the peak by more than that at the rows' lengths, so they do not depend on
    it."""
    m = load_model("llama-3.1-8b")
    for seq in (932, 28454):
        e = estimate_lora_train(m, load_hardware("a100"), lora_shape(m, 32), micro_batch=1, seq=seq, recompute="full",
                                qlora=True, loss="hf-shift", kbit_prep=True)
        ph = e.phases_bytes
        layer = seq * (12 * m.intermediate_size + 6 * m.hidden_size)
        assert ph["forward"] > ph["backward"] + layer


def test_kbit_prep_is_qlora_with_checkpointing_only():
    from gpuscope.errors import UserError
    m = load_model("llama-3.1-8b")
    for kw in (dict(qlora=False, recompute="full"), dict(qlora=True, recompute="none")):
        with pytest.raises(UserError, match="prepare_model_for_kbit_training"):
            estimate_lora_train(m, load_hardware("a100"), lora_shape(m, 32), micro_batch=1, seq=512, kbit_prep=True,
                                **kw)


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
