"""``--attn gs-gqa``: SDPA for grouped-query attention under an explicit mask without copying K and V per head.

Why: with a mask (every static KV cache has one; so do sliding windows past the window) transformers'
``sdpa_attention_forward`` cannot let CUDA SDPA do GQA itself (``use_gqa_in_sdpa`` needs mask=None); it expands K
and V to every query head (``repeat_kv``), or, in recent versions and only outside torch.compile, packs the query
heads for single-token decode (``pack_gqa``). On the H200 the static-cache graph engines paid that copy every
layer and step (research/results/2026-11-29-h200-b: Llama-3.1-8B gs-compile decode 6.29 ms, 62% of copy bandwidth).

How: the ``rep`` query heads that share a KV head are folded into the query-length axis, which SDPA broadcasts
against that one KV head: query (b, H, q, d) -> (b, H_kv, rep * q, d), row ``r * q + t`` = head ``j * rep + r``,
token ``t`` (the head order of ``repeat_kv``: head h reads KV head h // rep); the (b, 1, q, L) mask is repeated
``rep`` times along its rows to match. No K/V copy, one SDPA call per layer, valid for any q (prefill and decode)
and traceable by torch.compile (no data-dependent branches). Without a mask, or without GQA, it defers to
transformers' own ``sdpa_attention_forward``.

Status: token-for-token equal to the stock path on CPU (tests/test_measure_cpu.py). Measured on the H200
(research/results/2026-11-29-h200-c): SLOWER under gs-compile, Llama-3.1-8B b1 p2048 decode 6.77 ms against 6.55 ms
for the stock SDPA, because Inductor already folds repeat_kv into the attention's input kernel. Kept as an option for
eager and gs-graph runs; not a recommendation.
"""

from __future__ import annotations

import torch

from gpuscope.specs.axes import Attention

NAME = "gs_gqa_sdpa"  # the attention implementation name registered with transformers
CLI_NAME = Attention.GS_GQA.value  # what a case or --attn calls it


def gqa_fold_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None,
                  **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, heads, q, d = query.shape
    kv_heads = key.shape[1]
    rep = heads // kv_heads
    if rep == 1 or attention_mask is None or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    folded = query.reshape(b, kv_heads, rep * q, d)
    mask = attention_mask
    if mask.shape[1] != 1:  # a per-head mask: rows of head j * rep + r land at r * q + t of KV head j
        mask = mask.reshape(mask.shape[0], kv_heads, rep * q, mask.shape[-1])
    else:
        mask = mask.expand(mask.shape[0], 1, q, mask.shape[-1]).repeat(1, 1, rep, 1)
    out = torch.nn.functional.scaled_dot_product_attention(
        folded, key, value, attn_mask=mask, dropout_p=dropout if module.training else 0.0, scale=scaling)
    return out.reshape(b, heads, q, d).transpose(1, 2).contiguous(), None


def register() -> str:
    """Register the attention function and its mask (transformers' SDPA mask) once; returns the name to pass as
    ``attn_implementation``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, gqa_fold_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def implementation(attn: str) -> str:
    """The ``attn_implementation`` for a case's ``attn`` (sdpa, eager, gs-gqa)."""
    return register() if attn == CLI_NAME else attn
