"""The measurement layer on CPU with tiny random-weight models (no downloads), plus GPU checks marked `gpu`."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuscope.measure.models import hf_model  # noqa: E402
from gpuscope.measure.llm import infer as llm_infer
from gpuscope.measure.llm import train as llm_train
from gpuscope.workloads import case_id  # noqa: E402
from gpuscope.workloads.sets import TINY_GPT2, TINY_LLAMA, single_gpu_cases, smoke_cases  # noqa: E402
from gpuscope.measure.runner.run_case import measure  # noqa: E402
from gpuscope.measure.runner.suite import read_results, run_one, run_suite  # noqa: E402

INFER_KEYS = {
    "status", "kind", "model", "model_type", "device", "device_name", "dtype", "attn", "batch", "prompt", "gen",
    "repeats", "param_count", "param_dtype", "weights_bytes", "mem_after_load_bytes", "peak_prefill_bytes",
    "peak_generate_bytes", "peak_generate_reserved_bytes", "generated_tokens", "kv_cache_bytes", "ttft_s",
    "ttft_s_min", "ttft_s_max", "e2e_s", "e2e_s_min", "e2e_s_max", "tpot_s", "decode_tokens_per_s",
    "prefill_tokens_per_s", "prefill_forward_s", "decode_forward_s", "generate_overhead_per_token_s",
    "metric_formulas", "samples_s", "timer", "e2e_spread",
}
TRAIN_KEYS = {
    "status", "kind", "model", "model_type", "precision", "autocast_dtype", "recompute", "micro_batch", "seq",
    "steps", "warmup", "param_count", "param_dtype", "weights_bytes", "optimizer", "optimizer_fused",
    "optimizer_state_bytes", "grad_bytes", "mem_rest_bytes", "peak_forward_bytes", "mem_after_forward_bytes",
    "activations_bytes", "peak_backward_bytes", "peak_optimizer_bytes", "peak_bytes", "peak_reserved_bytes",
    "step_s", "step_s_min", "step_s_max", "tokens_per_s", "loss_last", "loss_finite", "float32_matmul_precision",
    "cuda_matmul_allow_tf32", "metric_formulas", "samples_s", "timer",
}
MEMORY_KEYS_INFER = ("mem_after_load_bytes", "peak_prefill_bytes", "peak_generate_bytes")
MEMORY_KEYS_TRAIN = ("mem_rest_bytes", "peak_forward_bytes", "peak_backward_bytes", "peak_optimizer_bytes", "peak_bytes")


def _infer_case(**kw):
    # gen 24 and 3 repeats: (E2E - TTFT) must stay well above run-to-run noise on a loaded 2-core machine
    c = {"kind": "infer", "model": "tiny-llama", "config": TINY_LLAMA, "batch": 2, "prompt": 16, "gen": 24,
         "dtype": "fp32", "repeats": 3, "decode_iters": 3, "device": "cpu"}
    c.update(kw)
    return c


def _train_case(**kw):
    c = {"kind": "train", "model": "tiny-llama", "config": TINY_LLAMA, "micro_batch": 2, "seq": 32,
         "precision": "amp-bf16", "recompute": "none", "steps": 2, "warmup": 1, "device": "cpu"}
    c.update(kw)
    return c


def _check_infer(r, case):
    assert r["status"] == "ok", r
    assert INFER_KEYS <= set(r), INFER_KEYS - set(r)
    assert r["generated_tokens"] == case["gen"]  # EOS disabled: exactly gen tokens
    assert r["ttft_s"] > 0 and r["e2e_s"] > 0 and r["tpot_s"] > 0
    assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / (case["gen"] - 1))
    assert r["decode_tokens_per_s"] == pytest.approx(case["batch"] / r["tpot_s"])
    assert r["ttft_s_min"] <= r["ttft_s"] <= r["ttft_s_max"]
    assert r["decode_forward_s"] > 0 and r["prefill_forward_s"] > 0
    assert r["metric_formulas"]["tpot_s"] == "(e2e_s - ttft_s) / (G - 1)"
    assert r["weights_bytes"] >= r["param_count"] * 2
    assert r["kv_cache_bytes"] > 0


def _check_train(r, case):
    assert r["status"] == "ok", r
    assert TRAIN_KEYS <= set(r), TRAIN_KEYS - set(r)
    assert r["step_s"] > 0 and r["tokens_per_s"] == pytest.approx(case["micro_batch"] * case["seq"] / r["step_s"])
    assert r["step_s_min"] <= r["step_s"] <= r["step_s_max"]
    assert r["loss_finite"]
    assert r["optimizer_state_bytes"] >= 2 * r["param_count"] * (2 if r["param_dtype"] == "bfloat16" else 4)
    assert r["grad_bytes"] > 0


# --- in process ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config,dtype", [(TINY_LLAMA, "fp32"), (TINY_GPT2, "bf16")])
def test_infer_cpu(config, dtype):
    case = _infer_case(config=config, dtype=dtype)
    r = llm_infer.run_infer(case)
    _check_infer(r, case)
    for k in MEMORY_KEYS_INFER:  # no allocator statistics on CPU: null, not zero
        assert r[k] is None


def test_infer_spread_and_the_eager_only_overhead():
    """e2e_spread is (max - min) / median of the E2E samples; the generate overhead (TPOT less the bare eager
    forward) is given for hf-eager only: hf-graph's step is not that eager forward (on an H200 it read -53 ms)."""
    eager = llm_infer.run_infer(_infer_case())
    e = eager["samples_s"]["e2e"]
    assert eager["e2e_spread"] == pytest.approx((max(e) - min(e)) / statistics.median(e))
    assert eager["generate_overhead_per_token_s"] == pytest.approx(eager["tpot_s"] - eager["decode_forward_s"])
    case = _infer_case(engine="hf-graph")
    graph = llm_infer.run_infer(case)  # on CPU generate runs the static cache without compiling
    _check_infer(graph, case)
    assert graph["engine"] == "hf-graph" and graph["generate_overhead_per_token_s"] is None


def test_infer_random_weights_and_tied_embeddings():
    from gpuscope.measure.device.device import Device

    model, _ = hf_model.build_model(TINY_GPT2, Device("cpu"), torch.float32)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
        assert not (p == 0).all() and p.std() > 0, name


@pytest.mark.parametrize("precision,recompute", [("amp-bf16", "none"), ("amp-fp16", "full"), ("bf16", "full"),
                                                 ("fp32", "none")])
def test_train_cpu(precision, recompute):
    case = _train_case(precision=precision, recompute=recompute)
    r = llm_train.run_train(case)
    _check_train(r, case)
    assert r["param_dtype"] == ("bfloat16" if precision == "bf16" else "float32")
    assert r["grad_scaler"] == (precision == "amp-fp16")
    assert (r["recompute_api"] is not None) == (recompute == "full")
    for k in MEMORY_KEYS_TRAIN:
        assert r[k] is None


def test_model_from_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    for m in (str(tmp_path), str(tmp_path / "config.json")):
        assert hf_model.case_config({"model": m}) == TINY_LLAMA


def test_unknown_preset_is_an_error_result():
    rec = measure({"kind": "infer", "model": "no-such-model-xyz", "batch": 1, "prompt": 4, "gen": 2})
    assert rec["result"]["status"] == "error" and "no-such-model-xyz" in rec["result"]["error"]
    assert rec["provenance"]["benchmark_version"]


def test_oom_is_a_result_infer(monkeypatch):
    def boom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(llm_infer, "_generate", boom)
    r = llm_infer.run_infer(_infer_case())
    assert r["status"] == "oom" and r["phase"] == "warmup"
    assert "out of memory" in r["error"] and "peak_bytes" in r


def test_oom_is_a_result_train(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(llm_train, "_grad_bytes", boom)  # called right after the measured backward
    r = llm_train.run_train(_train_case())
    assert r["status"] == "oom" and r["phase"] == "measure/backward"


def test_other_errors_propagate(monkeypatch):
    def bad(*a, **k):
        raise ValueError("not an OOM")

    monkeypatch.setattr(llm_infer, "_generate", bad)
    with pytest.raises(ValueError):
        llm_infer.run_infer(_infer_case())


def test_case_sets():
    ids = [case_id(c) for c in smoke_cases() + single_gpu_cases()]
    assert len(ids) == len(set(ids))
    kinds = [c["kind"] for c in single_gpu_cases()]
    assert kinds.count("infer") == 8 and kinds.count("train") == 9


# --- through the suite (one subprocess per case) --------------------------------------------------------------
@pytest.mark.slow
def test_suite_subprocess_and_resume(tmp_path):
    out = tmp_path / "r.jsonl"
    cases = [_infer_case(), _train_case(), {"kind": "bogus", "model": "x"}]
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        recs = run_suite(cases, out, timeout_s=120, log=f)
    assert [r["result"]["status"] for r in recs] == ["ok", "ok", "error"]
    _check_infer(recs[0]["result"], cases[0])
    _check_train(recs[1]["result"], cases[1])
    lines = read_results(out)
    assert len(lines) == 3 and all({"case", "result", "provenance", "case_id"} <= set(r) for r in lines)
    assert lines[0]["provenance"]["torch"] == torch.__version__
    assert "ok" in log.read_text()
    # resume: nothing runs again, nothing is appended
    with open(log, "w") as f:
        again = run_suite(cases, out, timeout_s=120, log=f)
    assert again == [] and len(read_results(out)) == 3
    assert log.read_text().count("skipped") == 3


def test_timeout_is_a_result(tmp_path):
    rec = run_one(_infer_case(), timeout_s=0.3)  # importing torch alone takes longer
    assert rec["result"]["status"] == "timeout" and rec["result"]["timeout_s"] == 0.3
    out = tmp_path / "t.jsonl"
    run_suite([_infer_case()], out, timeout_s=0.3, log=open(tmp_path / "log", "w"))
    assert read_results(out)[0]["result"]["status"] == "timeout"


def test_run_case_prints_one_json_line_and_tells_its_phases_on_stderr():
    """stdout: the JSON line alone; stderr, where the suite asks (measure/runner/progress.py): the case's phases and
    repeats in the order they ran (one case process checks both)."""
    from gpuscope.measure.runner import progress

    env = dict(os.environ, **{progress.PROGRESS_ENV: "1"})
    p = subprocess.run([sys.executable, "-m", "gpuscope.measure.runner.run_case",
                        json.dumps(_infer_case(gen=2, repeats=2, decode_iters=2))],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["result"]["status"] == "ok"
    said = [progress.text(e) for e in map(progress.parse, p.stderr.split("\n")) if e]
    want = ["building the model", "warm-up generate 1/1", "timed TTFT 1/2", "timed TTFT 2/2", "timed generate 1/2",
            "timed generate 2/2", "prefill forward 1/2", "decode-step forwards, pass 2/2"]
    assert [x for x in said if x in want] == want, said


def test_suite_parent_does_not_import_torch():
    code = "import sys, gpuscope.measure.runner.suite, gpuscope.workloads.sets; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- on a GPU ----------------------------------------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
def test_infer_cuda_memory():
    case = _infer_case(device="cuda", dtype="bf16")
    r = llm_infer.run_infer(case)
    _check_infer(r, case)
    assert r["timer"] == "device_event"
    assert r["peak_generate_bytes"] >= r["mem_after_load_bytes"] >= r["weights_bytes"]


@pytest.mark.gpu
@needs_cuda
def test_train_cuda_memory():
    case = _train_case(device="cuda")
    r = llm_train.run_train(case)
    _check_train(r, case)
    assert r["optimizer_fused"]
    assert r["mem_rest_bytes"] >= r["weights_bytes"] + r["optimizer_state_bytes"]
    assert r["peak_bytes"] >= max(r["peak_forward_bytes"], r["mem_rest_bytes"])


def test_gs_graph_decode_matches_generate_token_for_token():
    """gpuscope's static-cache greedy loop (graph capture on CUDA, eager on CPU) produces generate's tokens."""
    import torch

    from gpuscope.measure.device.device import Device
    from gpuscope.measure.llm.graph_decode import static_greedy
    from gpuscope.measure.models.hf_model import build_model, silence_generation

    torch.manual_seed(0)
    model, cfg = build_model(dict(TINY_LLAMA), Device("cpu"), torch.float32)
    model.eval()
    silence_generation(model)
    ids = torch.randint(0, cfg.vocab_size, (2, 12))
    ref = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=9, min_new_tokens=9,
                         do_sample=False)
    ours = static_greedy(model, ids, 9)
    assert torch.equal(ours, ref)
    again = static_greedy(model, ids.flip(0), 9)  # the kept cache is reused safely for another prompt
    ref2 = model.generate(input_ids=ids.flip(0), attention_mask=torch.ones_like(ids), max_new_tokens=9,
                          min_new_tokens=9, do_sample=False)
    assert torch.equal(again, ref2)
    # gs-compile: the same loop with the decode step through torch.compile (Inductor); prefill-only calls
    # (gen == 1, TTFT) compile nothing and keep no second cache
    # a TTFT inside the full run's kept cache: same first token, no second cache built
    cap = model._gpuscope_graph_steps[(2, 21, False, False)]
    first = static_greedy(model, ids, 1, cache_len=21)
    assert torch.equal(first, ref[:, :13]) and model._gpuscope_graph_steps[(2, 21, False, False)] is cap
    assert torch.equal(static_greedy(model, ids, 9), ref)  # the decode after it is unchanged
    with pytest.raises(ValueError):
        static_greedy(model, ids, 9, cache_len=20)
    compiled = static_greedy(model, ids, 9, compile=True)
    assert torch.equal(compiled, ref)
    n = len(model._gpuscope_graph_steps)
    assert torch.equal(static_greedy(model, ids, 1, compile=True), ref[:, :13])
    assert len(model._gpuscope_graph_steps) == n


def test_gqa_fold_attention_equals_the_stock_path():
    """--attn gs-gqa folds the query heads sharing a KV head into the query axis instead of repeat_kv: same
    logits under a static cache's mask (prefill), same tokens through the graph loops, eager and compiled."""
    import torch
    from transformers import StaticCache

    from gpuscope.measure.device.device import Device
    from gpuscope.measure.llm.graph_decode import static_greedy
    from gpuscope.measure.models.hf_model import build_model, silence_generation

    torch.manual_seed(0)
    ref_m, cfg = build_model(dict(TINY_LLAMA), Device("cpu"), torch.float32)
    assert cfg.num_attention_heads > cfg.num_key_value_heads  # a GQA model
    gqa_m, _ = build_model(dict(TINY_LLAMA), Device("cpu"), torch.float32, attn="gs-gqa")
    gqa_m.load_state_dict(ref_m.state_dict())
    assert gqa_m.config._attn_implementation == "gs_gqa_sdpa"
    for m in (ref_m, gqa_m):
        m.eval()
        silence_generation(m)
    ids = torch.randint(0, cfg.vocab_size, (2, 12))
    logits = [m(input_ids=ids, past_key_values=StaticCache(config=m.config, max_cache_len=20),
                cache_position=torch.arange(12)).logits for m in (ref_m, gqa_m)]
    assert torch.allclose(logits[0], logits[1], atol=1e-5)
    ref = ref_m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, min_new_tokens=8,
                         do_sample=False)
    assert torch.equal(static_greedy(gqa_m, ids, 8), ref)
    assert torch.equal(static_greedy(gqa_m, ids, 8, compile=True), ref)


def test_gs_graph_engine_through_the_workload():
    r = llm_infer.run_infer(_infer_case(engine="gs-graph"))
    assert r["status"] == "ok" and r["engine"] == "gs-graph" and r["generated_tokens"] == 24
