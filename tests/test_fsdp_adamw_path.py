"""Which AdamW implementation torch runs over FSDP2's sharded parameters, and the temporaries each one holds, on
CPU in a gloo world of one (measure/distributed/optim.py; the planner's side: estimate/memory_train.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

import torch.distributed as dist  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from gpuscope.measure.distributed.case import check_case  # noqa: E402
from gpuscope.measure.distributed.optim import adamw_impl, adamw_kwargs, param_types  # noqa: E402

SIZES = [(200, 64), (96, 64), (64, 64)]  # (out, in) of three linear layers; the first is the largest


@pytest.fixture(scope="module")
def world1(tmp_path_factory):
    if not dist.is_initialized():
        store = tmp_path_factory.mktemp("pg") / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _sharded_model(sizes=SIZES):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(i, o, bias=False) for o, i in sizes])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    return model


def _grads(model):
    h = torch.randn(4, 64)
    for layer in model:
        h = layer(h[..., :64])
    h.square().mean().backward()


class _LiveBytes(TorchDispatchMode):
    """Peak bytes of the tensors created by the ops run under it and still alive (a DTensor counts its local
    shard); in-place ops return an input and create nothing."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0

    def _free(self, n):
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = {id(a) for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and id(t) not in ins:
                loc = t._local_tensor if hasattr(t, "_local_tensor") else t
                n = loc.numel() * loc.element_size()
                self.live += n
                weakref.finalize(t, self._free, n)
        self.peak = max(self.peak, self.live)
        return out


def _step_temporaries(model, **kw) -> tuple[str, int]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **kw)
    _grads(model)
    opt.step()  # the first step creates the states; the second is the steady one
    opt.zero_grad()
    _grads(model)
    with _LiveBytes() as mode:
        opt.step()
    return adamw_impl(opt), mode.peak


def test_fsdp2_parameters_are_dtensors_of_a_foreach_supported_type(world1):
    from torch.distributed.tensor import DTensor
    from torch.optim.optimizer import _foreach_supported_types

    model = _sharded_model()
    assert param_types(model) == ["DTensor"]
    assert all(type(p) is DTensor for p in model.parameters())
    assert DTensor in _foreach_supported_types  # appended by torch.distributed.tensor


def test_default_would_be_foreach_where_foreach_kernels_exist(world1, monkeypatch):
    """Neither keyword given: torch's default rule picks foreach for DTensor parameters on a foreach device (CUDA);
    the CPU is not one, so it is patched in here. An explicit fused=False skips the rule: the for-loop."""
    import torch.optim.optimizer as optmod

    model = _sharded_model()
    monkeypatch.setattr(optmod, "_get_foreach_kernels_supported_devices", lambda: ["cpu"])
    assert adamw_impl(torch.optim.AdamW(model.parameters())) == "foreach"
    assert adamw_impl(torch.optim.AdamW(model.parameters(), fused=False)) == "for-loop"


@pytest.mark.parametrize("case,impl", [({"fused": False}, "for-loop"), ({"foreach": True}, "foreach"),
                                       ({"foreach": False}, "for-loop"), ({}, "for-loop")])
def test_worker_keywords_and_the_implementation_that_runs(world1, monkeypatch, case, impl):
    import torch.optim.adam as adam

    ran = []
    for name, label in (("_single_tensor_adam", "for-loop"), ("_multi_tensor_adam", "foreach")):
        real = getattr(adam, name)
        monkeypatch.setattr(adam, name, lambda *a, _r=real, _l=label, **k: (ran.append(_l), _r(*a, **k))[1])
    model = _sharded_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **adamw_kwargs(check_case(
        {"model": "x", "micro_batch": 1, "seq": 8, **case}), "cpu"))
    _grads(model)
    opt.step()
    assert adamw_impl(opt) == impl and ran == [impl]


@pytest.mark.parametrize("sizes", [SIZES, SIZES[::-1]])
def test_step_temporaries_for_loop_two_of_one_tensor_foreach_one_list(world1, sizes):
    """The mechanism memory_train.adamw_step_temporary_bytes prices: the for-loop's
    ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` holds two temporaries the size of the tensor
    being updated, beside the previous tensor's ``denom`` (rebound only once the new one exists): the peak is
    max_i (2 s_i + s_(i-1)), 2 x the largest when it comes first (an HF decoder's input embedding); foreach's
    _foreach_sqrt(exp_avg_sqs) is one list the size of every parameter."""
    b = [o * i * 4 for o, i in sizes]
    loop = max(2 * s + (b[i - 1] if i else 0) for i, s in enumerate(b))
    impl, peak = _step_temporaries(_sharded_model(sizes), fused=False)
    assert impl == "for-loop" and loop <= peak < loop + 1024
    if sizes[0] == max(sizes):
        assert loop == 2 * max(b)
    impl, peak = _step_temporaries(_sharded_model(sizes), foreach=True)
    assert impl == "foreach" and sum(b) <= peak < sum(b) + 1024


@pytest.mark.parametrize("case,needle", [({"foreach": "yes"}, "foreach: must be true or false"),
                                         ({"foreach": True, "fused": True}, "cannot be combined")])
def test_bad_optimizer_keys(case, needle):
    with pytest.raises(ValueError, match=needle):
        check_case({"model": "x", "micro_batch": 1, "seq": 8, **case})


@pytest.mark.slow
def test_fsdp2_worker_world_of_one_with_foreach(tmp_path):
    """The worker end to end under torchrun (one process, gloo, CPU): the issue's setup, said in the result."""
    from gpuscope.workloads.sets import TINY_LLAMA

    case = {"kind": "train-dist", "strategy": "fsdp", "precision": "amp-bf16", "micro_batch": 1, "seq": 16,
            "steps": 1, "warmup": 1, "foreach": True, "config": TINY_LLAMA, "device": "cpu"}
    out = tmp_path / "r.jsonl"
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                        "-m", "gpuscope.measure.distributed.train", "--case", json.dumps(case), "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(out.read_text().splitlines()[-1])["result"]
    assert res["status"] == "ok" and res["world_size"] == 1
    assert res["optimizer_impl"] == "foreach" and res["optimizer_fused"] is False
    assert res["param_types"] == ["DTensor"]
    # one timed step: its phases add up to it; the host's own time per phase is there too
    assert set(res["phase_s"]) == set(res["host_phase_s"]) == {"forward", "backward", "optimizer"}
    assert sum(res["phase_s"].values()) == pytest.approx(res["step_s"], rel=1e-6)
    assert all(v > 0 for v in res["host_phase_s"].values())
