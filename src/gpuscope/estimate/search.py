"""Layout search: every TP x PP x DP x ZeRO x micro-batch x recompute (x SP, x interleaving, x EP for MoE) layout
of N GPUs,
ranked by tokens per second among those whose busiest GPU fits.

The per-layout estimate is parallel.estimate_parallel; its expensive parts (per-layer costs for a given TP degree
and micro-batch, stage parameter counts, collective times) are cached, so a search mostly adds numbers: the
benchmark `python scripts/bench_search.py` prints layouts per second.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.estimate.parallel import Layout, ParallelEstimate, Planner
from gpuscope.specs.axes import Recompute
from gpuscope.specs.model import ModelSpec


@dataclass(frozen=True)
class SearchResult:
    ranked: list[ParallelEstimate]  # fitting layouts, fastest first
    considered: int  # layouts estimated
    rejected_memory: int  # estimated but over the device memory


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_layouts(m: ModelSpec, num_gpus: int, global_batch: int, gpus_per_node: int = 8,
                      micro_batches=(1, 2, 4, 8), recomputes=Recompute.values(),
                      zeros=(0, 1, 2, 3), virtuals=(1, 2, 4)):
    """Yield the layouts worth estimating (TP within a node and dividing the heads; PP at most the layers)."""
    for tp in _divisors(num_gpus):
        if tp > gpus_per_node or m.num_heads % tp:
            continue
        for pp in _divisors(num_gpus // tp):
            if pp > m.num_layers:
                continue
            dp = num_gpus // (tp * pp)
            eps = [e for e in _divisors(dp) if m.moe.num_experts % e == 0] if m.is_moe else [1]
            for mb in micro_batches:
                if global_batch % (dp * mb):
                    continue
                for rc in recomputes:
                    for sp in ((False, True) if tp > 1 else (False,)):
                        for zero in zeros:
                            if dp == 1 and zero:
                                continue
                            for v in (virtuals if pp > 1 else (1,)):
                                if pp * v > m.num_layers:
                                    continue
                                for ep in eps:
                                    yield Layout(tp=tp, pp=pp, dp=dp, micro_batch=mb, global_batch=global_batch,
                                                 zero=zero, sp=sp, virtual=v, recompute=rc, ep=ep)


def search_layouts(m: ModelSpec, hw, num_gpus: int, global_batch: int, seq: int | None = None,
                   gpus_per_node: int | None = None, attention: str = "flash", top: int = 10,
                   **space) -> SearchResult:
    if num_gpus <= 0 or global_batch <= 0:
        raise UserError("--num-gpus and --global-batch must be positive integers.")
    gpn = gpus_per_node or min(8, num_gpus)
    planner = Planner(m, hw, seq, num_gpus, gpn, attention=attention)
    fitting: list[ParallelEstimate] = []
    considered = rejected = 0
    for lay in candidate_layouts(planner.m, num_gpus, global_batch, gpn, **space):
        est = planner.estimate(lay, check=False)  # candidate_layouts yields valid layouts only
        considered += 1
        if est.fits:
            fitting.append(est)
        else:
            rejected += 1
    if considered == 0:
        raise UserError(f"no layout of {num_gpus} GPUs divides the model ({m.num_heads} heads, {m.num_layers} "
                        f"layers) and the global batch ({global_batch}).")
    fitting.sort(key=lambda e: -e.tokens_per_s)
    return SearchResult(ranked=fitting[:top], considered=considered, rejected_memory=rejected)
