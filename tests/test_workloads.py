"""workloads/: every kind's typed Case keeps the key stored results are resumed by, validates once (one sentence
naming the flag), and the registry covers every WorkloadKind."""

from __future__ import annotations

import hashlib
import json

import pytest

from gpuscope import workloads
from gpuscope.errors import UserError
from gpuscope.specs.axes import WorkloadKind
from gpuscope.workloads.sets import CASE_SETS, TINY_LLAMA, gpu_quick_cases, infer_case, train_case


def _reference_id(case: dict) -> str:
    """The key as measure/cases.case_id computed it before the kinds were typed (stored databases hold it)."""
    m = case.get("model") or (case.get("config") or {}).get("model_type", "?")
    if case.get("kind") == "infer":
        eng = "" if case.get("engine", "hf-eager") == "hf-eager" else f"-{case['engine']}"
        eng += "" if case.get("attn", "sdpa") == "sdpa" else f"-{case['attn']}"
        eng += "-fused" if case.get("fuse_proj") else ""
        eng += "-defer" if case.get("defer_stop") else ""
        eng += "-gcfreeze" if case.get("gc_freeze") else ""
        name = (f"infer/{m}/b{case.get('batch')}-p{case.get('prompt')}-g{case.get('gen')}-"
                f"{case.get('dtype', 'bf16')}{eng}")
    else:
        ga = f"-ga{case['grad_accum']}" if int(case.get("grad_accum", 1)) > 1 else ""
        name = (f"train/{m}/mb{case.get('micro_batch')}{ga}-s{case.get('seq')}-{case.get('precision', 'amp-bf16')}"
                f"-rc_{case.get('recompute', 'none')}")
    digest = hashlib.sha1(json.dumps(case, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:8]
    return f"{name}#{digest}"


ALL_CASES = [(name, c) for name, fn in CASE_SETS.items() for c in fn()]


@pytest.mark.parametrize("set_name,case", ALL_CASES, ids=[f"{n}:{i}" for i, (n, _) in enumerate(ALL_CASES)])
def test_every_case_of_every_set_keeps_its_key_and_dict(set_name, case):
    typed = workloads.from_dict(case)
    assert typed.to_dict() == case
    assert typed.key == workloads.case_id(case) == _reference_id(case)
    assert workloads.case_name(case) == _reference_id(case).split("#")[0]


def test_the_sets_have_their_sizes_and_user_facing_names():
    assert set(CASE_SETS) == {"smoke", "gpu", "single-gpu", "families"}
    assert [len(CASE_SETS[n]()) for n in ("smoke", "gpu", "single-gpu", "families")] == [4, 3, 17, 17]


def test_keys_of_the_gpu_quick_set_and_of_the_other_kinds_are_those_stored():
    assert [workloads.case_id(c) for c in gpu_quick_cases()] == [
        "infer/llama-3.1-8b/b1-p2048-g128-bf16-hf-graph-fused-defer#1d89215c",
        "train/llama-3.2-1b/mb4-s2048-amp-bf16-rc_full#5ee91979",
        "train/llama-3.2-1b/mb4-s2048-amp-fp16-rc_none#f5853918"]
    point = {"op": "all_reduce", "nbytes": 1024, "dtype": "fp32", "backend": "gloo", "world_size": 2, "nnodes": 1,
             "nproc_per_node": 2, "device": "cpu"}
    c = workloads.from_dict(point, kind="collective")
    assert c.key == "collective/all_reduce/fp32/1024B/gloo/1x2#bb794a20" and c.to_dict() == point
    td = {"kind": "train-dist", "strategy": "ddp", "config": TINY_LLAMA, "micro_batch": 1, "seq": 64,
          "precision": "fp32", "recompute": "none", "steps": 3, "warmup": 1, "baseline": True, "nproc": 2,
          "nnodes": 1, "timeout_s": 600.0, "bucket_cap_mb": 25.0, "gradient_as_bucket_view": False, "device": "cpu"}
    assert workloads.case_id(td) == "train-dist/llama/ddp-2p-mb1-s64-fp32-rc_none#2e8255c2"
    cp = {"kind": "compression", "config": TINY_LLAMA, "micro_batch": 1, "seq": 64, "precision": "fp32", "steps": 4,
          "warmup": 1, "hooks": ["none", "fp16"], "lr": 1e-3, "start_powersgd_iter": 2, "nproc": 2, "nnodes": 1,
          "timeout_s": 600.0, "device": "cpu"}
    assert workloads.case_id(cp) == "compression/llama/2p-mb1-s64-fp32-none+fp16#525cd52b"
    mc = {"kind": "micro", "mode": "quick", "device": "cpu", "bench": "memory", "op": "copy", "bytes": 67108864,
          "warmup": 2, "min_iters": 5, "min_time_s": 0.1}
    assert workloads.case_id(mc) == "micro/memory/copy/quick#4b2c691f"
    assert workloads.case_id({"kind": "host", "device": None}) == "host/costs"


def test_a_case_built_in_code_writes_only_what_differs_from_its_defaults():
    from gpuscope.specs.axes import Engine
    from gpuscope.workloads.infer import InferCase
    from gpuscope.workloads.train_dist import TrainDistCase

    c = InferCase(model="gpt2", batch=1, prompt=8, gen=4, engine="hf-graph")
    assert c.engine is Engine.HF_GRAPH
    assert c.to_dict() == {"kind": "infer", "model": "gpt2", "batch": 1, "prompt": 8, "gen": 4, "dtype": "bf16",
                           "attn": "sdpa", "repeats": 5, "engine": "hf-graph"}
    assert "bucket_cap_mb" in TrainDistCase(model="gpt2").to_dict()  # DDP's knobs are always written for ddp
    assert "bucket_cap_mb" not in TrainDistCase(model="gpt2", strategy="fsdp").to_dict()


@pytest.mark.parametrize("build,word", [
    (lambda: infer_case("gpt2", 0, 8, 4), "--batch must be a positive integer, not 0."),
    (lambda: infer_case("gpt2", 1, 8, 4, dtype="fp64"), "--dtype 'fp64' is not one of bf16, fp16, fp32."),
    (lambda: infer_case("gpt2", 1, 8, 4, engine="vllm"), "--engine 'vllm' is not one of"),
    (lambda: infer_case("gpt2", 1, 8, 4, attn="flash"), "--attn 'flash' is not one of"),
    (lambda: infer_case("gpt2", 1, 8, 4, min_time_s=900), "--min-time must be between 0 and 600 seconds"),
    (lambda: infer_case("gpt2", 1, 8, 4, device_map="auto"), "need --weights"),
    (lambda: infer_case("gpt2", 1, 8, 4, fuse_proj=True, device_map="auto"), "--fuse-proj cannot be combined"),
    (lambda: train_case("gpt2", 1, 8, precision="fp8"), "--precision 'fp8' is not one of amp-bf16, amp-fp16, bf16"),
    (lambda: train_case("gpt2", 1, 8, recompute="selective"), "--recompute 'selective' is not one of none, full."),
    (lambda: train_case("gpt2", 1, 8, grad_accum=0), "--grad-accum must be a positive integer"),
    (lambda: workloads.from_dict({"kind": "train-dist", "model": "gpt2", "strategy": "fsdp",
                                  "precision": "amp-fp16"}), "not supported with --strategy fsdp"),
    (lambda: workloads.from_dict({"kind": "train-dist"}), "exactly one of --model and --config"),
    (lambda: workloads.from_dict({"kind": "compression", "model": "gpt2", "warmup": 12}), "--warmup must be >= 0"),
    (lambda: workloads.from_dict({"kind": "infer", "model": "gpt2"}), "the infer case needs batch, prompt, gen."),
    (lambda: workloads.from_dict({"kind": "bogus"}), "--kind 'bogus' is not one of micro, infer, train"),
])
def test_validation_is_one_sentence_naming_the_flag(build, word):
    with pytest.raises(UserError) as e:
        build()
    assert word in str(e.value) and len(str(e.value).splitlines()) == 1


def test_the_registry_has_a_module_for_every_kind():
    assert set(workloads.KINDS) == set(WorkloadKind)
    for kind in WorkloadKind:
        m = workloads.module(kind)
        assert m.CASE.KIND is kind and callable(m.run) and callable(m.headline)
        assert m.estimate is None or (callable(m.estimate) and callable(m.rows))
    assert workloads.estimated_kinds() == ("infer", "train", "train-dist", "serve", "diffusion")


def test_estimate_routes_through_the_kind():
    from gpuscope.estimate.infer import estimate_infer
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.models import load_model

    hw = load_hardware("h200")
    c = infer_case("llama-3.2-1b", 1, 512, 64, engine="hf-graph", defer_stop=True)
    got = workloads.estimate_for(c, hw)
    want = estimate_infer(load_model("llama-3.2-1b"), hw, batch=1, prompt=512, gen=64, dtype="bf16",
                          engine="hf-graph-defer", moe_batched=True)
    assert got.time == want.time and got.peak_bytes_per_gpu == want.peak_bytes_per_gpu
    with pytest.raises(UserError, match="does not estimate micro"):
        workloads.estimate_for({"kind": "micro", "mode": "quick", "device": "cpu", "bench": "memory"}, hw)


def test_headline_dispatches_on_the_results_kind():
    assert workloads.headline({"status": "ok", "kind": "train", "step_s": 0.5, "tokens_per_s": 100}) == \
        "step 500.00 ms, 100 tok/s"
    assert workloads.headline({"status": "oom", "kind": "infer", "phase": "prefill"}) == "oom prefill"
    assert workloads.headline({"status": "ok", "host": {"host_launch_s": 1e-5, "host_probe_s": 2e-3,
                                                        "host_detail": {"valid_passes": 3}}}).startswith("host 10.0 us")
    assert workloads.headline({"status": "timeout", "timeout_s": 30}) == "timeout after 30s"
