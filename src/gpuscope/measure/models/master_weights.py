"""Precision ``bf16-master``: bf16 compute weights, fp32 master weights and AdamW states in the optimizer step.

What it keeps, per trainable parameter: the model's bf16 weight (2 bytes) and its bf16 gradient (2), an fp32 master
copy (4) and AdamW's fp32 exp_avg and exp_avg_sq (8): 16 bytes, as AMP's fp32 weights + fp32 gradients + states,
but the forward and backward run on bf16 weights without autocast (no per-forward weight casts, bf16 activations
and residual stream: pure bf16's speed and memory for activations). This is what FSDP2's
``MixedPrecisionPolicy(param_dtype=bf16)`` does on one GPU and what Megatron-LM's distributed optimizer does
with ``--bf16`` (fp32 "main params"), without the sharding.

One step (:class:`MasterAdamW`), bucket by bucket (estimate/memory_train.MASTER_BUCKET_NUMEL elements, or one
tensor larger than that): the bucket's bf16 gradients cast to fp32 onto its masters (``master.grad``), torch's
AdamW over the bucket's masters (fused on CUDA: one kernel per bucket, in place), the masters rounded to nearest
bf16 back into the model's weights, the fp32 gradients dropped. The only temporary is one bucket's fp32 gradients.
An update smaller than half a bf16 ulp of its weight accumulates in the master until it shows in the bf16 copy,
which is what pure bf16 AdamW loses (specs/axes.NUMERICS).

Gradients accumulated over micro-batches (``--grad-accum``) are summed in bf16, in the model's ``.grad``, before
the step sees them (autograd accumulates in the parameter's dtype); Megatron keeps an fp32 gradient buffer for that
(+4 bytes a parameter), which a 7B model on one 141 GB GPU has no room for.
"""

from __future__ import annotations

import torch

from gpuscope.estimate.memory_train import MASTER_BUCKET_NUMEL
from gpuscope.specs.axes import Precision


def buckets(params: list, numel: int = MASTER_BUCKET_NUMEL) -> list[list]:
    """Consecutive parameters grouped into buckets of at most ``numel`` elements; a larger tensor is a bucket of its
    own. Order is kept (the model's parameter order)."""
    out: list[list] = []
    size = 0
    for p in params:
        if not out or size + p.numel() > numel:
            out.append([])
            size = 0
        out[-1].append(p)
        size += p.numel()
    return out


class MasterAdamW:
    """AdamW over fp32 masters of bf16 parameters (module docstring). Quacks like the torch optimizer the training
    loops use: ``step()``, ``zero_grad(set_to_none=True)``, ``state`` (master -> its AdamW state) and
    ``param_groups``."""

    def __init__(self, params, lr: float = 1e-4, fused: bool = False, bucket_numel: int = MASTER_BUCKET_NUMEL,
                 **adamw):
        self.params = [p for p in params if p.requires_grad]
        self.bucket_numel = bucket_numel
        self.groups = []  # (model params, their fp32 masters, the AdamW over those masters)
        for bucket in buckets(self.params, bucket_numel):
            masters = [p.detach().float() for p in bucket]  # fp32 copies (a copy even for an fp32 parameter)
            for m in masters:
                m.requires_grad_(True)
            self.groups.append((bucket, masters, torch.optim.AdamW(masters, lr=lr, fused=fused, **adamw)))

    @property
    def state(self) -> dict:
        return {m: st for _, _, opt in self.groups for m, st in opt.state.items()}

    @property
    def param_groups(self) -> list:
        return [g for _, _, opt in self.groups for g in opt.param_groups]

    def master_bytes(self) -> int:
        return sum(m.numel() * m.element_size() for _, masters, _ in self.groups for m in masters)

    @torch.no_grad()
    def step(self) -> None:
        for bucket, masters, opt in self.groups:
            live = False
            for p, m in zip(bucket, masters):
                m.grad = None if p.grad is None else p.grad.float()
                live = live or m.grad is not None
            if not live:
                continue
            opt.step()
            for p, m in zip(bucket, masters):
                if m.grad is not None:
                    p.copy_(m)  # round to nearest bf16
                    m.grad = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


def make_optimizer(params, precision: str, fused: bool, lr: float = 1e-4):
    """The training loop's optimizer: :class:`MasterAdamW` for bf16-master, else torch's AdamW over the model's own
    parameters (in their dtype); returns (optimizer, the result fields that say which)."""
    params = [p for p in params if p.requires_grad]
    if Precision.parse(precision, "precision") is Precision.BF16_MASTER:
        opt = MasterAdamW(params, lr=lr, fused=fused)
        return opt, {"optimizer_impl": "master-adamw (fp32 masters, bucketed)", "master_bytes": opt.master_bytes(),
                     "master_bucket_numel": opt.bucket_numel, "master_buckets": len(opt.groups)}
    return torch.optim.AdamW(params, lr=lr, fused=fused), {"optimizer_impl": "torch.optim.AdamW"}
