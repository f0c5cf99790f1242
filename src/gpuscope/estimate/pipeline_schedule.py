"""Pipeline-parallel schedule figures shared by the planners (estimate/parallel.py). Pure Python."""

from __future__ import annotations


def bubble_share(pp: int, virtual: int, micro_batches: int) -> float:
    """The 1F1B bubble as a share of the pipeline's time: (p - 1)/v idle slots out of m + (p - 1)/v (Narayanan et
    al. 2021 section 2.2 give (p - 1)/(v m), the bubble against the useful time, which passes 100% when m < p - 1)."""
    idle = (pp - 1) / virtual
    return idle / (max(1, micro_batches) + idle)
