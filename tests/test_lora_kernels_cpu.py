"""The kernels lora_train prices per targeted Linear against what peft launches (torch.profiler, CPU activities).

One bias-free bf16 nn.Linear wrapped by ``peft.get_peft_model`` (fp32 adapters, lora_dropout 0) runs forward under
bf16 autocast and backward; the aten ops with no aten children that do work (no views, no empty tensors, no copy of
a 0-dim Python scalar, which CUDA passes as a kernel argument) are counted with and without the adapter. The second
iteration is counted (autocast and autograd warmed); its A/B gradient accumulations (``add_`` of an r x d tensor:
.grad already exists) are left out, as the planner leaves them out (one micro-batch, zero_grad(set_to_none=True)).
"""

from __future__ import annotations

import pytest

from gpuscope.estimate.lora import lora_shape
from gpuscope.estimate.lora_memory import LoraDtypes
from gpuscope.estimate.lora_train import _adapter_ops, _backward_ops
from gpuscope.specs.hf_config import spec_from_config

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

NO_KERNEL = {"aten::view", "aten::t", "aten::transpose", "aten::expand", "aten::as_strided", "aten::reshape",
             "aten::_unsafe_view", "aten::empty", "aten::empty_strided", "aten::detach", "aten::alias",
             "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select", "aten::lift_fresh",
             "aten::resolve_conj", "aten::resolve_neg", "aten::empty_like", "aten::result_type", "aten::contiguous",
             "aten::_reshape_alias", "aten::expand_as", "aten::view_as", "aten::zeros", "aten::_to_copy",
             "aten::to", "aten::is_same_size"}
D_IN, D_OUT, R, T = 256, 512, 8, 128


def _kernels(prof, r: int) -> int:
    n = 0
    for e in prof.events():
        if not e.name.startswith("aten::") or e.name in NO_KERNEL:
            continue
        if any(k.name.startswith("aten::") and k.name not in NO_KERNEL for k in e.cpu_children):
            continue
        shapes = [s for s in e.input_shapes if s]
        if not shapes:  # a 0-dim scalar's copy
            continue
        if e.name == "aten::add_" and r in shapes[0]:  # A/B gradient accumulation into an existing .grad
            continue
        n += 1
    return n


def _profiled(lora: bool) -> tuple[int, int]:
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    m = torch.nn.Sequential()
    m.add_module("lin", torch.nn.Linear(D_IN, D_OUT, bias=False))
    m = m.to(torch.bfloat16).requires_grad_(False)
    if lora:
        m = peft.get_peft_model(m, peft.LoraConfig(r=R, target_modules=["lin"], lora_dropout=0.0))
    for _ in range(2):
        x = torch.randn(T, D_IN, dtype=torch.bfloat16, requires_grad=True)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as pf:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = m(x)
        g = torch.ones_like(y)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as pb:
            y.backward(g)
    return _kernels(pf, R), _kernels(pb, R)


def test_per_target_kernels_match_peft_under_autocast():
    (f0, b0), (f1, b1) = _profiled(False), _profiled(True)
    cfg = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=1,
               num_attention_heads=4, num_key_value_heads=4, vocab_size=300, max_position_embeddings=256)
    m = spec_from_config(cfg)
    dt = LoraDtypes.of("amp-bf16")
    fwd = _adapter_ops(lora_shape(m, R, "q_proj"), T, dt)
    bwd = _backward_ops(fwd, T, dt)
    planned = sum(o.kernels for o in fwd), sum(o.kernels for o in bwd)
    assert planned == (f1 - f0, b1 - b0), f"planned {planned}, peft launched {(f1 - f0, b1 - b0)} more kernels"
