"""DDP / FSDP2 training and DDP gradient-compression benchmarks on CPU: gloo, 2 processes, tiny llama, through the
real `gpuscope bench` group (torchrun jobs started by gpuscope.measure.distributed.launch)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # end to end: several processes each (pyproject.toml's markers)
pytest.importorskip("transformers")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from gpuscope.workloads.sets import TINY_LLAMA  # noqa: E402
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
    # bytes per step (steady state): fp32, 16-bit, 1-bit signs (+ one fp32 scale per bucket), each from its formula
    d = res["param_count"]
    assert b["none"] == ref["bytes_per_step"] == 4 * d
    assert b["fp16"] == b["bf16"] == 2 * d
    assert d % 8 == 0  # every tiny-llama tensor holds a multiple of 8 elements: no per-bucket padding byte
    assert b["sign"] == d // 8 + 4 * v["sign"]["buckets_per_step"]
    assert b["none"] > b["fp16"] > b["sign"]
    assert b["powersgd4"] > b["powersgd2"] > b["powersgd1"]
    assert v["sign"]["compression_ratio"] == pytest.approx(4 * d / b["sign"])
    assert 30 < v["sign"]["compression_ratio"] <= 32
    for h, x in v.items():
        assert x["bytes_per_step"] == x["bytes_formula_check"], h
        # ring all-reduce: 2 (N-1)/N x payload; sign's all_gather: (N-1) x payload; both 1 x payload for N = 2
        assert x["wire_bytes_per_step_ring"] == pytest.approx(x["bytes_per_step"])
        assert x["step_s"] > 0
    assert "(N-1)" in res["metric_formulas"]["wire_bytes_per_step_ring"]
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

    r = subprocess.run([sys.executable, "-m", "gpuscope.measure.distributed.train", "--case",
                        json.dumps({"strategy": "zero3", "micro_batch": 1, "seq": 8, "config": TINY_LLAMA})],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "strategy" in r.stderr and r.stdout == ""


class _Bucket:
    """The two GradBucket methods sign_ef_hook uses."""

    def __init__(self, t, index=0):
        self.t, self.i = t, index

    def buffer(self):
        return self.t

    def index(self):
        return self.i


def _pm1(x):
    """The 1-bit code of the hook: +1 where x >= 0 (zero included), -1 below."""
    return torch.where(x >= 0, 1.0, -1.0)


def test_sign_hook_survives_ddp_bucket_rebuild(tmp_path):
    """DDP rebuilds its buckets after the first iteration: the same bucket index can come back with another size
    (two H200s: 16.8M elements against a first-iteration residual of 1.24G). The residual restarts, no crash."""
    import torch.distributed as dist

    from gpuscope.measure.distributed.comm_hooks import SignState, sign_ef_hook

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        st = SignState()
        out = sign_ef_hook(st, _Bucket(torch.ones(8))).wait()
        assert st.error[0].numel() == 8 and torch.equal(out, torch.ones(8)) and not st.error[0].any()
        g = torch.tensor([3.0, -1.0, 0.0])
        out = sign_ef_hook(st, _Bucket(g.clone())).wait()  # rebuilt layout: 3 elements under index 0
        assert st.error[0].numel() == 3 and st.last_payload_bytes == 1 + 4
        scale = g.abs().mean()
        c = torch.tensor([1.0, -1.0, 1.0])  # 0 is sent as +1: no zero level in a 1-bit code
        assert torch.equal(out, scale * c) and torch.allclose(st.error[0], g - scale * c)
        # same size again: the residual is carried into the next step
        g2 = torch.tensor([-0.5, 0.25, -2.0])
        x = g2 + st.error[0]
        out = sign_ef_hook(st, _Bucket(g2.clone())).wait()
        s2 = x.abs().mean()
        assert torch.equal(out, s2 * _pm1(x)) and torch.allclose(st.error[0], x - s2 * _pm1(x))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 37, 64, 1003])
def test_sign_pack_unpack_round_trip(n):
    from gpuscope.measure.distributed.comm_hooks import bucket_bytes, pack_signs, unpack_signs

    gen = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=gen)
    x[:: 5] = 0.0
    x[1:: 7] = -0.0  # -0.0 >= 0: +1 as well
    packed = pack_signs(x >= 0)
    assert packed.dtype == torch.uint8 and packed.shape == ((n + 7) // 8,)
    assert bucket_bytes("sign", [(n,)], 4, 2) == packed.numel() + 4
    c = unpack_signs(packed, n)
    assert c.dtype == torch.float32 and torch.equal(c, _pm1(x))
    # batched (world, nbytes) -> (world, n), as the hook's all_gather output is read
    y = -x + 0.5
    both = unpack_signs(torch.stack([packed, pack_signs(y >= 0)]), n)
    assert torch.equal(both, torch.stack([_pm1(x), _pm1(y)]))


def test_sign_pack_bit_order():
    from gpuscope.measure.distributed.comm_hooks import pack_signs

    bits = torch.tensor([1, 0, 1, 0, 0, 0, 0, 1, 1], dtype=torch.bool)  # element 8k + j -> bit j of byte k
    assert pack_signs(bits).tolist() == [1 + 4 + 128, 1]


def test_sign_byte_formulas():
    """Payload: sum over buckets of ceil(d_b / 8) + 4; wire per rank: all_gather (N-1) x payload for sign, ring
    all-reduce 2 (N-1)/N x payload for the others."""
    from gpuscope.measure.distributed.comm_hooks import bucket_bytes, static_bytes_per_step, wire_bytes_per_step

    model = torch.nn.Linear(3, 4)  # 16 elements
    per_bucket = bucket_bytes("sign", [(3, 3)], 4, 2) + bucket_bytes("sign", [(7,)], 4, 2)
    assert per_bucket == (2 + 4) + (1 + 4)
    # buckets of 9 and 7 elements: one padding byte more than ceil(16 / 8)
    assert static_bytes_per_step("sign", model, 2, n_buckets=2, bucket_numels=[9, 7]) == per_bucket == 11
    assert static_bytes_per_step("sign", model, 2, n_buckets=2, bucket_numels=[8, 8]) == 2 + 8
    assert static_bytes_per_step("none", model, 2) == 64 and static_bytes_per_step("fp16", model, 2) == 32
    assert wire_bytes_per_step("sign", 100, 4) == 300 and wire_bytes_per_step("none", 100, 4) == 150
    assert wire_bytes_per_step("fp16", 100, 2) == wire_bytes_per_step("sign", 100, 2) == 100
    assert wire_bytes_per_step("sign", None, 4) is None


def _sign_two_ranks_worker(rank, path, out_dir, grads):
    import torch.distributed as dist

    from gpuscope.measure.distributed.comm_hooks import SignState, sign_ef_hook

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    try:
        st = SignState()
        outs, errors = [], []
        for g in grads[rank]:  # two steps on the same bucket: the second carries the first's residual
            outs.append(sign_ef_hook(st, _Bucket(g.clone())).wait().clone())
            errors.append(st.error[0].clone())
        torch.save({"outs": outs, "errors": errors, "payload": st.last_payload_bytes}, f"{out_dir}/r{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_sign_hook_two_ranks_exact_mean(tmp_path):
    """Two gloo ranks: the decompressed gradient is exactly (s_0 c_0 + s_1 c_1) / 2, each rank's signs with its own
    scale (not the mean scale on the summed signs), identical on both ranks, and the residuals are x_i - s_i c_i."""
    import torch.multiprocessing as mp

    from gpuscope.measure.distributed.comm_hooks import bucket_bytes

    n = 37  # not a multiple of 8: the last byte is padded
    gen = torch.Generator().manual_seed(0)
    grads = [[torch.randn(n, generator=gen) * (1 + 3 * r) for _ in range(2)] for r in range(2)]
    grads[0][0][4] = 0.0
    mp.spawn(_sign_two_ranks_worker, args=(str(tmp_path / "pg"), str(tmp_path), grads), nprocs=2, join=True)
    got = [torch.load(tmp_path / f"r{r}.pt") for r in range(2)]
    assert got[0]["payload"] == got[1]["payload"] == bucket_bytes("sign", [(n,)], 4, 2) == (n + 7) // 8 + 4
    err = [torch.zeros(n), torch.zeros(n)]
    for t in range(2):
        x = [grads[r][t] + err[r] for r in range(2)]
        s = [xi.abs().mean() for xi in x]
        c = [_pm1(xi) for xi in x]
        want = (s[0] * c[0] + s[1] * c[1]) / 2
        assert torch.equal(got[0]["outs"][t], want) and torch.equal(got[1]["outs"][t], want), t
        old = (s[0] + s[1]) / 2 * (c[0] + c[1]) / 2  # the former mean-scale decompression: not what is sent
        assert not torch.allclose(old, want)
        for r in range(2):
            err[r] = x[r] - s[r] * c[r]
            assert torch.allclose(got[r]["errors"][t], err[r], atol=1e-6), (t, r)


def test_dist_estimate_beside_a_measured_h200_case():
    """The estimate train-dist prints beside its measurement (two-H200 DDP Llama-2-7B record)."""
    import json
    from pathlib import Path

    from gpuscope.pipeline.dist import dist_estimate

    path = Path(__file__).resolve().parents[1] / "research" / "results" / "2026-11-29-h200-x2" / "dist_train.jsonl"
    rec = next(json.loads(x) for x in path.read_text().splitlines() if "llama-2-7b/ddp" in x)
    est = dist_estimate(rec["case"], rec["result"], None)
    rows = {r["metric"]: r for r in est["rows"]}
    assert est["hardware"] == "nvidia_h200_sxm"
    assert abs(rows["peak_bytes"]["error"]) < 0.05 and abs(rows["step_s"]["error"]) < 0.15
    assert dist_estimate(rec["case"], {"status": "oom"}, None) == {"unavailable": "the measurement's status is oom"}
