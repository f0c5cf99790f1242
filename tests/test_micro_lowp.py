"""The 8-bit matmul benches (issue 26, item 5): operands in the layout cuBLASLt's 8-bit tensor-core kernels run
(row-major A, column-major B), the long-K shapes 8-bit GEMMs peak at, and what a result records of both. On the
CPU only the layouts, the shapes and the arithmetic can be checked; the rates are research/scripts/gpu_micro_lowp.py's
to measure on an H200."""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gpuscope.measure.device.device import Device  # noqa: E402
from gpuscope.measure.micro import matmul as mm  # noqa: E402
from gpuscope.measure.micro.bench import micro_configs  # noqa: E402
from gpuscope.measure.micro.timing import Settings  # noqa: E402

CPU = Device("cpu")
GPU = SimpleNamespace(type="cuda")
FAST = Settings(warmup=0, min_iters=2, min_time_s=0.0, max_time_s=1.0)


def test_int8_b_is_column_major_and_the_product_is_exact():
    gen = torch.Generator().manual_seed(0)
    a, b = mm._operands("int8", 32, 24, 40, CPU, gen)
    assert a.is_contiguous() and b.shape == (40, 24)
    assert b.stride() == (1, 40)  # the transpose of a contiguous (n, k): column-major (k, n)
    ref = a.to(torch.int64) @ b.to(torch.int64)
    assert torch.equal(torch._int_mm(a, b).to(torch.int64), ref)


def test_int8_row_major_b_on_request():
    gen = torch.Generator().manual_seed(0)
    _, b = mm._operands("int8", 32, 24, 40, CPU, gen, b_layout="row")
    assert b.is_contiguous() and b.shape == (40, 24)


def test_low_precision_dtypes_add_long_k_shapes_on_a_gpu_only():
    quick_int8 = mm.matmul_shapes("quick", GPU, dtype="int8")
    quick_bf16 = mm.matmul_shapes("quick", GPU, dtype="bf16")
    assert set(mm.LOWP_QUICK) <= set(quick_int8) and not set(mm.LOWP_QUICK) & set(quick_bf16)
    assert quick_bf16 == mm.matmul_shapes("quick", GPU)  # the 16-bit sets did not move
    sweep_fp8 = mm.matmul_shapes("sweep", GPU, sms=132, dtype="fp8")
    assert set(mm.LOWP_SWEEP) <= set(sweep_fp8) and len(sweep_fp8) == len(set(sweep_fp8))
    assert max(k for _, _, k in mm.LOWP_QUICK) > max(k for _, _, k in quick_bf16)
    assert mm.matmul_shapes("quick", CPU, dtype="int8") == mm.matmul_shapes("quick", CPU)


def test_micro_configs_give_each_dtype_its_own_shapes():
    by = {c["dtype"]: c for c in micro_configs(CPU, "quick", dtypes=["int8", "bf16"], benches=("matmul",))}
    assert by["int8"]["shapes"] == [list(s) for s in mm.matmul_shapes("quick", CPU, dtype="int8")]
    given = micro_configs(CPU, "quick", dtypes=["int8"], benches=("matmul",), shapes=[(64, 64, 64)])
    assert given[0]["shapes"] == [[64, 64, 64]] and given[0]["shapes_given"]


def test_int8_result_records_its_layout():
    res = mm.matmul_bench(CPU, "int8", [(64, 32, 64)], FAST, None)
    assert res["status"] == "ok" and res["b_layout"] == "column-major" and res["unit"] == "TOPS"
    row = mm.matmul_bench(CPU, "int8", [(64, 32, 64)], FAST, None, b_layout="row")
    assert row["b_layout"] == "row-major"
    assert mm.matmul_bench(CPU, "bf16", [(64, 32, 64)], FAST, None).get("b_layout") is None
