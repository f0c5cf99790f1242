"""Precision bf16-master (issue 26, item 6): bf16 compute weights with fp32 master weights and AdamW states.

- the optimizer step (measure/models/master_weights.py) is AdamW on fp32 masters: bit for bit the fp32 AdamW of
  the same weights and gradients, with the model's bf16 weights the masters rounded to nearest;
- at a small learning rate pure bf16 AdamW loses the update and the master keeps it (the numerics note);
- the training loop runs it (tiny Llama on the CPU) and holds 4 bytes of master and 8 of states a parameter;
- the planner holds 2 + 4 + 8 + 2 bytes a parameter, moves 40 bytes a parameter in the step, refuses offload;
- `tune plan` ranks pure bf16 only with --allow-pure-bf16 and says each configuration's numerics.
"""

import json

import pytest

torch = pytest.importorskip("torch")

from gpuscope.estimate.memory_train import MASTER_BUCKET_NUMEL  # noqa: E402
from gpuscope.estimate.params import count_params  # noqa: E402
from gpuscope.estimate.train import estimate_train  # noqa: E402
from gpuscope.errors import UserError  # noqa: E402
from gpuscope.measure.models.master_weights import MasterAdamW, buckets, make_optimizer  # noqa: E402
from gpuscope.specs.axes import NUMERICS, Precision  # noqa: E402
from gpuscope.specs.hardware import load_hardware  # noqa: E402
from gpuscope.specs.models import load_model  # noqa: E402


def _params(shapes, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s, generator=g).to(dtype)) for s in shapes]


def test_buckets_keep_order_and_cap_size():
    ps = _params([(4, 4), (4, 4), (10, 10), (2, 2)])
    bs = buckets(ps, numel=32)
    assert [[p.numel() for p in b] for b in bs] == [[16, 16], [100], [4]]
    assert [p for b in bs for p in b] == ps


def test_master_step_is_fp32_adamw_on_the_masters():
    shapes = [(8, 8), (64,), (3, 5)]
    model = _params(shapes)
    ref = [torch.nn.Parameter(p.detach().float()) for p in model]  # bf16-representable fp32 weights
    opt = MasterAdamW(model, lr=1e-2, bucket_numel=70)  # two buckets
    ref_opt = torch.optim.AdamW(ref, lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        grads = [torch.randn(*s, generator=g).to(torch.bfloat16) for s in shapes]
        for p, r, gr in zip(model, ref, grads):
            p.grad, r.grad = gr.clone(), gr.float()
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        assert all(p.grad is None for p in model)
    masters = [m for _, ms, _ in opt.groups for m in ms]
    for m, r, p in zip(masters, ref, model):
        assert m.dtype == torch.float32 and torch.equal(m, r.detach())
        assert p.dtype == torch.bfloat16 and torch.equal(p.detach(), r.detach().to(torch.bfloat16))
    assert len(opt.state) == 3 and all(st["exp_avg"].dtype == torch.float32 for st in opt.state.values())
    assert opt.master_bytes() == 4 * sum(p.numel() for p in model)


def test_small_lr_updates_survive_in_the_master_and_vanish_in_pure_bf16():
    lr, steps = 1e-5, 600  # AdamW's update ~ lr per step; half a bf16 ulp at 1.0 is 2^-8 = 0.0039
    pure = [torch.nn.Parameter(torch.ones(16, dtype=torch.bfloat16))]
    mixed = [torch.nn.Parameter(torch.ones(16, dtype=torch.bfloat16))]
    pure_opt = torch.optim.AdamW(pure, lr=lr, weight_decay=0.0)
    mixed_opt = MasterAdamW(mixed, lr=lr, weight_decay=0.0)
    for _ in range(steps):
        for p in pure + mixed:
            p.grad = torch.full_like(p, 0.5)
        pure_opt.step()
        mixed_opt.step()
    assert torch.all(pure[0] == 1.0)  # every update rounded away
    master = mixed_opt.groups[0][1][0]
    assert float(master[0].detach()) == pytest.approx(1.0 - lr * steps, rel=1e-3)
    assert torch.all(mixed[0] < 1.0)  # the accumulated update reached the bf16 copy


def test_make_optimizer_picks_by_precision():
    ps = _params([(4, 4)])
    opt, fields = make_optimizer(ps, "bf16-master", fused=False)
    assert isinstance(opt, MasterAdamW) and fields["master_bytes"] == 64 and fields["master_buckets"] == 1
    opt, fields = make_optimizer(ps, "bf16", fused=False)
    assert isinstance(opt, torch.optim.AdamW) and fields == {"optimizer_impl": "torch.optim.AdamW"}


def test_training_loop_runs_bf16_master_on_cpu():
    from gpuscope.measure.llm.train import run_train
    from gpuscope.workloads.sets import TINY_LLAMA

    r = run_train({"kind": "train", "model": "tiny-llama", "config": TINY_LLAMA, "micro_batch": 2, "seq": 16,
                   "precision": "bf16-master", "recompute": "none", "steps": 2, "warmup": 1, "device": "cpu",
                   "grad_accum": 2})
    assert r["status"] == "ok", r
    assert r["optimizer_impl"].startswith("master-adamw") and r["loss_finite"]
    n = r["param_bytes"] // 2  # bf16 parameters
    assert r["master_bytes"] == 4 * n
    assert 8 * n <= r["optimizer_state_bytes"] <= 8 * n + 64 * r["master_buckets"] * 40  # + the step counters
    assert r["autocast_dtype"] is None


def test_lora_with_bf16_master_is_refused():
    from gpuscope.measure.llm.train import train_settings
    from gpuscope.workloads.train import TrainCase

    with pytest.raises(ValueError, match="bf16-master"):
        train_settings({"micro_batch": 1, "seq": 8, "precision": "bf16-master", "lora_r": 8})
    with pytest.raises(UserError, match="bf16-master"):
        TrainCase(model="tiny-llama", micro_batch=1, seq=8, precision="bf16-master", lora_r=8)


def test_planner_holds_sixteen_bytes_a_parameter():
    m, hw = load_model("llama-2-7b"), load_hardware("h200")
    P = count_params(m).total
    kw = dict(micro_batch=1, seq=1024)
    est = estimate_train(m, hw, precision="bf16-master", **kw)
    b = est.breakdown_bytes
    assert b["weights"] == pytest.approx(2 * P) and b["master_weights_fp32"] == pytest.approx(4 * P)
    assert b["optimizer_states"] == pytest.approx(8 * P)
    opt_phase = est.phases_bytes["optimizer"]
    pure = estimate_train(m, hw, precision="bf16", **kw)
    amp = estimate_train(m, hw, precision="amp-bf16", **kw)
    # the optimizer phase: pure bf16 + 4 (master) + 4 (states now fp32) bytes + one fp32 bucket of gradients
    bucket = 4 * max(MASTER_BUCKET_NUMEL, count_params(m).embedding, count_params(m).lm_head)
    assert opt_phase == pytest.approx(pure.phases_bytes["optimizer"] + 8 * P + bucket)
    assert est.breakdown_bytes.get("activations") == pytest.approx(pure.breakdown_bytes["activations"])
    assert pure.peak_bytes_per_gpu < est.peak_bytes_per_gpu
    # at rest both hold 16 bytes a parameter; AMP's fp32 residual stream and weight copies make its activations
    # larger, so at a real batch bf16-master needs less
    big = dict(micro_batch=2, seq=2048)
    assert (estimate_train(m, hw, precision="bf16-master", **big).peak_bytes_per_gpu
            < estimate_train(m, hw, precision="amp-bf16", **big).peak_bytes_per_gpu)
    # the step moves 40 bytes a parameter (fused AdamW on fp32 masters 28 + casts 12) against pure bf16's 14
    assert est.time["optimizer_s"] / pure.time["optimizer_s"] == pytest.approx(40 / 14, rel=0.05)
    assert pure.time["step_s"] < est.time["step_s"] < amp.time["step_s"]
    with pytest.raises(UserError, match="bf16-master"):
        estimate_train(m, hw, precision="bf16-master", offload="optimizer", **kw)


def test_foreach_adamw_moves_three_times_the_fused_bytes():
    m, hw = load_model("llama-2-7b"), load_hardware("h200")
    fused = estimate_train(m, hw, micro_batch=1, seq=1024, precision="bf16", fused=True)
    loop = estimate_train(m, hw, micro_batch=1, seq=1024, precision="bf16", fused=False)
    P = count_params(m).total
    assert loop.phases_bytes["optimizer"] - fused.phases_bytes["optimizer"] == pytest.approx(2 * P)
    assert loop.time["optimizer_s"] > 2.5 * fused.time["optimizer_s"]


def test_every_precision_has_a_numerics_line():
    assert set(NUMERICS) == {p.value for p in Precision}
    assert "safe" in Precision.BF16_MASTER.numerics and "rounded away" in Precision.BF16.numerics


def _tune_plan(*args):
    from typer.testing import CliRunner

    import gpuscope.cli as cli

    cli._register()
    return CliRunner().invoke(cli.app, ["tune", "plan", "--model", "llama-2-7b", "--gpu", "h200", *args])


def test_tune_plan_ranks_pure_bf16_only_when_asked():
    from gpuscope.explain.recommend import recommend_train

    m, hw = load_model("llama-2-7b"), load_hardware("h200")
    safe = recommend_train(m, hw, seq=2048, tokens_per_step=32768, top=100)
    assert safe and all(c.precision != "bf16" for c in safe)
    assert safe[0].precision == "bf16-master" and safe[0].optimizer == "adamw"  # fp32 masters at bf16 speed
    every = recommend_train(m, hw, seq=2048, tokens_per_step=32768, top=100, allow_pure_bf16=True)
    assert any(c.precision == "bf16" for c in every)
    r = _tune_plan("--tokens-per-step", "32768", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["ranked"][0]["numerics"] == Precision.BF16_MASTER.numerics
    assert d["notes"] and "--allow-pure-bf16" in d["notes"][0]
    r = _tune_plan("--tokens-per-step", "32768", "--allow-pure-bf16", "--json")
    d = json.loads(r.output)
    assert not d["notes"] and any(c["precision"] == "bf16" for c in d["ranked"])
    table = _tune_plan("--tokens-per-step", "32768").output
    assert "bf16-master: fp32 master weights" in table and "not ranked" in table


def test_stochastic_rounding_and_kahan_are_planned_with_their_packages():
    from gpuscope.explain.recommend import recommend_train

    m, hw = load_model("llama-2-7b"), load_hardware("h200")
    P = count_params(m).total
    kw = dict(micro_batch=1, seq=1024)
    sr, kahan = (estimate_train(m, hw, precision=p, **kw) for p in ("bf16-sr", "bf16-kahan"))
    assert sr.breakdown_bytes["optimizer_states"] == pytest.approx(4 * P)  # two bf16 states
    assert kahan.breakdown_bytes["optimizer_states"] == pytest.approx(6 * P)  # + the bf16 compensation buffer
    assert Precision.BF16_SR.needs == "torchao" and Precision.BF16_KAHAN.needs == "torch-optimi"
    ranked = recommend_train(m, hw, seq=2048, tokens_per_step=32768, top=100)
    assert {c.precision for c in ranked} >= {"bf16-kahan", "bf16-sr", "bf16-master", "amp-bf16"}
    assert all(c.optimizer == "adamw" for c in ranked if c.precision in ("bf16-kahan", "bf16-sr", "bf16-master"))
    assert all(c.needs for c in ranked if c.precision in ("bf16-kahan", "bf16-sr"))
