"""kv_pages' transformers rule against transformers 5.17's own PagedAttentionMemoryHandler (the version the GPU machine
runs): the same (max_batch_tokens, num_blocks) at the same free memory. Runs where transformers 5.17 is the one
installed (e.g. PYTHONPATH=<a 5.17 install>); skipped otherwise (5.18+ sizes the cache by sectors)."""

from __future__ import annotations

import math

import pytest

transformers = pytest.importorskip("transformers")
if not transformers.__version__.startswith("5.17."):
    pytest.skip(f"needs transformers 5.17, found {transformers.__version__}", allow_module_level=True)


@pytest.mark.parametrize("name, attn, gib", [("llama-3.1-8b", "paged|sdpa", None), ("qwen2.5-32b", "paged|sdpa", None),
                                             ("llama-3.2-1b", "paged|sdpa", 24), ("llama-3.1-8b", "paged|sdpa", 40),
                                             ("gemma-2-9b", "paged|sdpa", None), ("mistral-7b", "paged|sdpa", None)])
def test_pages_match_transformers_517(name, attn, gib, monkeypatch):
    import torch
    from transformers import AutoConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    from transformers.generation.continuous_batching import cache as tcache
    from transformers.generation.continuous_batching.cache import group_layers_by_attn_type

    from gpuscope.estimate.runtime import CUDA_CONTEXT_BYTES
    from gpuscope.estimate.serve import kv_pages, quant
    from gpuscope.estimate.serve.profiles import serve_engine
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.models import load_model, preset_config

    hw = load_hardware("h200")
    if gib:  # a smaller device: the batch-token bound (10% of the cache per batch) can bind
        from dataclasses import replace

        hw = replace(hw, device_total_bytes=gib * 2**30)
    m = load_model(name)
    w = quant.weight_bytes(m, quant.weight_format("bf16"))
    plan = kv_pages.plan_kv(m, hw, serve_engine("transformers", hw, requests=256), weights=w, kv_b=2.0, act_b=2.0,
                            tp=1, seq_tokens=640)
    avail = math.floor((hw.device_total_bytes - CUDA_CONTEXT_BYTES - w) * 0.9)
    monkeypatch.setattr(tcache.PagedAttentionMemoryHandler, "get_available_memory", lambda self: avail)
    cfg = AutoConfig.for_model(**preset_config(name))
    cfg._attn_implementation = attn
    groups, types = group_layers_by_attn_type(cfg)
    h = tcache.PagedAttentionMemoryHandler(cfg, ContinuousBatchingConfig(max_memory_percent=0.9,
                                                                          max_blocks_per_request=0),
                                           torch.bfloat16, types, len(groups[0]))
    assert h.infer_max_batch_tokens_and_num_blocks() == (plan.max_batched_tokens, plan.engine_blocks)
    assert plan.num_blocks == plan.engine_blocks // len(groups)
