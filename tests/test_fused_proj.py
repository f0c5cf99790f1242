"""--fuse-proj: q|k|v and gate|up in one GEMM each must compute what the unfused model computes (Llama, Mistral with
its sliding window, Qwen2 with its q/k/v biases), through generate and the graph engines, and be reported."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuscope.workloads.sets import TINY_GPT2, TINY_LLAMA  # noqa: E402
from gpuscope.measure.device.device import Device  # noqa: E402
from gpuscope.measure.llm.fused_proj import fuse_projections  # noqa: E402
from gpuscope.measure.llm.graph_decode import static_greedy  # noqa: E402
from gpuscope.measure.models.hf_model import build_model, silence_generation  # noqa: E402

MISTRAL = dict(TINY_LLAMA, model_type="mistral", sliding_window=6)  # shorter than the sequences below
QWEN2 = dict(TINY_LLAMA, model_type="qwen2")  # biases on q, k, v


def _pair(cfg: dict):
    torch.manual_seed(0)
    ref, config = build_model(dict(cfg), Device("cpu"), torch.float32)
    for p in ref.parameters():  # wide weights so a wrong split or order changes the tokens
        torch.nn.init.normal_(p, std=0.3)
    fused = copy.deepcopy(ref)
    for m in (ref, fused):
        m.eval()
        silence_generation(m)
    return ref, fused, config


@pytest.mark.parametrize("cfg", [TINY_LLAMA, MISTRAL, QWEN2], ids=["llama", "mistral", "qwen2"])
def test_fused_model_computes_the_same(cfg):
    ref, fused, config = _pair(cfg)
    n_params = sum(p.numel() for p in ref.parameters())
    done = fuse_projections(fused)
    assert done == {"attention": config.num_hidden_layers, "mlp": config.num_hidden_layers, "skipped": []}
    names = [n for n, _ in fused.named_parameters()]
    assert not {n.split(".")[-2] for n in names} & {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}
    assert sum("qkv_proj.weight" in n for n in names) == config.num_hidden_layers
    assert sum(p.numel() for p in fused.parameters()) == n_params  # the same weights, regrouped
    if cfg is QWEN2:
        assert sum("qkv_proj.bias" in n for n in names) == config.num_hidden_layers
    ids = torch.randint(0, config.vocab_size, (2, 14))
    with torch.no_grad():
        assert torch.allclose(ref(ids).logits, fused(ids).logits, atol=1e-5)
    want = ref.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, min_new_tokens=8,
                        do_sample=False)
    assert torch.equal(static_greedy(fused, ids, 8), want)


def test_fused_model_compiles_to_the_same_tokens():
    ref, fused, config = _pair(TINY_LLAMA)
    fuse_projections(fused)
    ids = torch.randint(0, config.vocab_size, (1, 10))
    assert torch.equal(static_greedy(fused, ids, 6, compile=True), static_greedy(ref, ids, 6))


def test_unsupported_modules_are_left_and_reported():
    model, _ = build_model(dict(TINY_GPT2), Device("cpu"), torch.float32)
    before = {n: p.clone() for n, p in model.state_dict().items()}
    done = fuse_projections(model)
    assert done["attention"] == 0 and done["mlp"] == 0
    assert "GPT2Attention" in done["skipped"] and "GPT2MLP" in done["skipped"]
    assert all(torch.equal(before[n], p) for n, p in model.state_dict().items())


def _cli(*args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout[r.stdout.index("{"):])


@pytest.mark.slow
def test_bench_and_doctor_run_what_they_were_asked(tmp_path):
    """bench infer records the fusion in its result and name; doctor infer profiles the same model (attention
    function and fusion), not a stock one."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    common = ("--model", str(cfg), "--batch", "1", "--prompt", "12", "--gen", "4", "--engine", "gs-graph",
              "--attn", "gs-gqa", "--fuse-proj", "--device", "cpu", "--json")
    b = _cli("bench", "infer", *common, "--repeats", "1", "--db", str(tmp_path / "r.sqlite"))
    m = b["measurements"][0]
    assert m["name"].endswith("-gs-graph-gs-gqa-fused")
    assert m["result"]["fused_proj"] == {"attention": 2, "mlp": 2, "skipped": []}
    assert m["result"]["attn_impl"] == "gs_gqa_sdpa"
    d = _cli("doctor", "infer", *common)
    assert d["profile"]["attn_impl"] == "gs_gqa_sdpa"
    assert d["profile"]["fused_proj"] == {"attention": 2, "mlp": 2, "skipped": []}


def test_each_old_weight_is_freed_as_it_is_replaced(monkeypatch):
    """No transient second copy of the model's projections: by the time layer i is fused, the q/k/v and gate/up
    weights of layers < i are gone (a list of modules held them all until the end: 7.5 GB for an 8B model)."""
    import weakref

    from gpuscope.measure.llm import fused_proj

    model, _ = build_model(dict(TINY_LLAMA, num_hidden_layers=4), Device("cpu"), torch.float32)
    old = [(weakref.ref(layer.self_attn.q_proj.weight), weakref.ref(layer.mlp.up_proj.weight))
           for layer in model.model.layers]
    alive_at_call = []
    real = fused_proj.fuse_attention

    def spy(attn):
        alive_at_call.append(sum(q() is not None for q, _ in old[:attn.layer_idx]) +
                             sum(u() is not None for _, u in old[:attn.layer_idx]))
        real(attn)

    monkeypatch.setattr(fused_proj, "fuse_attention", spy)
    fused_proj.fuse_projections(model)
    assert alive_at_call == [0, 0, 0, 0]
    assert all(q() is None and u() is None for q, u in old)
