"""Routed experts as transformers 5 runs them at prefill on a GPU (``grouped_mm`` experts): the rows the grouped
GEMMs compute, padded to the kernel's row unit per expert.

torch._grouped_mm (aten/src/ATen/native/cuda/GroupMM.cu, SM90) picks its CUTLASS kernel by the mean rows per group
M = rows / experts and the output width N: M <= 128 or N <= 128: 64x128x128 tiles on 1x1 clusters, else 128x256x64
tiles on 2x1 clusters. CUTLASS's grouped tile scheduler gives every group whole clusters, so an expert's r rows cost
ceil(r / U) x U rows of tensor-core work, U = 64 (small) or 256 (large): a group of 257 rows costs as much as one of
512. Mixtral-8x7B's 2,048 prefill rows on an H200 (research/results/2026-11-29-h200-d/moe_routing.json: each of 32
layers' measured rows per expert, timed with torch._grouped_mm against 8 equal groups of 256): the gate_up time over
the equal groups' time is the units' ratio sum_e ceil(r_e / 256) / 8 within 3.6% +- 3.1% (per 128 rows: 22% +- 7%
off), down within 5.7% +- 11%.

Rows per expert when the router's assignment is not known (a planner input has no router): each of T tokens picks
k of E experts, so an expert's rows r ~ Binomial(T, k/E) (a load-balanced router in expectation, as trained routers
are pushed to be); E[ceil(r / U)] = sum_{j>=0} P(r > j U), with P(r > 0) = 1 - (1 - k/E)^T exactly and the normal
approximation (continuity-corrected) above. At T k / E a multiple of U (every power-of-two Mixtral prefill from 256
tokens) that is half a unit per expert above the rows themselves.
"""

from __future__ import annotations

import math

SMALL_UNIT, LARGE_UNIT = 64, 256  # rows per cluster of torch._grouped_mm's two SM90 kernels (module docstring)


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


def measured_padded_rows(rows_per_expert: list[int], n: int) -> int:
    """The same for a measured assignment (rows per expert of one layer)."""
    unit = row_unit(sum(rows_per_expert), len(rows_per_expert), n)
    return sum(unit * math.ceil(r / unit) for r in rows_per_expert)
