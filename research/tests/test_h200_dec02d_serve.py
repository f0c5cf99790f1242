"""Mixed continuous-batching steps' masked SDPA on an H200 (research/results/2026-12-02-h200-d/serve.md): kernel
profiles of transformers 5.17 CB steps (paged|sdpa, torch 2.11's cuDNN flash kernel), 32-layer Llama-3.1-8B with
random bf16 weights (research/scripts/gpu_serve6.sh): call 1, 64 decodes of 1024 plus 1 or 4 new 1024-token prompts
(the wave hypothesis written before it ran); call 2, 32 decodes of 2048 plus 2-12 new 512-token prompts (other
sizes, planned before it ran). Each profiled step's SDPA kernel time a layer against
StepModel.attention_parts' kernel term (step_time.sdpa_waves x the one-block tile loop, or the throughput term)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from gpuscope.estimate.serve import step_time
from gpuscope.estimate.serve.api import ServeRequest, prepare
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

RUN = Path(__file__).resolve().parents[1] / "results" / "2026-12-02-h200-d"
CALLS = {1: (64, 1024), 2: (32, 2048), 3: (64, 1024)}  # call: (decoding requests, their prompt)


@lru_cache(maxsize=None)
def rows(call: int) -> tuple:
    """(queries M, keys, SDPA ms a layer measured, planned, planned with one wave only) per profiled step."""
    d = json.loads((RUN / f"call{call}" / "gpu_serve6" / "serve6" / "serve6.json").read_text())
    n, p = CALLS[call]
    assert (d["requests"], d["prompt"], d["tiny"]) == (n, p, False)
    step = prepare(ServeRequest(load_model("llama-3.1-8b"), n, p, 72, engine="transformers"),
                   load_hardware("h200"))[-1]
    one_wave = step_time.StepModel(**{**step.__dict__, "sms": None})  # sdpa_waves: 1 (and full occupancy)
    out = []
    for r in d["profiles"]:
        assert r["profile_error"] is None and len(r["attention"]) == 1
        assert "cudnn" in next(iter(r["attention"])) and r["attention"][next(iter(r["attention"]))]["count"] == 32
        keys = r["kv"] + r["q"]
        plan = step.attention_parts(r["q"], keys, 0)[0] - step.floor_s
        old = one_wave.attention_parts(r["q"], keys, 0)[0] - step.floor_s
        out.append((r["q"], keys, r["attention_s"] / 32 * 1e3, plan * 1e3, old * 1e3, step.sdpa_waves(r["q"])))
    return tuple(out)


@pytest.mark.parametrize("call", [1, 2, 3])
def test_decode_steps_are_one_wave(call):
    dec = [r for r in rows(call) if r[0] < 100]
    assert len(dec) >= (6 if call == 3 else 10) and all(r[5] == 1 for r in dec)
    assert all(abs(r[3] / r[2] - 1) < 0.03 for r in dec)


@pytest.mark.parametrize("call", [1, 2])
def test_mixed_steps_run_in_waves(call):
    """Every mixed step within 10% (call 1: 1088 queries -5.7%, 3137 -3.8..-4.1%, 4160 +6.6%; call 2: 1056-1057
    -4.3/-4.7%, 2593 -7.3%, 5665 +4.6%); the one-block floor (full occupancy) missed the 3-wave steps by 21-24%."""
    mixed = [r for r in rows(call) if r[0] >= 100]
    assert len(mixed) >= (6 if call == 1 else 4)
    errs = [r[3] / r[2] - 1 for r in mixed]
    assert all(-0.10 < e < 0.08 for e in errs), errs
    three = [r for r in mixed if r[5] == 3]
    assert len(three) >= 2 and all(-0.25 < r[4] / r[2] - 1 < -0.19 for r in three)


def test_measured_waves_are_whole():
    """The 2593-query step (672 blocks: 5.09 SM-loads) ran 6.5 decode layers' worth: waves are whole (ceil), a
    fractional count would be -21%."""
    r = next(r for r in rows(2) if r[0] == 2593)
    per_wave = next(x for x in rows(2) if x[0] < 100 and abs(x[1] - r[1]) < 200)[2]
    assert r[5] == 6 and 6.0 < r[2] / per_wave < 7.0


def test_four_waves_at_3_15_sm_loads():
    """Call 3: 64 decodes + one 1504-token prompt (M = 1568, 416 blocks = 3.15 x 132 SMs), three times: 6.56-6.68
    ms a layer, planned 6.15-6.27 with 4 whole waves (-6.1..-6.3%); the throughput term alone is -15%, a
    fractional wave count -26%."""
    mixed = [r for r in rows(3) if r[0] >= 100]
    assert [r[0] for r in mixed] == [1568] * 3 and all(r[5] == 4 for r in mixed)
    for q, keys, meas, plan, old, waves in mixed:
        per_wave = next(x for x in rows(3) if x[0] < 100 and abs(x[1] - keys) < 700)[2]
        assert plan / meas - 1 == pytest.approx(-0.062, abs=0.01)
        assert 4.0 < meas / per_wave < 4.4  # whole waves; 3.15 if fractional
