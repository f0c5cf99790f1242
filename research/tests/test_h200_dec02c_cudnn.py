"""Issue 26 item 3: plain generate's cold decode (a cuDNN SDPA graph build per step at KV lengths new to the process,
estimate/cudnn_sdpa.py) replanned against the H200 measurements that set nothing in it.

- The build (cudnn_sdpa.GRAPH_BUILD_S, 42.6 ms) was set on transformers CB's traced decode steps
  (2026-12-02-h200-c/call2/gpu_serve5). Checked here on call 3's ``newlen`` (Llama-3.1-8B at 16 layers, batch 1 / 4
  / 16 x 1,024, HF generate after a 4-token warm-up: steps at new KV lengths, the same lengths again, and both with
  cuDNN's SDPA off) and on the issue's own run (2026-12-02-h200/call4/decode_batch.json, the full 8B at 2,048, a
  4-token warm-up before a 32-token generate, so 29 of its 31 steps at new lengths).
- Host level: research/results/2026-12-02-h200-c/h200-gvisor-host.toml (21.5 us a kernel, measured on that VM apart
  from the builds). The catalog H200 (17.2 us, a bare-metal host) is printed beside it in moe_generate.md.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from gpuscope.estimate import cudnn_sdpa as C
from gpuscope.estimate.infer import estimate_infer
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.hf_config import spec_from_config
from gpuscope.specs.models import load_model

RESULTS = Path(__file__).resolve().parents[1] / "results"
HERE = RESULTS / "2026-12-02-h200-c"
HOST = load_hardware(str(HERE / "h200-gvisor-host.toml"))
NEWLEN = HERE / "call3" / "gpu_moe_generate2" / "gpu_moe_generate2" / "gpu_moe_generate2" / "newlen.json"
ISSUE_RUN = RESULTS / "2026-12-02-h200" / "call4" / "decode_batch.json"


def _load(path: Path) -> dict:
    if not path.exists():
        pytest.skip(f"{path.relative_to(RESULTS)} is not in this checkout")
    return json.loads(path.read_text())


def _newlen() -> tuple[object, dict]:
    d = _load(NEWLEN)
    m = spec_from_config(d["config"], name=d["model"], source=str(NEWLEN))
    cases = {c["batch"]: c for c in d["cases"] if "new_lengths_s" in c}
    assert sorted(cases) == [1, 4, 16]
    return m, cases


def _med(c: dict, key: str) -> float:
    return c[f"{key}_lengths_median_from_index2_s"]


def _plan(m, c: dict) -> dict:
    return estimate_infer(m, HOST, batch=c["batch"], prompt=c["prompt"], gen=c["gen"]).time


def test_the_measured_case_is_on_the_planners_cudnn_path():
    m, _ = _newlen()
    assert C.compute_capability(HOST) == (9, 0)
    d = C.decode_attention(m, HOST, "eager", "bf16")
    assert d.backend == "cudnn" and d.per_step_build
    off = C.decode_attention(m, HOST, "eager", "bf16", stack=replace(C.DEFAULT_STACK, cudnn_sdp_enabled=False))
    assert off.backend == "efficient" and not off.per_step_build  # HF passes a mask: no flash


def test_the_build_against_new_minus_seen_lengths():
    """New-length steps less the same lengths again: 65.0 / 52.5 / 44.5 ms at batch 1 / 4 / 16 against the 42.6 ms
    build: -4% at batch 16, -19% at batch 4 (its new-length steps drifted from 84 to 59 ms over the run), -34% at
    batch 1, the process's first case, whose seen steps also ran 1.5x+ the later cases' (26.2 against 14.3 / 17.4
    ms): the host was slower then, for launches and builds alike."""
    _, cases = _newlen()
    build = {b: _med(c, "new") - _med(c, "seen") for b, c in cases.items()}
    assert [round(build[b] * 1e3, 1) for b in (1, 4, 16)] == [65.0, 52.5, 44.5]
    for b in (4, 16):
        assert C.GRAPH_BUILD_S == pytest.approx(build[b], rel=0.2), b
    assert C.GRAPH_BUILD_S / build[1] - 1 == pytest.approx(-0.34, abs=0.02)
    assert _med(cases[1], "seen") > 1.5 * max(_med(cases[4], "seen"), _med(cases[16], "seen"))


def test_cold_and_warm_plans_against_newlen():
    """Cold plan (warm + one build a step) against the new-length steps, warm plan against the seen steps and both
    cuDNN-off runs (no build). Batch 4: -13.4% / +6.6% / -9.4% / +3.4%; batch 16: -6.5% / -12.1% / +3.1% / -8.5%:
    within 20%. Batch 1 (the first case): -36.5% / -41.7% / -36.9% / -36.8%, the warm level's miss, not the
    build's: the cold plan misses its new steps by as much as the warm plan misses the steps with no build."""
    m, cases = _newlen()
    err = {}
    for b, c in cases.items():
        t = _plan(m, c)
        assert t["decode_s_per_token_cold"] == pytest.approx(t["decode_s_per_token"] + C.GRAPH_BUILD_S)
        err[b] = (t["decode_s_per_token_cold"] / _med(c, "new") - 1,
                  *(t["decode_s_per_token"] / _med(c, k) - 1 for k in ("seen", "no_cudnn_new", "no_cudnn_seen")))
    for b in (4, 16):
        assert all(abs(e) < 0.2 for e in err[b]), (b, err[b])
    assert all(-0.45 < e < -0.3 for e in err[1]), err[1]
    assert abs(err[1][0] - statistics.mean(err[1][1:])) < 0.05


def test_cold_plan_against_the_issues_run():
    """The run item 3's 38-67% was read from (32 layers, 2,048 tokens, TPOT 68.4 / 86.3 / 101.0 ms at batch 1 / 4 /
    16): the cold plan +5.2% / -16.6% / -28.8% (the warm plan -57% / -66% / -71%). Batch 16 misses: its two
    steps at lengths the warm-up had run took 51.8 ms against 35.9 / 32.6 at batch 1 / 4 (the warm plan -43% there),
    the same run's slower level at that batch, not the builds (its new-length steps are 55.7 ms above those, one
    build and a third)."""
    d = _load(ISSUE_RUN)
    m = load_model(d["model"])
    cases = [c for c in d["cases"] if c["engine"] == "hf-eager"]
    assert [c["batch"] for c in cases] == [1, 4, 16]
    cold, warm_seen, warm = [], [], []
    for c in cases:
        t = estimate_infer(m, HOST, batch=c["batch"], prompt=c["prompt"], gen=c["gen"]).time
        cold.append(t["decode_s_per_token_cold"] / c["tpot_s"] - 1)
        warm.append(t["decode_s_per_token"] / c["tpot_s"] - 1)
        warm_seen.append(t["decode_s_per_token"] / statistics.mean(c["host_step_s"][1:3]) - 1)
    assert abs(cold[0]) < 0.2 and abs(cold[1]) < 0.2, cold
    assert cold[2] == pytest.approx(-0.288, abs=0.02) and warm_seen[2] < -0.4
    assert all(w < -0.5 for w in warm)
