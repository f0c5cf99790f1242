"""Routed experts as transformers 5 runs them at prefill on a GPU (``grouped_mm`` experts): the rows the grouped
GEMMs compute, padded to the kernel's row unit per expert, and the expert weights they stream.

torch._grouped_mm (aten/src/ATen/native/cuda/GroupMM.cu, SM90) picks its CUTLASS kernel by the mean rows per group
M = rows / experts and the output width N: M <= 128 or N <= 128: 64x128x128 tiles (ping-pong), else 128x256x64
tiles; both on 2x1x1 clusters (ClusterShape is fixed at <2, 1, 1>: two CTAs along M share each B panel by TMA
multicast). CUTLASS's grouped tile scheduler gives every group whole clusters, so an expert's r rows cost
ceil(r / U) x U rows of tensor-core work, U = 2 x the tile's M: 128 (small) or 256 (large): a group of 257 rows
costs as much as one of 512. Mixtral-8x7B's 2,048 prefill rows on an H200 (research/results/2026-11-29-h200-d/
moe_routing.json: each of 32 layers' measured rows per expert, timed with torch._grouped_mm against 8 equal groups
of 256): the gate_up time over the equal groups' time is the units' ratio sum_e ceil(r_e / 256) / 8 within
3.6% +- 3.1% (per 128 rows: 22% +- 7% off), down within 5.7% +- 11%; the 2026-12-02-h200-c kernel tables
(Mixtral and Qwen1.5-MoE, random and balanced routers, 18 points) within 8% at the catalog's GEMM rate.

Each unit (cluster) streams its expert's whole weight matrix (its B panels, for every N tile): a unit of U rows does
2 U FLOPs per weight element of 2 bytes, U FLOP/byte, so at U = 256 it sits at the H200's ridge (737 TFLOP/s over
the stream rate below: 248) and at U = 128 it is bound by the weights: grouped_weight_bytes.

Rows per expert when the router's assignment is not known (a planner input has no router): each of T tokens picks
k of E experts, so an expert's rows r ~ Binomial(T, k/E) (a load-balanced router in expectation, as trained routers
are pushed to be); E[ceil(r / U)] = sum_{j>=0} P(r > j U), with P(r > 0) = 1 - (1 - k/E)^T exactly and the normal
approximation (continuity-corrected) above. At T k / E a multiple of U (every power-of-two Mixtral prefill from 256
tokens) that is half a unit per expert above the rows themselves.
"""

from __future__ import annotations

import math

SMALL_UNIT, LARGE_UNIT = 128, 256  # rows per 2x1 cluster of torch._grouped_mm's two SM90 kernels (module docstring)
# The grouped GEMM's weight stream against the device's copy rate, where the units are weight-bound (small tiles).
# Set on Qwen1.5-MoE-A2.7B b1 p1024 at 4 layers with the balanced router (research/results/2026-12-02-h200-c,
# moe_generate.md: 68 rows an expert, one 128-row unit each, 60 experts x 17.3 MB x 4 layers = 4.15 GB in 1.41 ms:
# 2.94 TB/s, 0.71 of 4,128 GB/s); the random router of the same case read 0.74 (287 units, 4.97 GB in 1.62 ms).
# Checked on Qwen1.5-MoE and DeepSeek-V2-Lite at b1 p512 (34 and 48 rows an expert; random and balanced routers):
# the units' weights at this rate within 3% of the grouped GEMMs' time.
GROUPED_STREAM_EFFICIENCY = 0.72


def row_unit(rows: float, experts: int, n: int) -> int:
    """The grouped GEMM's row unit for ``rows`` routed rows over ``experts`` groups and an output width ``n``."""
    return SMALL_UNIT if (rows / max(1, experts) <= 128 or n <= 128) else LARGE_UNIT


def expected_units(tokens: int, k: int, experts: int, unit: int) -> float:
    """E[ceil(r / unit)] for one expert, r ~ Binomial(tokens, k / experts) (module docstring)."""
    p = min(1.0, k / experts)
    hit = 1.0 - (1.0 - p) ** tokens
    mu = tokens * p
    sigma = math.sqrt(max(tokens * p * (1.0 - p), 1e-12))
    total, j = hit, 1
    while True:
        z = (j * unit + 0.5 - mu) / sigma
        if z > 8.0:
            break
        total += 0.5 * math.erfc(z / math.sqrt(2.0))
        j += 1
    return total


def padded_rows(tokens: int, k: int, experts: int, n: int) -> float:
    """Rows the grouped GEMM computes over all experts: experts x unit x E[ceil(r / unit)]."""
    unit = row_unit(tokens * k, experts, n)
    return experts * unit * expected_units(tokens, k, experts, unit)


def grouped_weight_bytes(tokens: int, k: int, experts: int, h: int, width: int, n_mats: int, w_b: float) -> float:
    """Expert weight bytes the two grouped GEMMs stream (module docstring): gate_up's (n_mats - 1) h x width and
    down's h x width matrices once per row unit of their expert, in copy-rate bytes (over
    GROUPED_STREAM_EFFICIENCY), for Binomial rows."""
    up_n = (n_mats - 1) * width
    units_up = experts * expected_units(tokens, k, experts, row_unit(tokens * k, experts, up_n))
    units_down = experts * expected_units(tokens, k, experts, row_unit(tokens * k, experts, h))
    return (units_up * up_n + units_down * width) * h * w_b / GROUPED_STREAM_EFFICIENCY


def measured_padded_rows(rows_per_expert: list[int], n: int) -> int:
    """The same for a measured assignment (rows per expert of one layer)."""
    unit = row_unit(sum(rows_per_expert), len(rows_per_expert), n)
    return sum(unit * math.ceil(r / unit) for r in rows_per_expert)


# ---- the routed rows' elementwise kernels (dispatch) -----------------------------------------------------------
# transformers 5.17's grouped_mm_experts_forward, per MoE layer over S = T x k routed rows (bytes a row at 16 bits):
#   strided (TensorIterator's non-vectorised elementwise_kernel<128, 4>): masked_fill of the sentinel rows before
#     gate_up (in place, 4h), after it (2w in, 2w out: 8w) and after down (4h), then SiLU on the gate half of
#     gate_up's output (a strided view: 4w): 8h + 12w;
#   plain (the elementwise rate, roofline.ELEMENTWISE_BW_FRACTION): the gather of the routed rows and the inverse
#     permutation's (4h each), act x up (6w), x routing weight (4h), the sum over the k copies (2h in, 2h / k out):
#     14h + 6w + 2h / k.
# Set on the H200 kernel table of Mixtral-8x7B's b1 p1024 prefill (research/results/2026-11-29-h200-d,
# doctor_mixtral_prefill.json; S = 2,048, h 4,096, w 14,336): the 96 masked fills moved 9.66 GB in 6.48 ms
# (1.49 TB/s), the 32 SiLUs 3.76 GB in 2.66 ms (1.41 TB/s): 1.45 TB/s, 0.351 of the 4,128 GB/s copy rate
# (STRIDED_SLOWDOWN: the elementwise rate over it). Kernels: the forward ran 2,285, the planner's layers without
# these 2,033: 7.9 a layer more than its 22 for the router and experts, so 28 here beside the two grouped GEMMs
# (sort, gathers, histc, cumsum, the fills, the multiplies, the sum).
# The routing-weight multiply and the top-k sum as above hold where the router hands back weights in the hidden
# dtype (Qwen2-MoE, Qwen3-MoE, OLMoE: ``router_top_value.to(router_logits.dtype)``). Where they stay fp32
# (FP32_ROUTING_FAMILIES: Mixtral's softmax over ``router_logits.float()``, DeepSeek-V2/V3's fp32 router) the
# multiply promotes the routed rows to fp32 (read 2h, write 4h, TensorIterator's casting elementwise_kernel<128, 4>:
# the strided rate), the sum reads 4h and writes 4h / k, and a cast back reads 4h / k and writes 2h / k. Read from
# the same Mixtral table (its 32 fp32 multiplies: 1.09 ms, 1.11 so priced; the bf16 ones are rotary, norms and
# act x up). Checked on the 2026-12-02-h200-c tables: Mixtral's fp32 multiplies (135-1,206 us a 4-layer forward)
# priced within -8% to +3%, DeepSeek-V2-Lite's (76-647 us) within -4% to +3%, and none in Qwen1.5-MoE's.
STRIDED_ROW_BYTES = {"h": 8.0, "w": 12.0}
PLAIN_ROW_BYTES = {"h": 14.0, "w": 6.0, "h_over_k": 2.0}
FP32_ROUTING_FAMILIES = ("mixtral", "deepseek_v2", "deepseek_v3")
DISPATCH_KERNELS = 28
STRIDED_SLOWDOWN = 0.63 / (1.45e12 / 4128e9)


def dispatch_bytes(tokens: int, k: int, h: int, w: int, act_b: float, fp32_weights: bool = False
                   ) -> tuple[float, float]:
    """(plain, strided) bytes of one layer's dispatch kernels over tokens x k routed rows; ``fp32_weights``: the
    router's top-k weights stay fp32 (see FP32_ROUTING_FAMILIES)."""
    s = tokens * k
    plain = s * (PLAIN_ROW_BYTES["h"] * h + PLAIN_ROW_BYTES["w"] * w + PLAIN_ROW_BYTES["h_over_k"] * h / k) \
        * act_b / 2.0
    strided = s * (STRIDED_ROW_BYTES["h"] * h + STRIDED_ROW_BYTES["w"] * w) * act_b / 2.0
    if fp32_weights:  # the bf16 multiply (4h) and sum (2h + 2h / k) become fp32 ones and a cast
        plain += s * (-(4.0 + 2.0 + 2.0 / k) * h * act_b / 2.0 + 4.0 * h + (4.0 + 4.0 + act_b) * h / k)
        strided += s * (act_b + 4.0) * h
    return plain, strided
