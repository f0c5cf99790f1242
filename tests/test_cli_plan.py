"""`gpuscope plan` through the real entry point: JSON contract keys, and one-sentence errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=60)


def test_plan_infer_json_contract():
    r = run("plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "4", "--prompt", "1024",
            "--gen", "64", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuscope.estimate/1"
    assert isinstance(d["fits"], bool) and d["fits"]
    assert d["memory"]["peak_bytes_per_gpu"] > 16e9  # 8.03B bf16 weights alone are 16.06 GB
    assert {"weights", "kv_cache"} <= set(d["memory"]["breakdown_bytes"])
    assert d["time"]["prefill_s"] > 0 and d["time"]["decode_s_per_token"] > 0
    assert d["throughput"]["decode_tokens_per_s"] == pytest.approx(4 / d["time"]["decode_s_per_token"])


def test_plan_train_json_contract():
    r = run("plan", "train", "--model", "llama-3.2-1b", "--gpu", "h100", "--micro-batch", "2", "--seq", "1024",
            "--precision", "amp-bf16", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuscope.estimate/1"
    assert 0 < d["mfu"] < 1
    assert d["time"]["step_s"] > 0
    assert d["throughput"]["tokens_per_s"] == pytest.approx(2 * 1024 / d["time"]["step_s"])
    assert d["memory"]["peak_bytes_per_gpu"] == max(d["memory"]["phases_bytes"].values())


def test_plan_text_output_has_verdict():
    r = run("plan", "infer", "--model", "qwen2.5-72b", "--gpu", "a770", "--batch", "1", "--prompt", "512", "--gen", "16")
    assert r.returncode == 0, r.stderr
    assert "Does not fit" in r.stdout
    assert "int4" in r.stdout or "tensor parallel" in r.stdout


BAD = [
    (["plan", "infer", "--model", "/no/such/config.json", "--gpu", "h200"], "no config.json"),
    (["plan", "infer", "--model", "llama-9-8b", "--gpu", "h200"], "unknown preset"),
    (["plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h9000"], "h9000"),
    (["plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "0"], "--batch"),
    (["plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--gen", "-3"], "--gen"),
    (["plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--dtype", "fp6"], "--dtype"),
    (["plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-gpus", "3", "--tp", "3"], "--tp"),
    (["plan", "infer", "--model", "llama-3.1-8b", "--gpu", "v100", "--dtype", "bf16"], "bf16"),
    (["plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--engine", "vllm"], "--engine"),
    (["plan", "train", "--model", "llama-3.1-8b", "--gpu", "h200", "--precision", "fp64"], "--precision"),
    (["plan", "train", "--model", "llama-3.1-8b", "--gpu", "h200", "--seq", "0"], "--seq"),
    (["plan", "train", "--model", "llama-3.1-8b", "--gpu", "h200", "--optimizer", "lion"], "--optimizer"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_is_one_sentence_exit_2(args, needle):
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stdout.strip() == ""  # never a partial JSON or table
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert needle in lines[0]


def test_malformed_and_unsupported_configs(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = run("plan", "infer", "--model", str(bad), "--gpu", "h200", "--json")
    assert r.returncode == 2 and "not valid JSON" in r.stderr and r.stdout == ""
    other = tmp_path / "cfg"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    r = run("plan", "infer", "--model", str(other), "--gpu", "h200")
    assert r.returncode == 2 and "bert" in r.stderr
    (other / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                                    "num_attention_heads": 6, "num_key_value_heads": 4,
                                                    "intermediate_size": 128, "vocab_size": 100}))
    r = run("plan", "infer", "--model", str(other), "--gpu", "h200")
    assert r.returncode == 2 and "num_key_value_heads" in r.stderr


def test_models_lists_presets():
    r = run("models", "--json")
    assert r.returncode == 0
    names = {m["name"] for m in json.loads(r.stdout)["models"]}
    assert {"llama-3.1-8b", "qwen2.5-32b", "deepseek-v3", "gpt2", "megatron-1t"} <= names


def test_plan_train_multi_gpu_json_contract():
    r = run("plan", "train", "--model", "megatron-39.1b", "--gpu", "a100-80gb", "--num-gpus", "512", "--tp", "8",
            "--pp", "2", "--micro-batch", "1", "--global-batch", "1536", "--recompute", "full", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuscope.estimate/1"
    assert d["inputs"]["dp"] == 32 and d["inputs"]["tp"] == 8 and d["inputs"]["pp"] == 2
    assert d["fits"] is True and 0 < d["mfu"] < 1
    assert d["throughput"]["tokens_per_s"] == pytest.approx(1536 * 2048 / d["time"]["step_s"])


def test_plan_train_search_ranks_fitting_layouts():
    r = run("plan", "train", "--model", "megatron-7.5b", "--gpu", "a100-80gb", "--num-gpus", "128",
            "--global-batch", "512", "--search", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuscope.search/1" and d["considered"] > 100
    speeds = [row["tokens_per_s"] for row in d["ranked"]]
    assert speeds == sorted(speeds, reverse=True) and len(speeds) == 10
    for row in d["ranked"]:
        assert row["tp"] * row["pp"] * row["dp"] == 128


@pytest.mark.parametrize("args,needle", [
    (["--num-gpus", "16", "--tp", "3"], "--tp"),
    (["--num-gpus", "16", "--tp", "4", "--pp", "2", "--dp", "4"], "must equal"),
    (["--num-gpus", "16", "--tp", "4", "--global-batch", "6"], "global batch"),
    (["--num-gpus", "16", "--tp", "4", "--zero", "5"], "--zero"),
    (["--num-gpus", "16", "--tp", "2", "--hsdp"], "--framework hf"),  # not silently ignored by a Megatron plan
    (["--num-gpus", "8", "--framework", "hf", "--ep", "2"], "--framework megatron"),
    (["--num-gpus", "8", "--framework", "megatron", "--ep", "2"], "mixture-of-experts"),
])
def test_plan_train_bad_layouts(args, needle):
    r = run("plan", "train", "--model", "llama-3.1-8b", "--gpu", "h100", *args)
    assert r.returncode == 2 and r.stdout == "" and needle in r.stderr, r.stderr


def test_plan_train_hf_fsdp_and_ddp():
    base = ("plan", "train", "--model", "llama-3.1-8b", "--gpu", "h200", "--micro-batch", "1", "--seq", "2048",
            "--recompute", "full", "--json")
    fsdp = json.loads(run(*base, "--num-gpus", "2", "--fsdp").stdout)
    ddp = json.loads(run(*base, "--num-gpus", "2").stdout)
    assert fsdp["inputs"]["strategy"] == "fsdp" and ddp["inputs"]["strategy"] == "ddp"
    assert fsdp["memory"]["peak_bytes_per_gpu"] < ddp["memory"]["peak_bytes_per_gpu"]
    assert "ddp_buckets" in ddp["memory"]["breakdown_bytes"]
    r = run("plan", "train", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-gpus", "8", "--tp", "2",
            "--framework", "hf")
    assert r.returncode == 2 and "megatron" in r.stderr


def test_plan_calibrated_uses_the_saved_ceilings(tmp_path):
    import os

    env = dict(os.environ, GPUSCOPE_HOME=str(tmp_path))
    args = [sys.executable, "-m", "gpuscope", "plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200",
            "--batch", "64", "--prompt", "2048", "--gen", "64", "--json"]
    missing = subprocess.run(args + ["--calibrated"], capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and "hardware calibrate --save" in missing.stderr and missing.stdout == ""
    cal = tmp_path / "calibrated" / "nvidia_h200_sxm.toml"
    cal.parent.mkdir(parents=True)
    cal.write_text('base = "nvidia_h200_sxm"\n[measured]\nmemory_bw_gbs = 2000.0\n[measured.matmul_tflops]\nbf16 = 400.0\n')
    plain = json.loads(subprocess.run(args, capture_output=True, text=True, env=env).stdout)
    calib = json.loads(subprocess.run(args + ["--calibrated"], capture_output=True, text=True, env=env).stdout)
    assert calib["calibrated"] and not plain["calibrated"]
    assert calib["time"]["prefill_s"] > 1.5 * plain["time"]["prefill_s"]  # 400 vs 737 TFLOP/s


@pytest.mark.parametrize("args, said", [
    (("plan", "infer", "--model", "llama-3.1-8b", "--bogus"), "No such option: --bogus"),
    (("plan", "infer"), "Missing option '--model'"),
    (("bench", "infer", "--model", "llama-3.2-1b", "--batch", "two"), "Invalid value for '--batch'"),
])
def test_usage_errors_exit_2_without_traceback(args, said):
    """Click usage errors (typer >= 0.2x raises its vendored click's classes, older typer click's) end in one
    usage message and exit code 2, never a traceback."""
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert said in r.stderr and "Traceback" not in r.stderr


def test_plan_fuse_proj_saves_the_gemv_tails():
    """--fuse-proj: q|k|v (3 GEMVs -> 1) and gate|up (2 -> 1) save 3 GEMV kernels per layer, each its fixed cost
    (roofline.EngineModel.matmul_tail_s, 4 us): 32 layers x 3 x 4 us = 0.384 ms per Llama-3.1-8B decode step."""
    args = ("plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "1", "--prompt", "128", "--gen",
            "256", "--engine", "graph", "--json")
    stock, fused = (json.loads(run(*args, *extra).stdout) for extra in ((), ("--fuse-proj",)))
    saved = stock["time"]["decode_s_per_token"] - fused["time"]["decode_s_per_token"]
    assert saved == pytest.approx(32 * 3 * 4e-6, rel=1e-6)
    assert fused["memory"]["peak_bytes_per_gpu"] == stock["memory"]["peak_bytes_per_gpu"]
