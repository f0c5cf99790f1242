"""The train-dist worker's AdamW: which of torch's three implementations a case asks for, and which one ran.

Case keys: ``fused`` (default true; used on CUDA only) and ``foreach`` (default unset).

- ``"foreach": true`` -> ``torch.optim.AdamW(foreach=True)`` (``fused`` must not be true): torch/optim/adam.py's
  _multi_tensor_adam, whose ``_foreach_sqrt(exp_avg_sqs)`` is one temporary list the size of every local shard.
- ``"fused": true`` (the default, CUDA) -> ``AdamW(fused=True)``: one kernel per tensor group, no temporaries.
- ``"fused": false`` -> ``AdamW(fused=False)``. torch defaults to foreach only when BOTH ``fused`` and ``foreach`` are
  None (adam.py: ``if fused is None and foreach is None: _default_to_fused_or_foreach(...)``), so an explicit
  ``fused=False`` runs _single_tensor_adam, the for-loop, whose ``(exp_avg_sq.sqrt() / bias_correction2_sqrt)``
  holds two temporaries the size of the tensor being updated. This is what research/results/2026-12-02-h200-c
  call 1 measured as "fused false" (FSDP2 at world size 1: optimizer phase = rest + gradients + 2 x the largest
  fp32 tensor). FSDP2's parameters are ``nn.Parameter``s whose ``type()`` is DTensor, which
  torch.distributed.tensor appends to torch.optim.optimizer._foreach_supported_types, so the default would have
  picked foreach on CUDA; the type check is not the reason.
- ``"foreach": false`` -> ``AdamW(fused=False, foreach=False)``: the for-loop, said explicitly.

:func:`adamw_impl` reads back the implementation torch will run (``fused`` | ``foreach`` | ``for-loop``) with the
same rule, so every result names it (``optimizer_impl``).
"""

from __future__ import annotations

import torch


def adamw_kwargs(case: dict, device_type: str) -> dict:
    """torch.optim.AdamW's ``fused`` / ``foreach`` keywords for a case checked by case.check_case (module
    docstring)."""
    foreach = case.get("foreach")
    if foreach:
        return {"foreach": True}
    kw = {"fused": bool(case.get("fused", True)) and device_type == "cuda"}
    if foreach is False:
        kw["foreach"] = False
    return kw


def adamw_impl(opt: torch.optim.Optimizer) -> str:
    """The implementation torch's Adam/AdamW.step will run for ``opt``'s first group: torch/optim/adam.py's rule
    (an explicit ``fused`` or ``foreach`` is obeyed; only when both are None does it default, via
    optimizer._default_to_fused_or_foreach with use_fused=False)."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    group = opt.param_groups[0]
    fused, foreach = group.get("fused"), group.get("foreach")
    if fused:
        return "fused"
    if foreach is None and fused is None:
        foreach = _default_to_fused_or_foreach(group["params"], bool(group.get("differentiable")), False)[1]
    return "foreach" if foreach else "for-loop"


def param_types(model) -> list[str]:
    """The distinct ``type()`` names of ``model``'s parameters (FSDP2: DTensor)."""
    return sorted({type(p).__name__ for p in model.parameters()})
