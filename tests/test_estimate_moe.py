"""estimate/moe.py: grouped_mm's row units and the expected padded rows under Binomial routing, the dispatch bytes,
and how the MoE op list uses them (prefill: grouped_mm with padding and dispatch; generate's decode: batched_mm)."""

from __future__ import annotations

import math

import pytest

from gpuscope.estimate import moe
from gpuscope.estimate.infer import estimate_infer
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model


def _binomial_units(tokens: int, p: float, unit: int) -> float:
    """E[ceil(r / unit)] by summing the Binomial pmf exactly (log space)."""
    total = 0.0
    for r in range(tokens + 1):
        logp = (math.lgamma(tokens + 1) - math.lgamma(r + 1) - math.lgamma(tokens - r + 1)
                + (r * math.log(p) if r else 0.0) + ((tokens - r) * math.log1p(-p) if tokens - r else 0.0))
        total += math.exp(logp) * math.ceil(r / unit)
    return total


def test_row_unit_follows_torch_grouped_mm_tile_choice():
    assert moe.row_unit(2048, 8, 28672) == 256  # 256 rows a group: 128x256 tiles, 2x1 clusters
    assert moe.row_unit(1024, 8, 28672) == 128  # 128 rows a group: the small kernel's 64-row tiles, 2x1 clusters
    assert moe.row_unit(4096, 8, 128) == 128  # a narrow output: the small kernel
    assert moe.row_unit(16384, 60, 2816) == 256


@pytest.mark.parametrize("tokens,k,experts,unit", [(1024, 2, 8, 256), (4096, 2, 8, 256), (768, 2, 8, 256),
                                                   (1024, 4, 60, 64), (300, 6, 64, 64), (5, 2, 8, 64)])
def test_expected_units_match_the_exact_binomial_sum(tokens, k, experts, unit):
    exact = _binomial_units(tokens, k / experts, unit)
    assert moe.expected_units(tokens, k, experts, unit) == pytest.approx(exact, rel=0.02, abs=0.01)


def test_padding_is_half_a_unit_an_expert_at_power_of_two_sizes_and_none_for_a_measured_aligned_split():
    rows = 1024 * 2
    assert moe.padded_rows(1024, 2, 8, 28672) / rows == pytest.approx(1.5, abs=0.02)
    assert moe.padded_rows(4096, 2, 8, 28672) / (4096 * 2) == pytest.approx(1.125, abs=0.01)
    assert moe.measured_padded_rows([256] * 8, 28672) == 2048
    assert moe.measured_padded_rows([257, 255] * 4, 28672) == 3072  # 257 rows cost two units
    assert moe.measured_padded_rows([384, 128] * 4, 28672) == 3072


def test_dispatch_bytes_scale_with_routed_rows():
    a = moe.dispatch_bytes(1024, 2, 4096, 14336, 2.0)
    b = moe.dispatch_bytes(2048, 2, 4096, 14336, 2.0)
    assert b[0] == pytest.approx(2 * a[0]) and b[1] == pytest.approx(2 * a[1])
    s = 2048  # the 2026-11-29 table's fills and SiLU: 9.66 + 3.76 GB over 32 layers
    assert a[1] * 32 == pytest.approx((s * (8 * 4096 + 8 * 14336) * 32 + s * 4 * 14336 * 32), rel=1e-9)


def test_prefill_prices_grouped_mm_padding_and_dispatch_but_generate_decode_keeps_batched_mm():
    m, hw = load_model("mixtral-8x7b"), load_hardware("h200")
    e = estimate_infer(m, hw, batch=1, prompt=1024, gen=4, engine="eager", with_ops=True)
    pre = {o["name"]: o for o in e.ops if o["phase"] == "prefill"}
    dec = {o["name"] for o in e.ops if o["phase"] == "decode"}
    assert {"experts_dispatch", "experts_dispatch_strided"} <= set(pre)
    assert not {"experts_dispatch", "experts_dispatch_strided"} & dec
    # the grouped GEMMs' FLOPs include the padded rows (1.5x at 256 rows an expert)
    useful = 2.0 * 1024 * 2 * 3 * 4096 * 14336 * 32
    assert pre["experts"]["flops"] == pytest.approx(1.5 * useful, rel=0.02)
    assert pre["experts_dispatch"]["kernels"] == moe.DISPATCH_KERNELS * 32
    assert pre["experts_dispatch_strided"]["kernels"] == 0


def test_grouped_weights_stream_once_per_row_unit():
    """One unit an expert (Qwen1.5-MoE-like b1 p1024: 68 rows an expert): every expert's weights once, over the
    stream efficiency; 1.5 units an expert (Mixtral b1 p1024): 1.5x; at the large unit the weights' time is the
    compute's within 10% (the ridge), at the small unit half of it or less (weight-bound)."""
    h, w, w_b = 2048, 1408, 2.0
    once = 60 * 3 * h * w * w_b
    assert moe.grouped_weight_bytes(1024, 4, 60, h, w, 3, w_b) == pytest.approx(
        once / moe.GROUPED_STREAM_EFFICIENCY, rel=0.01)
    mix = moe.grouped_weight_bytes(1024, 2, 8, 4096, 14336, 3, w_b)
    assert mix == pytest.approx(1.49 * 8 * 3 * 4096 * 14336 * w_b / moe.GROUPED_STREAM_EFFICIENCY, rel=0.01)
    hw = load_hardware("h200")
    flop_per_s, byte_per_s = hw.achievable_tflops("bf16") * 1e12, hw.achievable_bw_gbs() * 1e9
    large = moe.padded_rows(4096, 2, 8, 2 * 14336)  # units of 256
    t_c = 2.0 * 4096 * 14336 * 3 * large / flop_per_s
    t_w = moe.grouped_weight_bytes(4096, 2, 8, 4096, 14336, 3, w_b) / byte_per_s
    assert t_w == pytest.approx(t_c, rel=0.10)
    small = moe.padded_rows(1024, 4, 60, 2 * w)  # units of 128
    assert 2.0 * h * w * 3 * small / flop_per_s < 0.7 * moe.grouped_weight_bytes(1024, 4, 60, h, w, 3, w_b) / byte_per_s


def test_small_prefill_of_a_fine_grained_moe_is_weight_bound():
    m, hw = load_model("qwen1.5-moe-a2.7b"), load_hardware("h200")
    e = estimate_infer(m, hw, batch=1, prompt=1024, gen=2, engine="eager", with_ops=True)
    (op,) = [o for o in e.ops if o["phase"] == "prefill" and o["name"] == "experts"]
    assert op["bound"] == "memory"


def test_fp32_routing_weights_promote_the_weighted_rows():
    """Mixtral's and DeepSeek's routers hand back fp32 weights: the multiply writes the routed rows in fp32 at the
    strided rate (2h read + 4h written a row), the sum and a cast back follow; Qwen2-MoE's are bf16."""
    s, h, w, k = 2048, 4096, 14336, 2
    plain16, strided16 = moe.dispatch_bytes(1024, k, h, w, 2.0)
    plain32, strided32 = moe.dispatch_bytes(1024, k, h, w, 2.0, fp32_weights=True)
    assert strided32 - strided16 == pytest.approx(s * 6 * h)
    assert plain32 - plain16 == pytest.approx(s * (-(4 + 2 + 2 / k) * h + 4 * h + 10 * h / k))
    hw = load_hardware("h200")

    def dispatch(name):
        e = estimate_infer(load_model(name), hw, batch=1, prompt=1024, gen=2, engine="eager", with_ops=True)
        return {o["name"]: o["bytes"] for o in e.ops if o["phase"] == "prefill"}["experts_dispatch_strided"]

    mix = load_model("mixtral-8x7b")
    strided = moe.dispatch_bytes(1024, 2, mix.hidden_size, mix.moe.expert_intermediate_size, 2.0, True)[1]
    assert dispatch("mixtral-8x7b") == pytest.approx(strided * (moe.STRIDED_SLOWDOWN - 1) * len(mix.moe_layers))
    assert "qwen2_moe" not in moe.FP32_ROUTING_FAMILIES and "mixtral" in moe.FP32_ROUTING_FAMILIES
