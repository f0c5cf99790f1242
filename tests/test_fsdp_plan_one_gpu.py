"""The planner's FSDP2 at one GPU and its three AdamW implementations (estimate/adamw.py, memory_train.py)."""

from __future__ import annotations

import json

import pytest

from gpuscope.errors import UserError
from gpuscope.estimate.adamw import (ADAMW_IMPLS, FOREACH_BW_FRACTION, largest_tensors, resolve_impl,
                                     step_temporary_bytes)
from gpuscope.estimate.fsdp_time import fsdp_copy_bytes
from gpuscope.estimate.params import count_params
from gpuscope.estimate.runtime import TRAIN_WORKSPACE_BYTES
from gpuscope.estimate.train import estimate_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

H200 = load_hardware("h200")
KW = dict(micro_batch=2, seq=2048, precision="amp-bf16", num_gpus=1, strategy="fsdp")


def _fsdp1(impl, model="llama-3.2-3b", **kw):
    return estimate_train(load_model(model), H200, **{**KW, **kw}, adamw_impl=impl)


def test_fsdp_on_one_gpu_is_planned_as_fsdp_not_autocast():
    e, amp = _fsdp1("fused"), estimate_train(load_model("llama-3.2-3b"), H200, micro_batch=2, seq=2048)
    assert e.inputs["strategy"] == "fsdp" and amp.inputs["strategy"] == "single"
    # bf16 layers from the policy: no autocast weight copies, a bf16 residual stream; less memory than AMP
    assert "weight_copies_16bit" not in e.breakdown_bytes
    assert e.peak_bytes_per_gpu < amp.peak_bytes_per_gpu - 5e9
    assert e.time["exposed_comm_s"] == 0.0


def test_optimizer_phase_per_adamw_implementation():
    m = load_model("llama-3.2-3b")
    P = count_params(m).total
    rest_and_grads = 16 * P + TRAIN_WORKSPACE_BYTES  # fp32 shards, fp32 grads, two fp32 states; root resharded
    opt = {impl: _fsdp1(impl).phases_bytes["optimizer"] for impl in ADAMW_IMPLS}
    assert opt["fused"] == pytest.approx(rest_and_grads)
    assert opt["foreach"] == pytest.approx(rest_and_grads + 4 * P)
    assert opt["for-loop"] == pytest.approx(rest_and_grads + 2 * 4 * m.vocab_size * m.hidden_size)
    # sharded over 4 GPUs: every temporary is a quarter
    four = estimate_train(m, H200, **{**KW, "num_gpus": 4}, adamw_impl="for-loop").phases_bytes["optimizer"]
    assert four == pytest.approx(rest_and_grads / 4 + TRAIN_WORKSPACE_BYTES * 0.75 + 2 * m.vocab_size * m.hidden_size)


def test_for_loop_temporary_when_a_layer_matrix_is_the_largest():
    """A small vocabulary: down_proj (I x h) is the largest and follows up_proj of its size: 3 of it at once."""
    m = load_model("llama-3.2-1b")
    small = type(m)(**{**m.__dict__, "vocab_size": 1000})
    big, before = largest_tensors(small)
    assert big == before == small.intermediate_size * small.hidden_size
    assert step_temporary_bytes(small, 1e9, "adamw", "for-loop", 4.0) == 3 * 4.0 * big
    assert step_temporary_bytes(small, 1e9, "sgd", "for-loop", 4.0) == 0.0
    assert step_temporary_bytes(small, 1e9, "adamw", "foreach", 4.0, shards=2) == 2e9


def test_step_time_per_implementation_and_the_assumption_that_names_it():
    t = {impl: _fsdp1(impl) for impl in ADAMW_IMPLS}
    # foreach and the for-loop: 20 accesses a parameter against fused's 7, their launches hidden behind that traffic
    # on a 3B model; foreach's list kernels at FOREACH_BW_FRACTION of the bandwidth the others get
    for impl, frac in (("for-loop", 1.0), ("foreach", FOREACH_BW_FRACTION)):
        assert t[impl].time["optimizer_s"] == pytest.approx(t["fused"].time["optimizer_s"] * 20 / 7 / frac, rel=0.02)
    for impl, e in t.items():
        assert e.inputs["adamw_impl"] == impl
        assert sum(f"AdamW priced {impl if impl != 'for-loop' else 'as torch' + chr(39) + 's for-loop'}" in a
                   for a in e.assumptions) == 1
    assert resolve_impl(False) == "foreach" and resolve_impl(True) == "fused"
    with pytest.raises(UserError, match="must be one of fused, foreach, for-loop"):
        resolve_impl(True, "loop")


def test_fsdp_copy_bytes_derivation():
    """Per layer parameter at N = 1 under the bf16 policy: two gathers of (4+2) + (2+2) + (2+2) and a reduce of
    (2+4) + 2 x 4: 42 bytes; the root is gathered once (28)."""
    m = load_model("llama-3.2-1b")
    pc = count_params(m)
    root = pc.embedding + pc.lm_head + pc.norms
    assert fsdp_copy_bytes(pc, "amp-bf16", 1) == pytest.approx((pc.total - root) * 42 + root * 28)
    # pure bf16 over 2 GPUs: no cast; the copy into the gather buffer over the half shard; no N = 1 reduce copy
    assert fsdp_copy_bytes(pc, "bf16", 2) == pytest.approx((pc.total - root) * 16 + root * 10)


def test_cli_fsdp_one_gpu_and_for_loop():
    from typer.testing import CliRunner

    import gpuscope.cli as cli

    cli._register()
    args = ["plan", "train", "--model", "llama-3.2-3b", "--gpu", "h200", "--fsdp", "--num-gpus", "1",
            "--micro-batch", "2", "--seq", "2048", "--json"]
    runner = CliRunner()
    for extra, impl in (([], "fused"), (["--foreach"], "foreach"), (["--for-loop"], "for-loop")):
        r = runner.invoke(cli.app, args + extra)
        assert r.exit_code == 0, r.output
        d = json.loads(r.stdout)
        assert d["inputs"]["adamw_impl"] == impl and d["inputs"]["strategy"] == "fsdp"
        assert d["memory"]["phases_bytes"]["optimizer"] == pytest.approx(_fsdp1(impl).phases_bytes["optimizer"])


def test_optimizer_launches_per_implementation():
    """for-loop: eight kernels a tensor; foreach: eight list ops, each a launch per 36 tensors or 320 x 65536
    elements (multi_tensor_apply), whichever fills first; fused: in the measured fused host cost (0 here)."""
    from gpuscope.estimate.adamw import launch_s, param_tensors

    m = load_model("llama-3.2-3b")
    n = param_tensors(m)
    assert launch_s(m, "for-loop", 1.0, 3.2e9) == 8 * n
    assert launch_s(m, "foreach", 1.0, 3.2e9) == 8 * 153  # elements decide: ceil(3.2e9 / 20,971,520)
    assert launch_s(m, "foreach", 1.0, 1e6) == 8 * -(-n // 36)  # a small shard: the tensor count decides
    assert launch_s(m, "fused", 1.0, 3.2e9) == 0.0


def test_fsdp_hooks_on_the_host_and_copies_on_the_gpu():
    """FSDP2's micro-batch: the plain HF host time + FSDP_HOST_LAYER_LAUNCHES launches a layer, the GPU's + its
    copies; at 128 tokens the step is the host's and grows with the layer count."""
    from gpuscope.estimate.engines import engine_for
    from gpuscope.estimate.fsdp_time import FSDP_HOST_LAYER_LAUNCHES

    m = load_model("llama-3.2-3b")
    kw = dict(micro_batch=1, seq=128, precision="amp-bf16", adamw_impl="fused")
    f = estimate_train(m, H200, num_gpus=1, strategy="fsdp", **kw)
    launch = engine_for("eager", H200).launch_s
    hooks = FSDP_HOST_LAYER_LAUNCHES * launch * m.num_layers
    assert f.time["host_s_per_micro_batch"] > hooks > f.time["gpu_s_per_micro_batch"]
    f1 = estimate_train(load_model("llama-3.2-1b"), H200, num_gpus=1, strategy="fsdp", **kw)
    assert f.time["step_s"] - f1.time["step_s"] > (28 - 16) * FSDP_HOST_LAYER_LAUNCHES * launch
