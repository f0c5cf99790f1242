"""Rows per expert of a Mixture-of-Experts model, counted while it runs.

Why: transformers 5 runs the routed experts as grouped GEMMs over expert-sorted rows (torch._grouped_mm), whose
speed depends on how the router spreads the rows. On the H200, Mixtral-8x7B's random-weight router gave max/mean
rows per expert of 1.14-1.67 over its 32 layers (median 1.25; research/results/2026-11-29-h200-d/moe_routing.json);
the grouped GEMMs' time there follows each expert's rows rounded up to the kernel's 256-row units (estimate/moe.py),
not the busiest expert's share. Trained routers are pushed toward balance by their auxiliary loss; random weights
are not, and a skewed trained router makes hot experts the bottleneck.

How: a forward pre-hook on each experts module (the modules transformers calls with ``top_k_index``) adds the call's
rows per expert into a device tensor (scatter_add: no host-device sync, so a profiled run is not perturbed by
syncs); the counts are read once at the end. Per layer the call with the most rows (the prefill, in a generate)
gives the imbalance max/mean; a call's top-k rows count once per selected expert.
"""

from __future__ import annotations

import statistics

import torch


def experts_modules(model) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of each MoE experts module: transformers 5's fused 3-D expert weights (``gate_up_proj`` or
    ``up_proj``) called with the router's ``top_k_index``."""
    return [(n, m) for n, m in model.named_modules()
            if n.endswith(".experts") and (hasattr(m, "gate_up_proj") or hasattr(m, "up_proj"))
            and isinstance(getattr(m, "num_experts", None), int)]


class RoutingCounter:
    """``with RoutingCounter(model) as rc: model(...)`` then ``rc.counts`` (per layer, per call: rows per expert)
    and ``rc.summary()``. A model without experts modules counts nothing (``summary()`` is None)."""

    def __init__(self, model):
        self.modules = experts_modules(model)
        self._calls: list[tuple[int, torch.Tensor]] = []
        self._hooks = []
        self.counts: list[list[list[int]]] = []

    def __enter__(self) -> "RoutingCounter":
        for i, (_, m) in enumerate(self.modules):
            self._hooks.append(m.register_forward_pre_hook(self._hook(i, m.num_experts), with_kwargs=True))
        return self

    def _hook(self, layer: int, n_exp: int):
        def pre_hook(mod, args, kwargs):
            idx = kwargs.get("top_k_index", args[1] if len(args) > 1 else None)
            if idx is None:
                return
            flat = idx.reshape(-1).long().clamp(0, n_exp - 1)  # expert-parallel sentinels fold into the last
            c = torch.zeros(n_exp, dtype=torch.long, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))
            self._calls.append((layer, c))
        return pre_hook

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        per_layer: list[list[list[int]]] = [[] for _ in self.modules]
        for layer, c in self._calls:
            per_layer[layer].append(c.tolist())  # read once, after the run
        self._calls = []
        self.counts = per_layer

    def summary(self) -> dict | None:
        """None without MoE layers or calls; else per layer the largest call's rows per expert and its max/mean
        (``imbalance``), and the imbalance's min/median/max over layers."""
        largest = [max(calls, key=sum) for calls in self.counts if calls]
        if not largest:
            return None
        imb = [max(c) / (sum(c) / len(c)) for c in largest if sum(c)]
        if not imb:
            return None
        return {"layers": len(largest), "experts": len(largest[0]), "rows_largest_call": sum(largest[0]),
                "rows_per_expert": largest, "imbalance": imb, "imbalance_min": min(imb),
                "imbalance_median": statistics.median(imb), "imbalance_max": max(imb),
                "metric": "max / mean rows per expert of each layer's largest call (top-k rows count once per "
                          "selected expert)"}


@torch.no_grad()
def prefill_routing(model, ids: torch.Tensor, mask: torch.Tensor | None = None) -> dict | None:
    """The routing of one eager prefill forward of ``ids`` (the largest call of a generate), or None for a model
    without MoE layers (then nothing runs). A separate forward, outside any CUDA-graph capture or torch.compile
    tracing, so the counting hooks never end up inside a graph the timed runs replay."""
    if not experts_modules(model):
        return None
    with RoutingCounter(model) as rc:
        kw = {"attention_mask": mask} if mask is not None else {}
        try:
            model(input_ids=ids, use_cache=False, logits_to_keep=1, **kw)
        except TypeError:  # a model without logits_to_keep
            model(input_ids=ids, use_cache=False, **kw)
    return rc.summary()
