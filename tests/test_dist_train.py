"""DDP / FSDP2 training and DDP gradient-compression benchmarks on CPU: gloo, 2 processes, tiny llama, through the
real `gpuscope bench` group (torchrun jobs started by gpuscope.measure.launch)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from gpuscope.measure.cases import TINY_LLAMA  # noqa: E402
from gpuscope.store.db import Store  # noqa: E402

TINY = json.dumps(TINY_LLAMA)


def bench_cli(*args: str):
    """`gpuscope bench ...` through the real app, with register_dist_train added to the bench group if the lead's
    bench_dist.py does not call it yet."""
    from typer.testing import CliRunner

    import gpuscope.cli as cli
    from gpuscope.cli.bench_dist_train import register_dist_train

    cli._register()
    bench = next(g.typer_instance for g in cli.app.registered_groups if g.typer_instance.info.name == "bench")
    if not any(c.name == "train-dist" for c in bench.registered_commands):
        register_dist_train(bench)
    return CliRunner().invoke(cli.app, ["bench", *args])


def _measurement(r) -> dict:
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuscope.bench/1" and len(d["measurements"]) == 1
    return d["measurements"][0]


def test_ddp_train_with_baseline(tmp_path):
    db = tmp_path / "r.sqlite"
    r = bench_cli("train-dist", "--nproc", "2", "--strategy", "ddp", "--config", TINY, "--micro-batch", "2",
                  "--seq", "32", "--precision", "fp32", "--steps", "3", "--warmup", "1", "--baseline",
                  "--device", "cpu", "--db", str(db), "--json")
    m = _measurement(r)
    res = m["result"]
    assert res["status"] == "ok", res
    assert res["strategy"] == "ddp" and res["world_size"] == 2 and res["ddp"]["bucket_cap_mb"] == 25
    assert len(res["ranks"]) == 2 and [x["rank"] for x in res["ranks"]] == [0, 1]
    assert all(x["step_s"] > 0 and len(x["samples_s"]) == 3 for x in res["ranks"])
    assert res["step_s"] == max(res["rank_step_s"])
    assert res["tokens_per_s"] == pytest.approx(2 * 2 * 32 / res["step_s"])
    assert res["loss_finite"]
    b = res["baseline"]
    assert b["status"] == "ok" and b["step_s"] > 0
    assert res["scaling_efficiency"] == pytest.approx(b["step_s"] / res["step_s"])
    assert "peak_backward_bytes" in res and res["peak_backward_bytes"] is None  # CPU: no allocator statistics
    assert "not in the hardware catalog" in m["estimate"]["unavailable"]  # CPU: no catalog entry, said so
    with Store.open(db) as s:
        rows = s.list(kind="train-dist")
        assert len(rows) == 1 and rows[0]["status"] == "ok"
        full = s.get(rows[0]["id"])
        assert full["provenance"]["world_size"] == 2 and full["provenance"]["backend"] == "gloo"
        assert full["provenance"]["nccl_env"].get("NCCL_NVLS_ENABLE") == "0"


def test_fsdp2_train_on_gloo(tmp_path):
    r = bench_cli("train-dist", "--nproc", "2", "--strategy", "fsdp", "--config", TINY, "--micro-batch", "2",
                  "--seq", "32", "--precision", "amp-bf16", "--steps", "2", "--warmup", "1", "--device", "cpu",
                  "--db", str(tmp_path / "r.sqlite"), "--json")
    res = _measurement(r)["result"]
    assert res["status"] == "ok", res
    assert res["fsdp"]["sharded_blocks"] == TINY_LLAMA["num_hidden_layers"]
    assert res["fsdp"]["block_class"] == "LlamaDecoderLayer"
    assert res["fsdp"]["param_dtype"] == "bfloat16" and res["fsdp"]["reduce_dtype"] == "float32"
    assert res["baseline"] is None and res["scaling_efficiency"] is None
    # sharded: each rank holds about half of the fp32 AdamW states (2 x fp32 per parameter, plus step counters)
    full_states = 2 * 4 * res["param_count"]
    assert 0.4 * full_states < res["optimizer_state_bytes"] < 0.6 * full_states + 4096
    assert res["tokens_per_s"] > 0


def test_compression_hooks(tmp_path):
    r = bench_cli("compression", "--nproc", "2", "--config", TINY, "--micro-batch", "2", "--seq", "32",
                  "--steps", "8", "--warmup", "3", "--device", "cpu", "--db", str(tmp_path / "r.sqlite"), "--json")
    res = _measurement(r)["result"]
    assert res["status"] == "ok", res
    v = {x["hook"]: x for x in res["variants"]}
    assert list(v) == ["none", "fp16", "bf16", "powersgd1", "powersgd2", "powersgd4", "sign"]
    ref = res["reference"]
    assert all(len(x["losses"]) == 8 for x in v.values())
    assert ref["losses"][-1] < ref["losses"][0]  # the fixed pool of batches is learnable
    # same seed, same data: the uncompressed variant reproduces the reference exactly on CPU
    assert v["none"]["loss_dev_max"] == 0.0 and v["none"]["losses"] == ref["losses"]
    for h in ("fp16", "bf16"):
        assert 0 < v[h]["loss_dev_max"] < 1e-2
    sign = v["sign"]
    assert sign["loss_finite"] and math_isfinite(sign["loss_dev_max"])
    assert sign["loss_dev_max"] > 10 * max(v["fp16"]["loss_dev_max"], v["bf16"]["loss_dev_max"])
    b = {h: x["bytes_per_step"] for h, x in v.items()}
    # bytes per step (steady state): fp32 > 16-bit > int8 signs > PowerSGD rank 4 > rank 2 > rank 1
    assert b["none"] == ref["bytes_per_step"] == 4 * res["param_count"]
    assert b["fp16"] == b["bf16"] == 2 * res["param_count"]
    assert b["sign"] == res["param_count"] + 4 * v["sign"]["buckets_per_step"]
    assert b["none"] > b["fp16"] > b["sign"] > b["powersgd4"] > b["powersgd2"] > b["powersgd1"]
    for h, x in v.items():
        assert x["bytes_per_step"] == x["bytes_formula_check"], h
        assert x["wire_bytes_per_step_ring"] == pytest.approx(x["bytes_per_step"])  # 2 (N-1)/N = 1 for N = 2
        assert x["step_s"] > 0
    # PowerSGD sends plain fp32 all-reduces before start_powerSGD_iter
    assert v["powersgd1"]["bytes_per_step_all"][:2] == [b["none"]] * 2


def math_isfinite(x) -> bool:
    import math

    return isinstance(x, float) and math.isfinite(x)


@pytest.mark.parametrize("args, needle", [
    (["train-dist", "--strategy", "zero3", "--config", TINY], "--strategy"),
    (["train-dist", "--nproc", "0", "--config", TINY], "--nproc"),
    (["train-dist", "--strategy", "fsdp", "--precision", "amp-fp16", "--config", TINY], "amp-fp16"),
    (["train-dist"], "--model"),
    (["train-dist", "--config", "{not json"], "--config"),
    (["compression", "--config", TINY, "--hooks", "none,topk"], "topk"),
    (["compression", "--config", TINY, "--steps", "3", "--warmup", "3"], "--warmup"),
    (["compression", "--config", TINY, "--device", "mps"], "--device"),
])
def test_bad_input_exit_2(tmp_path, args, needle):
    from gpuscope.errors import UserError

    r = bench_cli(*args, "--db", str(tmp_path / "r.sqlite"))
    assert r.exit_code != 0
    exc = r.exception
    assert isinstance(exc, UserError) and needle in str(exc), (r.output, exc)
    assert UserError.exit_code == 2
    assert not (tmp_path / "r.sqlite").exists()  # nothing was started or stored


def test_worker_bad_case_exit_2():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "gpuscope.measure.dist_train", "--case",
                        json.dumps({"strategy": "zero3", "micro_batch": 1, "seq": 8, "config": TINY_LLAMA})],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "strategy" in r.stderr and r.stdout == ""


def test_sign_hook_survives_ddp_bucket_rebuild(tmp_path):
    """DDP rebuilds its buckets after the first iteration: the same bucket index can come back with another size
    (two H200s: 16.8M elements against a first-iteration residual of 1.24G). The residual restarts, no crash."""
    import torch
    import torch.distributed as dist

    from gpuscope.measure.compression import SignState, sign_ef_hook

    class Bucket:
        def __init__(self, t):
            self.t = t

        def buffer(self):
            return self.t

        def index(self):
            return 0

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        st = SignState()
        out = sign_ef_hook(st, Bucket(torch.ones(8))).wait()
        assert st.error[0].numel() == 8 and torch.allclose(out, torch.ones(8))
        g = torch.tensor([3.0, -1.0, 0.0])
        out = sign_ef_hook(st, Bucket(g.clone())).wait()  # rebuilt layout: 3 elements under index 0
        assert st.error[0].numel() == 3
        scale = g.abs().mean()
        assert torch.allclose(out, scale * torch.sign(g)) and torch.allclose(st.error[0], g - scale * torch.sign(g))
    finally:
        dist.destroy_process_group()


def test_dist_estimate_beside_a_measured_h200_case():
    """The estimate train-dist prints beside its measurement (two-H200 DDP Llama-2-7B record)."""
    import json
    from pathlib import Path

    from gpuscope.cli.bench_dist_train import dist_estimate

    path = Path(__file__).resolve().parents[1] / "results" / "2026-11-29-h200-x2" / "dist_train.jsonl"
    rec = next(json.loads(x) for x in path.read_text().splitlines() if "llama-2-7b/ddp" in x)
    est = dist_estimate(rec["case"], rec["result"], None)
    rows = {r["metric"]: r for r in est["rows"]}
    assert est["hardware"] == "nvidia_h200_sxm"
    assert abs(rows["peak_bytes"]["error"]) < 0.05 and abs(rows["step_s"]["error"]) < 0.15
    assert dist_estimate(rec["case"], {"status": "oom"}, None) == {"unavailable": "the measurement's status is oom"}
