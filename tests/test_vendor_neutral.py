"""Advice that reads right for every vendor: graphs and the runtime context named per platform, what is assumed
from the CUDA measurements said beside each estimate, one purchase figure per card (with its source, a cloud-rate
equivalent where none is published) for advise, compare and the hardware table, and shares never above 100%."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpuscope.errors import UserError
from gpuscope.estimate.infer import estimate_infer
from gpuscope.estimate.pipeline_schedule import bubble_share
from gpuscope.estimate.platform import OTHER, PLATFORMS, platform_for
from gpuscope.estimate.train import estimate_train
from gpuscope.report.estimate_view import render
from gpuscope.specs.hardware import list_hardware, load_hardware
from gpuscope.specs.models import load_model
from gpuscope.specs.prices import cloud_equivalent_hours, is_cloud_equivalent, load_prices, price_for


def _text(est) -> str:
    buf = io.StringIO()
    render(est, Console(file=buf, width=400))
    return buf.getvalue()


@pytest.mark.parametrize("gpu, context, graphs, assumed", [
    ("h100", "+ CUDA context", "CUDA graphs", None),
    ("mi300x", "+ HIP runtime context", "HIP graphs", "ROCm:"),
    ("a770", "+ Level Zero context", "XPU graphs", "XPU:"),
    ("gaudi3", "+ HPU runtime context", "HPU graphs", "Gaudi:"),
])
def test_infer_names_the_platform_and_says_what_is_assumed(gpu, context, graphs, assumed):
    hw = load_hardware(gpu)
    est = estimate_infer(load_model("llama-3.2-1b"), hw, batch=1, prompt=512, gen=64, dtype="bf16")
    text = _text(est)
    assert context in text and "cuda context" not in text
    assert graphs in text or graphs in " ".join(est.suggestions + est.assumptions), text
    others = {p.graphs for p in PLATFORMS.values()} - {graphs}
    assert not any(g in text for g in others), text  # no other vendor's graphs in this card's advice
    said = [a for a in est.assumptions if "assumed" in a]
    if assumed is None:
        assert not said  # measured on this platform: nothing marked assumed
    else:
        assert said and said[0].startswith(assumed) and "not measured" in said[0]
    assert "runtime_context" in est.runtime_overhead_bytes  # one JSON key for every vendor


def test_training_says_its_host_costs_are_assumed_off_cuda():
    m = load_model("llama-3.2-1b")
    rocm = estimate_train(m, load_hardware("mi300x"), micro_batch=1, seq=1024)
    cuda = estimate_train(m, load_hardware("h100"), micro_batch=1, seq=1024)
    assert any(a.startswith("ROCm:") and "assumed" in a for a in rocm.assumptions)
    assert not any("assumed" in a for a in cuda.assumptions)


def test_every_catalog_vendor_has_a_platform_and_unknown_ones_are_all_assumed():
    for hw in list_hardware():
        p = platform_for(hw)
        assert p is not OTHER, hw.vendor
        assert p.to_dict()["host_costs"] == ("measured" if hw.vendor == "NVIDIA" else "assumed")
    assert not OTHER.measured and "assumed" in OTHER.assumed


def test_every_datacenter_card_with_a_price_or_rate_has_one_purchase_figure_with_its_source():
    prices = load_prices()
    for hw in list_hardware():
        entry = price_for(hw, prices)
        if entry.purchase is None:  # neither a purchase price nor a cloud rate: said by advise, not made up
            assert entry.cloud is None
            continue
        assert entry.purchase.value > 0 and entry.purchase.source
        if is_cloud_equivalent(entry.purchase):
            assert entry.purchase.value == pytest.approx(entry.cloud.value * cloud_equivalent_hours()[0])
            assert "the median purchase / on-demand-rate ratio of" in entry.purchase.source
    h100 = price_for(load_hardware("h100"), prices).purchase
    assert h100.value == 27500 and not is_cloud_equivalent(h100)
    a100 = price_for(load_hardware("a100-40gb"), prices).purchase  # a cloud rate only (AWS p4d)
    assert is_cloud_equivalent(a100) and a100.value == pytest.approx(4.10 * cloud_equivalent_hours()[0])
    # the ratio of the cards priced both ways (H100 27,500 / 12.29; A100 80GB 11,500 / 5.12): about 2,240 hours
    assert cloud_equivalent_hours()[0] == pytest.approx((27500 / 12.29 + 11500 / 5.12) / 2)


def test_the_hardware_table_and_compare_read_the_same_purchase_figure():
    from gpuscope.report.hardware_table import catalog_table, detail_table

    buf = io.StringIO()
    Console(file=buf, width=400).print(catalog_table([load_hardware("h100"), load_hardware("a100-40gb")]))
    table = buf.getvalue()
    assert "27,500" in table and "9,192~" in table  # the list/street figure, and a marked cloud-rate equivalent
    buf = io.StringIO()
    Console(file=buf, width=400).print(detail_table(load_hardware("a100-40gb")))
    assert "cloud-rate equivalent" in buf.getvalue()


def test_advise_budget_prices_a_rental_only_card_at_its_stated_cloud_equivalent(capsys):
    import json

    from gpuscope.cli import main

    main(["advise", "infer", "--model", "llama-3.2-1b", "--budget", "200000", "--json"])
    doc = json.loads(capsys.readouterr().out)
    by = {r["hardware"]: r for r in doc["ranked"] + doc["ruled_out"]}
    (budget,) = [s for s in by["nvidia_a100_40gb_pcie"]["decision_path"] if s["check"] == "budget"]
    assert budget["ok"] and "$9,192 (a cloud-rate equivalent: its on-demand rate x the rent-to-buy ratio of the cards priced both ways)" in budget["detail"]
    (h100,) = [s for s in by["nvidia_h100_sxm"]["decision_path"] if s["check"] == "budget"]
    assert "$27,500 vs" in h100["detail"]  # the figure compare and the hardware table show
    unknown = [r for r in doc["ruled_out"] if any("no purchase price or cloud rate" in s["detail"]
                                                   for s in r["decision_path"])]
    assert all(price_for(load_hardware(r["hardware"])).cloud is None for r in unknown)


def test_the_pipeline_bubble_is_a_share_of_the_step_never_above_one():
    assert bubble_share(8, 1, 1) == pytest.approx(7 / 8)  # (p - 1)/(v m) would say 700%
    assert bubble_share(4, 1, 48) == pytest.approx(3 / 51)
    assert bubble_share(8, 2, 4) == pytest.approx(3.5 / 7.5)
    assert all(0 <= bubble_share(p, v, m) < 1 for p in (1, 2, 8, 64) for v in (1, 2) for m in (1, 4, 256))


def test_superlinear_scaling_is_capped_with_its_reason():
    hw = load_hardware("h200")
    est = estimate_train(load_model("llama-3.1-8b"), hw, micro_batch=1, seq=2048, recompute="full", num_gpus=2,
                         strategy="fsdp")
    eff = est.throughput["scaling_efficiency"]
    text = _text(est)
    if eff > 1:
        assert "100% (capped: the step is" in text and f"{eff:.1%}" not in text
    else:
        assert f"{eff:.1%}" in text


def test_a_tiny_models_weight_stream_is_not_read_as_zero():
    from gpuscope.workloads import headline

    r = {"status": "ok", "kind": "infer", "ttft_s": 0.01, "tpot_s": 0.002, "decode_tokens_per_s": 500.0,
         "decode_weights_gbs": 0.0123, "e2e_s": 0.02, "e2e_repeats": 3}
    assert "weights read at 0.0123 GB/s" in headline(r)


def test_a_price_file_with_a_bad_figure_is_still_one_sentence(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text("[h200]\ncloud_usd_per_hour = 0\n")
    with pytest.raises(UserError, match="cloud_usd_per_hour"):
        load_prices(bad)
