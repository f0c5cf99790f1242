"""`tune plan --lora-r` (estimate/lora_search.py, explain/lora_tune.py): configurations that fit, ranked; the
longest sequence that fits; paged optimizers judged without their states; bad input one sentence."""

from __future__ import annotations

import json

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_search import OPTIMIZERS, configure, longest_seq, rank_configs
from gpuscope.estimate.lora_train import estimate_lora_train
from gpuscope.explain.lora_tune import tune_lora
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

M8 = load_model("llama-3.1-8b")


def test_every_ranked_config_fits_and_matches_the_planner():
    hw = load_hardware("rtx4090")
    ranked = rank_configs(M8, hw, r=16, qlora=True, seq=2048)
    assert ranked and all(c.fits and c.required_bytes <= hw.device_total_bytes for c in ranked)
    speeds = [c.tokens_per_s for c in ranked]
    assert speeds[0] >= 0.98 * max(speeds)
    shapes = [(c.seq, c.micro_batch, c.recompute) for c in ranked]
    assert len(shapes) == len(set(shapes))  # one row per shape
    c = ranked[0]
    est = estimate_lora_train(M8, hw, lora_shape(M8, 16), micro_batch=c.micro_batch, seq=2048, recompute=c.recompute,
                              optimizer=c.optimizer.removeprefix("paged-"), grad_accum=c.grad_accum, qlora=True)
    if not c.optimizer.startswith("paged-"):
        assert c.peak_bytes == est.peak_bytes_per_gpu and c.step_s == est.time["step_s"]


def test_full_recompute_is_what_lets_lora_fit_a_24gb_card():
    ranked = rank_configs(M8, load_hardware("rtx4090"), r=16, seq=2048)
    assert ranked and all(c.recompute == "full" for c in ranked)  # 8B bf16 base: no-checkpointing never fits
    h200 = rank_configs(M8, load_hardware("h200"), r=16, seq=2048)
    assert h200[0].recompute == "none" and h200[0].micro_batch >= 2


def test_paged_optimizer_fits_on_the_peak_without_its_states():
    hw, shape = load_hardware("h100"), lora_shape(M8, 64)
    plain = configure(M8, hw, shape, seq=2048, micro_batch=1, recompute="full", optimizer="adamw", qlora=False)
    paged = configure(M8, hw, shape, seq=2048, micro_batch=1, recompute="full", optimizer="paged-adamw", qlora=False)
    assert paged.paged_bytes == pytest.approx(8.0 * shape.trainable)
    assert paged.peak_bytes == pytest.approx(plain.peak_bytes - paged.paged_bytes)
    assert paged.step_s == plain.step_s  # it fits unpaged: no page traffic


def test_longest_seq_is_the_edge_of_the_fit():
    hw, shape = load_hardware("rtx4090"), lora_shape(M8, 16)
    c = longest_seq(M8, hw, shape, qlora=True)
    assert c is not None and c.fits and c.seq % 256 == 0
    nxt = configure(M8, hw, shape, seq=c.seq + 256, micro_batch=1, recompute="full", optimizer="adamw", qlora=True)
    assert not nxt.fits
    assert longest_seq(M8, hw, shape, qlora=True, cap=1024).seq == 1024
    assert longest_seq(load_model("qwen2.5-32b"), hw, lora_shape(load_model("qwen2.5-32b"), 16), qlora=False) is None


def test_tune_doc_lists_longest_per_checkpointing_and_optimizer():
    doc = tune_lora(M8, load_hardware("a100"), r=16, qlora=True)
    assert doc["schema"] == "gpuscope.tune.lora/1" and doc["lora"]["optimizers_searched"] == list(OPTIMIZERS)
    pairs = {(c["recompute"], c["optimizer"]) for c in doc["longest_seq"]}
    assert ("full", "adamw") in pairs and ("none", "adamw") in pairs
    by = {(c["recompute"], c["optimizer"]): c["seq"] for c in doc["longest_seq"]}
    assert by[("full", "adamw")] > 4 * by[("none", "adamw")]


def _cli(*args):
    from typer.testing import CliRunner

    import gpuscope.cli as cli

    cli._register()
    return CliRunner().invoke(cli.app, ["tune", "plan", *args])


def test_cli_tune_plan_lora_json_and_table():
    r = _cli("--model", "llama-3.1-8b", "--gpu", "rtx4090", "--lora-r", "16", "--qlora", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["ranked"][0]["needs"] == "bitsandbytes" and d["lora"]["qlora"] is True
    t = _cli("--model", "llama-3.1-8b", "--gpu", "rtx4090", "--lora-r", "16", "--seq", "8192")
    assert t.exit_code == 0 and "nothing fits at --seq 8192" in t.output and "longest sequence" in t.output


@pytest.mark.parametrize("args, words", [
    (("--qlora",), "need --lora-r"),
    (("--lora-r", "0"), "--lora-r must be a positive integer"),
    (("--lora-r", "8", "--lora-targets", "wq"), "no linear module named 'wq'"),
    (("--lora-r", "8", "--seq", "0"), "--seq must be a positive integer"),
])
def test_cli_tune_plan_bad_lora_input(args, words, capsys):
    from gpuscope.cli import main

    with pytest.raises(SystemExit) as e:
        main(["tune", "plan", "--model", "llama-3.2-1b", "--gpu", "h100", *args])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and words in err and "\n" not in err
