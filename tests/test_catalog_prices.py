"""Catalog coverage: the RTX A6000 entry, and a sourced price or cloud rate for every datacenter card.

The packaged price table (specs/data/prices.toml) must give every card that is not a consumer card a figure of its
own, with a source and a date; where the figure is not for the card itself (a sibling's figure standing in), the
source says "proxy". `advise --budget` then rules no card out for lack of a price, and a card priced from its cloud
rate says so in its decision path.
"""

from __future__ import annotations

import json
import sys

import pytest

from gpuscope.specs.hardware import CATALOG_PATH, catalog_key_for_device, list_hardware, load_hardware
from gpuscope.specs.prices import is_cloud_equivalent, is_proxy, load_prices, price_for

GPUS_OF_ISSUE_20 = "4090,3090,a6000,l40s,a100,h100,h200"
# the cards whose price is a sibling's figure: each must say so
PROXIES = {"nvidia_h100_nvl", "nvidia_a800_80gb_sxm", "nvidia_h800_sxm", "amd_mi325x"}


if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _datacenter():
    """Catalog cards whose form factor (own or inherited through `base`) is not a consumer card's."""
    raw = tomllib.loads(CATALOG_PATH.read_text())
    form = {k: str(v.get("form_factor") or raw.get(v.get("base", ""), {}).get("form_factor", "")).lower()
            for k, v in raw.items() if isinstance(v, dict)}
    return [hw for hw in list_hardware() if "consumer" not in form[hw.key]]


# --- the RTX A6000 -------------------------------------------------------------------------------------------------
def test_the_a6000_is_in_the_catalog_with_its_datasheet_figures():
    hw = load_hardware("a6000")
    assert hw.key == "nvidia_rtx_a6000" and load_hardware("RTX A6000").key == hw.key
    assert hw.memory_bytes == 48 * 2**30 and hw.memory_bw_gbs == 768 and hw.tdp_w == 300
    # dense = the datasheet's 309.7 "Tensor performance" (FP16 with sparsity) / 2 = 84 SMs x 1024 x 1.80 GHz
    assert hw.peak("bf16") == hw.peak("fp16") == pytest.approx(309.7 / 2, abs=0.1)
    assert hw.peak("bf16") == pytest.approx(84 * 1024 * 1.80e9 / 1e12, abs=0.1)
    assert hw.peak("fp32") == 38.7 and not hw.supports("fp8")
    assert hw.sm_count == 84 and "Gen4" in hw.host_interface and hw.launch_price_usd == 4649
    assert "servethehome" in hw.source and "measured" in hw.efficiency_source
    # torch's device name finds it (a measured run on an A6000 gets its estimate), and not the Ada card's
    assert catalog_key_for_device("NVIDIA RTX A6000") == hw.key
    assert catalog_key_for_device("NVIDIA RTX 6000 Ada Generation") == "nvidia_rtx_6000_ada"
    # twice the RTX 3090's FP32-accumulate rate on the same GA102 die (GeForce runs it at half rate)
    assert hw.peak("bf16") > 2 * load_hardware("3090").peak("bf16")
    price = price_for(hw).purchase
    assert price.value == 4649 and "launch" in price.source and not is_cloud_equivalent(price)


def test_compare_train_lora_of_issue_20_reads_the_a6000(capsys):
    from gpuscope.cli import main

    main(["compare", "train", "--model", "llama-3.1-8b", "--lora-r", "16", "--gpu", GPUS_OF_ISSUE_20, "--json"])
    cards = {c["hardware"]: c for c in json.loads(capsys.readouterr().out)["cards"]}
    assert len(cards) == 7
    a6000, rtx3090, l40s = cards["nvidia_rtx_a6000"], cards["nvidia_rtx_3090"], cards["nvidia_l40s"]
    # 48 GB: the same longest sequence as the L40S (same memory), far beyond the 24 GB cards
    assert a6000["longest"]["seq"] == l40s["longest"]["seq"] > 2 * rtx3090["longest"]["seq"]
    # 2.2x the 3090's tensor peak: faster per token, slower than the L40S (2.3x its peak)
    assert rtx3090["best"]["tokens_per_s"] < a6000["best"]["tokens_per_s"] < l40s["best"]["tokens_per_s"]
    assert a6000["budget"]["gpu_hours"] > 0 and a6000["budget"]["cloud_usd"] is None  # no cloud rate entered


# --- a price for every datacenter card -----------------------------------------------------------------------------
def test_every_datacenter_card_has_a_purchase_price_or_cloud_rate_with_a_source():
    table = load_prices()
    cards = _datacenter()
    assert len(cards) >= 25
    for hw in cards:
        entry = table.get(hw.key)
        assert entry is not None, f"{hw.key}: no entry in the packaged price table"
        figures = [p for p in (entry.purchase, entry.cloud) if p is not None]
        assert figures, hw.key
        for p in figures:
            assert p.value > 0 and len(p.source) > 20 and p.date and p.date != "not given", hw.key
        assert price_for(hw, table).purchase is not None, hw.key


def test_a_figure_that_is_not_the_cards_own_says_so():
    table = load_prices()
    proxies = {hw.key for hw in list_hardware() if is_proxy(price_for(hw, table).purchase)}
    assert proxies == PROXIES
    assert not any(is_cloud_equivalent(table[k].purchase) for k in PROXIES)
    assert "no V100 PCIe 32GB price" in table["nvidia_v100_pcie"].cloud.source
    assert "weak" in table["amd_mi250x"].purchase.source
    gaudi2 = table["intel_gaudi2"].purchase
    assert gaudi2.value == 65000 / 8 and "Computex 2024" in gaudi2.source and "not re-read" in gaudi2.source


def test_advise_budget_rules_out_no_card_for_lack_of_a_price(capsys):
    from gpuscope.cli import main

    main(["advise", "infer", "--model", "llama-3.2-1b", "--budget", "200000", "--json"])
    doc = json.loads(capsys.readouterr().out)
    rows = doc["ranked"] + doc["ruled_out"]
    assert {r["hardware"] for r in rows} >= {hw.key for hw in _datacenter()}
    for r in rows:
        (budget,) = [s for s in r["decision_path"] if s["check"] == "budget"]
        assert "no purchase price" not in budget["detail"], r["hardware"]
        assert budget["ok"], (r["hardware"], budget["detail"])  # every card of the catalog is under 200k USD
        if is_cloud_equivalent(price_for(load_hardware(r["hardware"])).purchase):
            assert "(a cloud-rate equivalent" in budget["detail"], r["hardware"]


def _budget_details(capsys, *extra: str) -> dict[str, str]:
    from gpuscope.cli import main

    main(["advise", "infer", "--model", "llama-3.2-1b", "--budget", "200000", "--json", *extra])
    doc = json.loads(capsys.readouterr().out)
    return {r["hardware"]: next(s["detail"] for s in r["decision_path"] if s["check"] == "budget")
            for r in doc["ranked"] + doc["ruled_out"]}


PROXY_WORDS, EQUIVALENT_WORDS = "(a proxy: a sibling card's price", "(a cloud-rate equivalent: its on-demand rate"


def test_advise_budget_says_a_proxy_or_a_cloud_rate_equivalent_where_the_price_is_one(tmp_path, capsys):
    """The budget step's words come from the Price (prices.is_proxy, is_cloud_equivalent), for every card: the
    packaged proxies and rental-only cards, then a user's figures, whose own source decides."""
    from gpuscope.specs.prices import Price

    seen: dict[str, set] = {"proxy": set(), "equivalent": set(), "own": set()}
    for key, detail in _budget_details(capsys).items():
        purchase = price_for(load_hardware(key)).purchase
        assert Price.from_dict(purchase.to_dict()) == purchase  # what advise reads back from the comparison row
        assert (PROXY_WORDS in detail) == is_proxy(purchase), (key, detail)
        assert (EQUIVALENT_WORDS in detail) == is_cloud_equivalent(purchase), (key, detail)
        seen["proxy" if is_proxy(purchase) else "equivalent" if is_cloud_equivalent(purchase) else "own"].add(key)
    assert seen["proxy"] == PROXIES and {"nvidia_a100_40gb_pcie", "google_tpu_v5e"} <= seen["equivalent"]
    assert "nvidia_h100_sxm" in seen["own"] and Price.from_dict(None) is None
    user = tmp_path / "prices.toml"  # a user's proxy figure; a price paid whose source merely starts "cloud-rate"
    user.write_text('[h100]\npurchase_usd = 30000\npurchase_source = "proxy: the H800 SXM figure (same die)"\n'
                    'date = "2026-11"\n[h200]\npurchase_usd = 31000\n'
                    'purchase_source = "cloud-rate sheet of our reseller, bought outright"\ndate = "2026-11"\n')
    by = _budget_details(capsys, "--prices", str(user))
    assert by["nvidia_h100_sxm"].startswith(f"1 card(s) cost $30,000 {PROXY_WORDS}")
    assert by["nvidia_h200_sxm"].startswith("1 card(s) cost $31,000 vs budget")  # a price of its own
