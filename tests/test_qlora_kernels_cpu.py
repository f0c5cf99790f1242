"""bitsandbytes' MatMul4Bit, counted with torch.profiler on the CPU (a tiny bf16 Linear4bit, NF4, double
quantization): beside its GEMM the forward and the backward each run the 8-bit absmax dequantisation, the offset
add and the NF4 dequantisation, the BNB_DEQUANT_KERNELS that estimate/lora_train.py prices per quantized Linear
(on CUDA past 1536 tokens the forward calls the same three through _dequant_linear_fallback)."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
bnb = pytest.importorskip("bitsandbytes")

from gpuscope.estimate.lora_train import BNB_DEQUANT_KERNELS  # noqa: E402

DEQUANT = {"bitsandbytes::dequantize_blockwise", "aten::add", "aten::add_", "bitsandbytes::dequantize_4bit"}


def _linear4bit(k=64, n=64):
    torch.manual_seed(0)
    w = torch.randn(n, k, dtype=torch.bfloat16)
    q = bnb.nn.Linear4bit(k, n, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4",
                          compress_statistics=True)
    q.weight.data = w  # a bf16 base, as transformers loads it
    q = q.to("cpu")  # Params4bit quantizes when moved to a device
    q.weight.requires_grad_(False)
    assert q.weight.quant_state.nested and q.weight.quant_state.dtype == torch.bfloat16
    return q


def _under(prof, root: str) -> Counter:
    """Ops called (at any depth) under the events whose name is ``root``."""
    out: Counter = Counter()
    for e in prof.events():
        p = e.cpu_parent
        while p is not None and p.name != root:
            p = p.cpu_parent
        if p is not None:
            out[e.name] += 1
    return out


@pytest.mark.filterwarnings("ignore")
def test_forward_and_backward_each_dequantise_the_weight_in_three_kernels():
    from torch.profiler import ProfilerActivity, profile

    q = _linear4bit()
    x = torch.randn(4, 64, dtype=torch.bfloat16, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as fwd:
        y = q(x)
    with profile(activities=[ProfilerActivity.CPU]) as bwd:
        y.backward(torch.ones_like(y))
    for prof, root in ((fwd, "MatMul4Bit"), (bwd, "MatMul4BitBackward")):
        ops = _under(prof, root)
        assert sum(c for name, c in ops.items() if name in DEQUANT) == BNB_DEQUANT_KERNELS, ops
        assert ops["aten::mm"] == 1, ops
        assert "aten::_to_copy" not in ops, ops  # the weight dequantises straight to the compute dtype
    assert x.grad is not None and q.weight.grad is None
