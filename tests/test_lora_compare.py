"""`compare train --lora-r` (explain/lora_compare.py): per card the longest sequence, the fastest fit at --seq,
GPU-hours and cost of a token budget; the numbers are the search's and the price table's."""

from __future__ import annotations

import json

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_search import longest_seq, rank_configs
from gpuscope.explain.lora_compare import compare_lora, token_budget
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model
from gpuscope.specs.prices import price_for

M8 = load_model("llama-3.1-8b")
CARDS = ("rtx4090", "rtx3090", "l40s", "a100", "h100", "h200")
# The RTX A6000's datasheet figures as a user TOML: the catalog's entry must plan the same fit
A6000 = """name = "NVIDIA RTX A6000"
vendor = "nvidia"
memory_gb = 48
memory_bw_gbs = 768
tdp_w = 300
host_interface = "PCIe 4.0 x16"
source = "NVIDIA RTX A6000 datasheet: 48 GB GDDR6, 768 GB/s, 300 W; BF16 tensor 154.8 TFLOPS dense"
[peak_tflops]
bf16 = 154.8
fp16 = 154.8
fp32 = 38.7
"""


def test_cards_agree_with_the_search_and_the_prices():
    gpus = [load_hardware(g) for g in CARDS[:2] + CARDS[3:5] + CARDS[-1:]]
    c = compare_lora(M8, gpus, r=16, qlora=True, seq=2048, tokens=1e8)
    assert [x.hardware for x in c.cards] == [g.key for g in gpus] and c.trainable_params == lora_shape(M8, 16).trainable
    for card, hw in zip(c.cards, gpus):
        best = rank_configs(M8, hw, r=16, qlora=True, seq=2048, top=1)[0]
        assert card.best["tokens_per_s"] == best.tokens_per_s
        assert card.longest["seq"] == longest_seq(M8, hw, lora_shape(M8, 16), qlora=True).seq
        assert card.budget["gpu_hours"] == pytest.approx(1e8 / best.tokens_per_s / 3600)
        cloud = price_for(hw).cloud
        assert card.budget["cloud_usd"] == (pytest.approx(card.budget["gpu_hours"] * cloud.value) if cloud else None)
    longest = {x.hardware: x.longest["seq"] for x in c.cards}
    assert longest["nvidia_rtx_4090"] < longest["nvidia_h100_sxm"] < longest["nvidia_h200_sxm"]
    hours = {x.hardware: x.budget["gpu_hours"] for x in c.cards}
    assert hours["nvidia_h100_sxm"] < hours["nvidia_a100_80gb_sxm"] < hours["nvidia_rtx_3090"]


def test_qlora_reaches_further_than_lora_on_every_card():
    gpus = [load_hardware(g) for g in ("rtx3090", "l40s", "h200")]
    lora = compare_lora(M8, gpus, r=16, seq=2048)
    q = compare_lora(M8, gpus, r=16, qlora=True, seq=2048)
    for a, b in zip(lora.cards, q.cards):
        assert b.longest["seq"] > a.longest["seq"]


def test_token_budget_energy():
    hw = load_hardware("h100")
    b = token_budget(3.6e6, 1000.0, hw, usd_per_kwh=0.1, pue=1.0)
    assert b["gpu_hours"] == pytest.approx(1.0) and b["energy_kwh"] == pytest.approx(hw.tdp_w / 1000)
    assert b["electricity_usd"] == pytest.approx(hw.tdp_w / 1000 * 0.1)


def _cli(*args):
    from typer.testing import CliRunner

    import gpuscope.cli as cli

    cli._register()
    return CliRunner().invoke(cli.app, ["compare", "train", *args])


def test_cli_compare_train_lora(tmp_path):
    """The issue's command as written (the catalog's a6000), and the datasheet TOML planning the same fit."""
    r = _cli("--lora-r", "16", "--gpu", "4090,3090,a6000,l40s,a100,h100,h200", "--model", "llama-3.1-8b",
             "--tokens", "1e8", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["schema"] == "gpuscope.compare.lora/1" and len(d["cards"]) == 7 and d["tokens"] == 1e8
    a6000 = d["cards"][2]
    assert a6000["name"] == "NVIDIA RTX A6000 48GB" and a6000["longest"]["seq"] > d["cards"][0]["longest"]["seq"]
    toml = tmp_path / "a6000.toml"
    toml.write_text(A6000)
    u = json.loads(_cli("--lora-r", "16", "--gpu", str(toml), "--model", "llama-3.1-8b", "--json").output)
    assert u["cards"][0]["longest"]["seq"] == a6000["longest"]["seq"]
    t = _cli("--lora-r", "16", "--qlora", "--gpu", "4090,h200", "--model", "llama-3.1-8b")
    assert t.exit_code == 0 and "QLoRA r16" in t.output and "RTX 4090" in t.output
    md = _cli("--lora-r", "16", "--gpu", "4090", "--model", "llama-3.1-8b", "--markdown")
    assert md.exit_code == 0 and md.output.count("|") > 20


@pytest.mark.parametrize("args, words", [
    (("--qlora",), "need --lora-r"),
    (("--lora-r", "16", "--tokens", "0"), "--tokens must be a positive number"),
    (("--lora-r", "16", "--optimizer", "sgd"), "is not searched with LoRA"),
])
def test_cli_compare_lora_bad_input(args, words, capsys):
    from gpuscope.cli import main

    with pytest.raises(SystemExit) as e:
        main(["compare", "train", "--model", "llama-3.2-1b", "--gpu", "h100", *args])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and words in err and "\n" not in err
