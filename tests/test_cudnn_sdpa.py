"""estimate/cudnn_sdpa.py: torch's SDPA backend rule (sdp_utils.cpp) by arch, torch / cuDNN version, dtype, head
dim and mask; which planner engines pay a cuDNN graph build per decode step; plan infer's cold decode figure and
its assumption line; the build constant shared with plan serve."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from gpuscope.estimate import cudnn_sdpa as C
from gpuscope.estimate.infer import estimate_infer
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

GVISOR = "research/results/2026-12-02-h200-c/h200-gvisor-host.toml"


@pytest.mark.parametrize("gpu, cc", [("h200", (9, 0)), ("h100", (9, 0)), ("h100-pcie", (9, 0)), ("h20", (9, 0)),
                                     ("b200", (10, 0)), ("a100-80gb", (8, 0)), ("l40s", (8, 9)), ("l4", (8, 9)),
                                     ("rtx-4090", (8, 9)), ("rtx-3090", (8, 6)), ("t4", (7, 5)),
                                     ("v100-32gb", (7, 0)), ("mi300x", None), ("gaudi3", None), (GVISOR, (9, 0))])
def test_compute_capability_from_the_entry(gpu, cc):
    assert C.compute_capability(load_hardware(gpu)) == cc


def test_backend_by_arch_on_the_measured_stack():
    """torch 2.11 / cuDNN 9.19: cuDNN first on sm90 and sm100, masked or not; elsewhere flash without a mask,
    the efficient kernel with one (flash takes no mask)."""
    for cc in ((9, 0), (10, 0), (10, 3)):
        assert C.sdpa_backend(cc, 128, 128, "bf16", masked=True) == "cudnn"
        assert C.sdpa_backend(cc, 128, 128, "bf16", masked=False) == "cudnn"
    for cc in ((8, 0), (8, 6), (8, 9), (12, 0)):
        assert C.sdpa_backend(cc, 128, 128, "bf16", masked=True) == "efficient"
        assert C.sdpa_backend(cc, 128, 128, "bf16", masked=False) == "flash"
    assert C.sdpa_backend((7, 0), 128, 128, "fp16", masked=False) == "efficient"  # flash needs sm80
    assert C.sdpa_backend((7, 5), 128, 128, "bf16", masked=True) == "math"  # no bf16 kernels before sm80
    assert C.sdpa_backend(None, 128, 128, "bf16", masked=True) == "n/a"


def test_backend_by_torch_and_cudnn_version():
    """The priority order's history: 2.5.0 cuDNN first on H100 (not B200), 2.5.1-2.8 cuDNN last; from 2.9/2.10 first
    on sm90/sm100 once the runtime cuDNN is above 9.15.0; TORCH_CUDNN_SDPA_DEPRIORITIZED; a CUDA 12 wheel only on
    minor 0 / 3."""
    s = C.DEFAULT_STACK
    first = lambda cc, **kw: C.cudnn_first(cc, replace(s, **kw))  # noqa: E731
    assert first((9, 0)) and first((10, 0))
    assert first((9, 0), torch=(2, 5, 0), cudnn=90100) and not first((10, 0), torch=(2, 5, 0), cudnn=90100)
    for v in ((2, 5, 1), (2, 6, 0), (2, 7, 1), (2, 8, 0)):
        assert not first((9, 0), torch=v)
    assert first((9, 0), torch=(2, 10, 0)) and not first((9, 0), torch=(2, 10, 0), cudnn=91500)
    assert not first((9, 0), deprioritized=True)
    assert not first((10, 1), cuda_major=12) and first((10, 3), cuda_major=12) and first((10, 1))
    assert not first((8, 0)) and not first((12, 0))
    old = replace(s, torch=(2, 8, 0))
    assert C.sdpa_backend((9, 0), 128, 128, "bf16", masked=True, stack=old) == "efficient"


def test_cudnn_checks_dtype_head_dim_and_switches():
    h = (9, 0)
    assert not C.cudnn_accepts(h, 128, 128, "fp32")  # fp32: efficient / math
    assert C.cudnn_accepts(h, 128, 128, "fp16") and C.cudnn_accepts(h, 64, 64, "bf16")
    assert not C.cudnn_accepts(h, 256, 256, "bf16")  # Gemma-2's 256 needs cuDNN > 9.22 with frontend 1.24
    new = replace(C.DEFAULT_STACK, cudnn=92300, frontend_d256=True)
    assert C.cudnn_accepts(h, 256, 256, "bf16", new) and not C.cudnn_accepts((8, 0), 256, 256, "bf16", new)
    assert C.cudnn_accepts(h, 192, 128, "bf16") and not C.cudnn_accepts((8, 9), 192, 128, "bf16")  # MLA
    assert not C.cudnn_accepts(h, 100, 100, "bf16")  # not a multiple of 8
    assert not C.cudnn_accepts(h, 128, 128, "bf16", replace(C.DEFAULT_STACK, cudnn_sdp_enabled=False))
    assert not C.cudnn_accepts(h, 128, 128, "bf16", replace(C.DEFAULT_STACK, deterministic=True))
    gemma = load_model("gemma-2-9b")
    assert C.decode_attention(gemma, load_hardware("h200"), "eager", "bf16").backend == "efficient"
    ds = load_model("deepseek-v2-lite")
    assert C.head_dims(ds) == (192, 128)
    assert C.decode_attention(ds, load_hardware("h200"), "eager", "bf16").per_step_build


def test_only_plain_generate_pays_a_build_per_step():
    """HF generate over a DynamicCache (eager) has a new KV length every step; the static-cache engines replay one
    shape from a CUDA graph; eager attention calls no SDPA; off sm90/sm100, or under fp32, no cuDNN."""
    m, h200 = load_model("llama-3.1-8b"), load_hardware("h200")
    d = C.decode_attention(m, h200, "eager", "bf16")
    assert d.per_step_build and d.backend == "cudnn" and d.step_s == C.GRAPH_BUILD_S
    for e in ("graph", "graph-unfused", "hf-graph", "hf-graph-defer"):
        d = C.decode_attention(m, h200, e, "bf16")
        assert d.backend == "cudnn" and not d.per_step_build and d.step_s == 0.0
    assert not C.decode_attention(m, h200, "eager", "bf16", attn="eager").per_step_build
    assert C.decode_attention(m, h200, "eager", "bf16", attn="gs-gqa").per_step_build
    assert C.decode_attention(m, h200, "eager", "fp8").per_step_build  # attention in bf16
    assert not C.decode_attention(m, h200, "eager", "fp32").per_step_build
    off = replace(C.DEFAULT_STACK, cudnn_sdp_enabled=False)
    assert C.decode_attention(m, h200, "eager", "bf16", stack=off).backend == "efficient"
    for gpu in ("a100-80gb", "l40s", "mi300x"):
        assert not C.decode_attention(m, load_hardware(gpu), "eager", "bf16").per_step_build


def _line(est) -> list[str]:
    return [a for a in est.assumptions if a.startswith("decode attention:")]


@pytest.mark.parametrize("gpu, engine, on", [("h200", "eager", True), ("h100", "eager", True), ("b200", "eager", True),
                                             ("h200", "hf-graph", False), ("h200", "graph", False),
                                             ("a100-80gb", "eager", False), ("mi300x", "eager", False)])
def test_cold_figure_is_warm_plus_a_build_and_the_line_says_so(gpu, engine, on):
    est = estimate_infer(load_model("llama-3.1-8b"), load_hardware(gpu), batch=4, prompt=1024, gen=64, engine=engine)
    t = est.time
    build = C.GRAPH_BUILD_S if on else 0.0
    assert t["cudnn_sdpa_build_s_per_step"] == build
    assert t["decode_s_per_token_cold"] == pytest.approx(t["decode_s_per_token"] + build)
    lines = _line(est)
    assert len(lines) == (1 if on else 0)
    if on:
        (line,) = lines
        assert f"{t['decode_s_per_token_cold'] * 1e3:.2f} ms/token cold" in line
        assert f"{t['decode_s_per_token'] * 1e3:.2f} warm" in line
        assert "enable_cudnn_sdp(False)" in line and "warm-up" in line and "--engine hf-graph" in line
        assert ("sm100" if gpu == "b200" else "sm90") in line


def _plan(gpu: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuscope", "plan", "infer", "--model", "llama-3.1-8b", "--gpu", gpu,
                           "--batch", "8", "--prompt", "2048", "--gen", "64", *extra], capture_output=True, text=True,
                          timeout=60)


def test_plan_infer_json_has_the_cold_key_beside_the_stable_ones():
    r = _plan("h200", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    t = d["time"]
    assert t["decode_s_per_token_cold"] == pytest.approx(t["decode_s_per_token"] + C.GRAPH_BUILD_S)
    assert {"prefill_s", "decode_s_per_token", "e2e_s"} <= set(t)
    assert any(a.startswith("decode attention:") for a in d["assumptions"])
    r = _plan("a100-80gb")
    assert r.returncode == 0 and "decode attention:" not in r.stdout
    r = _plan("h200")
    assert r.returncode == 0 and "decode attention:" in r.stdout


def test_serve_prices_the_same_build():
    from gpuscope.estimate.serve import profiles

    assert profiles.ENGINES["transformers"].host_graph_build_s == C.GRAPH_BUILD_S
    assert profiles.serve_engine("transformers", attn="flash").host_graph_build_s == 0.0
