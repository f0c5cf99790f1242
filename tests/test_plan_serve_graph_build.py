"""transformers paged|sdpa: every eager CB step pays the cuDNN SDPA graph build in series (profiles.py,
step_time.StepModel.step_s); paged flash (CUDA graphs), paged|eager (no SDPA) and vLLM do not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuscope.estimate.serve import ServeRequest
from gpuscope.estimate.serve.api import prepare
from gpuscope.estimate.serve.profiles import TRANSFORMERS_HOST
from gpuscope.estimate.serve.step_time import _interp
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

M = load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def hw():
    return load_hardware("h200")


def _parts(step, n, kv):
    gpu = _interp(step.xs, step.linear_s, n) + _interp(step.xs, step.head_s, n) + step.attention_s(n, kv, kv)
    host = step.kernels * step.launch_s + step.forward_host_s
    e = step.engine
    loop = e.host_step_s + e.host_per_request_s * n + e.host_per_kv_token_s * (kv + n)
    return gpu, host, loop


@pytest.mark.parametrize("n,kv", [(4, 2_000), (64, 35_000), (512, 200_000)])
def test_sdpa_step_is_max_of_gpu_and_launches_plus_the_build(hw, n, kv):
    step = prepare(ServeRequest(M, 1024, 128, 128), hw)[-1]
    assert step.engine.host_graph_build_s == TRANSFORMERS_HOST["host_graph_build_s"] > 0.03
    gpu, host, loop = _parts(step, n, kv)
    assert step.step_s(n, n, kv, kv, n, True) == pytest.approx(max(gpu, host) + step.engine.host_graph_build_s
                                                                + loop, rel=1e-9)
    # a prefill step pays it too (its shape is new as well), in series
    bare = replace(step, engine=replace(step.engine, host_graph_build_s=0.0))
    t, k2 = 4096 + n, kv + 4096
    assert step.step_s(t, n, k2, k2, n, False) - bare.step_s(t, n, k2, k2, n, False) == pytest.approx(
        step.engine.host_graph_build_s, rel=1e-9)


@pytest.mark.parametrize("kw", [dict(attn="flash"), dict(attn="eager"), dict(engine="vllm")])
def test_no_build_without_cudnn_sdpa(hw, kw):
    step = prepare(ServeRequest(M, 64, 512, 128, **kw), hw)[-1]
    assert step.engine.host_graph_build_s == 0.0


def test_finishing_requests_host_work_adds_to_an_offline_run(hw, monkeypatch):
    """Offline, each finishing request adds host_per_finish_s to the clock after its last token and the step times do
    not depend on the clock: the run (first send to last token, metrics.py) lasts (requests - 1) x host_per_finish_s
    longer than with none; the last request's own finishing work comes after the last token."""
    import gpuscope.estimate.serve.api as api
    req = ServeRequest(load_model("llama-3.1-8b"), 64, 256, 16)
    assert api.prepare(req, hw)[-1].engine.host_per_finish_s == TRANSFORMERS_HOST["host_per_finish_s"] > 0
    with_cost = api.plan_serve(req, hw).to_json()["simulation"]["duration_s"]
    orig = api.prepare

    def no_finish_cost(*a, **k):
        *rest, step = orig(*a, **k)
        step.engine = replace(step.engine, host_per_finish_s=0.0)
        return (*rest, step)

    monkeypatch.setattr(api, "prepare", no_finish_cost)
    without = api.plan_serve(req, hw).to_json()["simulation"]["duration_s"]
    assert with_cost - without == pytest.approx(63 * TRANSFORMERS_HOST["host_per_finish_s"], rel=1e-6)


def test_finish_cost_is_an_assumption_line(hw):
    from gpuscope.estimate.serve import plan_serve
    sdpa = plan_serve(ServeRequest(load_model("llama-3.1-8b"), 8, 128, 8), hw).to_json()["assumptions"]
    assert any("finishing request costs the host loop 0.87 ms" in a for a in sdpa)
    vllm = plan_serve(ServeRequest(load_model("llama-3.1-8b"), 8, 128, 8, engine="vllm"), hw).to_json()["assumptions"]
    assert not any("finishing request" in a for a in vllm)
