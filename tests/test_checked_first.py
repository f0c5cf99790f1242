"""Every option and layout is checked before any planning or measuring starts: one sentence naming the flag (or the
config field), exit code 2, nothing stored - through the real entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from test_cli_exit import NO_TORCH


def run(*args: str, db=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, GPUSCOPE_DB=str(db)) if db else None
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def _one_sentence(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("doctor ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


TRAIN = ("plan", "train", "--model", "llama-3-8b", "--gpu", "h100", "--micro-batch", "1", "--seq", "2048")


@pytest.mark.parametrize("args, needles", [
    (("--num-gpus", "5", "--pp", "5"), ("--pp (5)", "32 layers")),
    (("--num-gpus", "8", "--pp", "4", "--virtual", "3"), ("--pp 4 x --virtual 3", "32 layers")),
    (("--num-gpus", "8", "--global-batch", "13"), ("--global-batch (13)", "1 x 8")),
    (("--num-gpus", "8", "--tp", "2", "--global-batch", "13"), ("global batch (13)",)),
    (("--global-batch", "3", "--micro-batch", "2"), ("--global-batch (3)",)),
    (("--num-gpus", "8", "--global-batch", "16", "--grad-accum", "3"), ("--global-batch (16)", "--grad-accum")),
    (("--num-gpus", "8", "--fsdp", "--zero", "2"), ("--fsdp and --zero 2",)),
    (("--num-gpus", "8", "--tp", "2", "--fsdp", "--zero", "1"), ("--fsdp and --zero 1",)),
])
def test_train_layouts_that_cannot_run(args, needles):
    _one_sentence(run(*TRAIN, *args), *needles)


def test_a_global_batch_that_divides_sets_the_accumulation():
    a = json.loads(run(*TRAIN, "--num-gpus", "8", "--global-batch", "32", "--json").stdout)
    b = json.loads(run(*TRAIN, "--num-gpus", "8", "--grad-accum", "4", "--json").stdout)
    assert a["time"]["step_s"] == pytest.approx(b["time"]["step_s"])


@pytest.mark.parametrize("k, needle", [(16, "(16) exceeds the 8 routed experts"), (0, "positive integer")])
def test_moe_top_k_beyond_the_experts(tmp_path, k, needle):
    cfg = {"model_type": "mixtral", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 4,
           "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000, "num_local_experts": 8,
           "num_experts_per_tok": k, "max_position_embeddings": 4096}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for cmd in (("plan", "infer", "--gpu", "h100"), ("plan", "train", "--gpu", "h100")):
        _one_sentence(run(*cmd, "--model", str(tmp_path / "config.json")), "num_experts_per_tok", needle)


@pytest.fixture
def db(tmp_path):
    from gpuscope.store.db import Store

    path = tmp_path / "r.sqlite"
    with Store.open(path):
        pass
    return path


@pytest.mark.parametrize("args, needles", [
    (("results", "list", "--limit", "-3"), ("--limit", "-3")),
    (("results", "list", "--kind", "foo"), ("--kind 'foo'", "train-dist")),
    (("results", "export", "--json", "--kind", "foo"), ("--kind 'foo'",)),
    (("results", "compare", "--gpu", "h999"), ("--gpu", "h999")),
])
def test_results_options(db, args, needles):
    _one_sentence(run(*args, "--db", str(db)), *needles)
    assert run("results", "list", "--kind", "train-dist", "--limit", "0", "--db", str(db)).returncode == 0


@pytest.mark.parametrize("args, needles", [
    (("bench", "infer", "--model", "llama-3.2-1b", "--device", "cpu", "--gpu", "h999"), ("--gpu", "h999")),
    (("bench", "train", "--model", "llama-3.2-1b", "--device", "cpu", "--gpu", "/nonexistent.toml"), ("--gpu",)),
    (("bench", "collectives", "--backend", "gloo", "--gpu", "h999"), ("--gpu", "h999")),
    (("bench", "train-dist", "--model", "llama-3.2-1b", "--device", "cpu", "--gpu", "h999"), ("--gpu", "h999")),
    (("hardware", "calibrate", "--device", "cpu", "--quick", "--out", "/proc/x"), ("--out '/proc/x'",)),
    (("bench", "micro", "--device", "mps"), ("--device", "mps")),
])
def test_measuring_commands_check_first(tmp_path, args, needles):
    pytest.importorskip("torch")
    db = tmp_path / "r.sqlite"
    _one_sentence(run(*args, "--db", str(db), db=db), *needles)
    assert not db.exists()  # said before measuring: nothing measured, nothing stored


@pytest.mark.parametrize("cmd", ["infer", "train"])
def test_bench_on_cuda_without_cuda(tmp_path, cmd):
    if pytest.importorskip("torch").cuda.is_available():
        pytest.skip("this machine has CUDA")
    db = tmp_path / "r.sqlite"
    _one_sentence(run("bench", cmd, "--model", "llama-3.2-1b", "--device", "cuda", "--db", str(db)),
                  "--device", "cuda")
    assert not db.exists()


def test_a_device_index_past_the_count(tmp_path):
    n = pytest.importorskip("torch").cuda.device_count()
    if not n:
        pytest.skip("no CUDA device to count")
    _one_sentence(run("bench", "infer", "--model", "llama-3.2-1b", "--device", f"cuda:{n}", "--db",
                      str(tmp_path / "r.sqlite")), f"cuda:{n}")


@pytest.mark.parametrize("args", [("bench", "micro"), ("bench", "compression", "--model", "llama-3.2-1b")])
def test_without_torch_one_sentence(args):
    r = subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=60)
    _one_sentence(r, "needs PyTorch")
