"""Named sets of measurement cases (plain dicts, see llm_infer / llm_train for their keys).

- ``smoke``: tiny inline configs (llama and gpt2, hidden 64, 2 layers, vocab 1000); a few seconds per case on CPU.
  `bench all --quick` runs it on a CPU.
- ``gpu``: `bench all --quick` on an accelerator: three GPU-sized workloads (an 8B graph decode, two 1B training
  steps), 20-70 s each on an H200, sized for an 80 GB-class GPU (on a smaller one bench all halves a batch, then
  takes a smaller model, until the planner fits it: cli/bench_run.fit_cases).
- ``h200``: real architectures by preset name (random weights), sized for one H200 (about 140 GiB) and a total
  runtime of about 7 minutes; big models get 1 warm-up and 3 timed steps.

``case_id(case)`` is a readable name plus a hash of the whole case, so a changed case is measured again on resume.
"""

from __future__ import annotations

import hashlib
import json

TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
}
TINY_GPT2 = {
    "model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 512,
}


def infer_case(model, batch, prompt, gen, dtype="bf16", repeats=5, config=None, **extra) -> dict:
    c = {"kind": "infer", "model": model, "batch": batch, "prompt": prompt, "gen": gen, "dtype": dtype,
         "attn": "sdpa", "repeats": repeats}
    if config is not None:
        c["config"] = config
    c.update(extra)
    return c


def train_case(model, micro_batch, seq, precision="amp-bf16", recompute="none", steps=6, warmup=2,
               config=None, **extra) -> dict:
    c = {"kind": "train", "model": model, "micro_batch": micro_batch, "seq": seq, "precision": precision,
         "optimizer": "adamw", "fused": True, "recompute": recompute, "steps": steps, "warmup": warmup}
    if config is not None:
        c["config"] = config
    c.update(extra)
    return c


def case_name(case: dict) -> str:
    m = case.get("model") or (case.get("config") or {}).get("model_type", "?")
    if case.get("kind") == "infer":
        eng = "" if case.get("engine", "hf-eager") == "hf-eager" else f"-{case['engine']}"
        eng += "" if case.get("attn", "sdpa") == "sdpa" else f"-{case['attn']}"
        eng += "-fused" if case.get("fuse_proj") else ""
        eng += "-defer" if case.get("defer_stop") else ""
        eng += "-gcfreeze" if case.get("gc_freeze") else ""
        return (f"infer/{m}/b{case.get('batch')}-p{case.get('prompt')}-g{case.get('gen')}-{case.get('dtype', 'bf16')}"
                f"{eng}")
    if case.get("kind") == "train":
        ga = f"-ga{case['grad_accum']}" if int(case.get("grad_accum", 1)) > 1 else ""
        return (f"train/{m}/mb{case.get('micro_batch')}{ga}-s{case.get('seq')}-{case.get('precision', 'amp-bf16')}"
                f"-rc_{case.get('recompute', 'none')}")
    return f"{case.get('kind')}/{m}"


def case_id(case: dict) -> str:
    digest = hashlib.sha1(json.dumps(case, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:8]
    return f"{case_name(case)}#{digest}"


# Each timed phase of a smoke workload lasts at least this long (measure/device/device.repeats): the tiny models are
# host-bound, and a median of two or three calls sampled one moment of a host whose speed moves in episodes of
# 0.5-2 s (the lent H200 VM: a TTFT of 7.4 ms where the same run's neighbours read 4.8, research/results/2026-11-30-h200-h).
SMOKE_MIN_TIME_S = 2.0


def smoke_cases() -> list[dict]:
    t = {"min_time_s": SMOKE_MIN_TIME_S}
    return [
        infer_case("tiny-llama", 2, 32, 8, dtype="fp32", repeats=2, config=TINY_LLAMA, decode_iters=5, **t),
        infer_case("tiny-gpt2", 2, 32, 8, dtype="bf16", repeats=2, config=TINY_GPT2, decode_iters=5, **t),
        train_case("tiny-llama", 2, 64, precision="amp-bf16", recompute="none", steps=3, warmup=1, config=TINY_LLAMA,
                   **t),
        train_case("tiny-gpt2", 2, 64, precision="fp32", recompute="full", steps=3, warmup=1, config=TINY_GPT2, **t),
    ]


def gpu_quick_cases() -> list[dict]:
    """What an accelerator's quick suite measures: the device, not the host.

    The smoke cases on a GPU time the host's Python (a 64-wide model's kernels take microseconds); on a shared VM
    that moved 25-50% within minutes (research/results/2026-11-30-h200-i: the same step timed a minute apart missed itself
    by 15% in half the runs). These three are bound by the GPU in every phase the planner is checked on:
    - Llama-3.1-8B, batch 1, 2048-token prompt, 128 tokens, HF generate with a static cache and CUDA graphs, the stop
      check deferred and the projections fused (`--engine hf-graph --defer-stop --fuse-proj`): a 30 TFLOP prefill
      and a decode that reads 16 GB of weights per token (the flags of issue 3's 70%-of-copy case, which read 75% at
      a 128-token prompt, research/results/2026-11-30-h200-f; 60-65% here, where each token also reads the 2176-slot static
      cache, research/results/2026-11-30-h200-j);
    - Llama-3.2-1B training, micro-batch 4 x 2048 tokens, AMP bf16 with full recompute (67 TFLOP a step);
    - the same without recompute in AMP fp16 with the dynamic loss scaler (initial scale 8192)."""
    small = {"steps": 5, "warmup": 2}
    return [
        infer_case("llama-3.1-8b", 1, 2048, 128, engine="hf-graph", defer_stop=True, fuse_proj=True, repeats=3),
        train_case("llama-3.2-1b", 4, 2048, "amp-bf16", "full", **small),
        train_case("llama-3.2-1b", 4, 2048, "amp-fp16", "none", **small),
    ]


def h200_cases() -> list[dict]:
    big = {"steps": 3, "warmup": 1}
    small = {"steps": 5, "warmup": 2}
    return [
        # inference, bf16, sdpa, EOS disabled (exactly `gen` tokens)
        infer_case("llama-3.2-1b", 1, 512, 64),
        infer_case("llama-3.1-8b", 1, 2048, 64),
        infer_case("llama-3.1-8b", 16, 1024, 64),
        infer_case("qwen2.5-7b", 4, 4096, 32),
        infer_case("qwen2.5-32b", 1, 1024, 32, repeats=3),
        infer_case("qwen2.5-32b", 8, 2048, 16, repeats=3),
        infer_case("mistral-7b", 8, 2048, 32),
        infer_case("gpt2-xl", 8, 512, 64),
        # training, one micro-batch per optimizer step, AdamW fused
        train_case("llama-3.2-1b", 4, 2048, "amp-bf16", "none", **small),
        train_case("llama-3.2-1b", 4, 2048, "amp-bf16", "full", **small),
        train_case("qwen2.5-1.5b", 8, 1024, "amp-bf16", "none", **small),
        train_case("llama-3.2-3b", 2, 2048, "amp-bf16", "none", **small),
        train_case("llama-3.2-3b", 2, 2048, "amp-bf16", "full", **small),
        train_case("mistral-7b", 1, 2048, "amp-bf16", "full", **big),
        train_case("llama-3.1-8b", 2, 2048, "bf16", "full", **big),
        train_case("llama-3.2-1b", 4, 2048, "amp-fp16", "none", **small),
        train_case("qwen2.5-1.5b", 2, 1024, "fp32", "none", **small),
    ]


def h200_second_cases() -> list[dict]:
    """Cases the planner was not tuned on (other families, MoE, MLA, parallel residual, big vocab share), and the
    graph engine (static cache + compiled decode)."""
    small = {"steps": 5, "warmup": 2}
    return [
        infer_case("llama-3.2-1b", 1, 512, 128, engine="hf-graph", repeats=3),
        infer_case("llama-3.1-8b", 1, 2048, 128, engine="hf-graph", repeats=3),
        infer_case("llama-3.2-1b", 1, 512, 128, engine="gs-graph", repeats=3),
        infer_case("llama-3.1-8b", 1, 2048, 128, engine="gs-graph", repeats=3),
        infer_case("llama-3.2-1b", 1, 512, 128, engine="gs-compile", repeats=3),
        infer_case("llama-3.1-8b", 1, 2048, 128, engine="gs-compile", repeats=3),
        infer_case("llama-3.2-1b", 1, 512, 128, repeats=3),  # plain generate, the pair of the graph engines
        infer_case("llama-3.1-8b", 1, 2048, 128, repeats=3),
        infer_case("mixtral-8x7b", 1, 1024, 16, repeats=3),
        infer_case("deepseek-v2-lite", 4, 1024, 16, repeats=3),
        infer_case("gemma-2b", 8, 2048, 32),
        infer_case("phi-3-mini", 4, 2048, 32),
        train_case("phi-3-mini", 2, 2048, "amp-bf16", "full", **small),
        train_case("pythia-1.4b", 8, 2048, "amp-bf16", "none", **small),
        train_case("qwen2.5-0.5b", 16, 1024, "amp-bf16", "none", **small),
        train_case("llama-3.2-3b", 4, 4096, "bf16", "none", **small),
        train_case("gemma-2b", 4, 2048, "amp-bf16", "full", **small),
    ]


CASE_SETS = {"smoke": smoke_cases, "gpu": gpu_quick_cases, "h200": h200_cases, "h200-b": h200_second_cases}
