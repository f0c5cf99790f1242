"""Diffusion on one H200, the second set (research/results/2026-12-02-h200-b/diffusion.md): every ok point of
call*/gpu_diffusion2 (the SDXL pipeline at 1024x1024 under sequential CPU offload, 2 steps; the SVD-XT UNet at 14
frames of 576x1024 with its kernel table; SDXL's text encoders profiled; fp16) planned again from its stored inputs
on the catalog h200 and on the run's host (research/results/2026-12-02-h200/h200-gvisor-host.toml: 45.05 us a
kernel, set by an LLM decode measured apart).

Each error (planned / measured - 1) is asserted as diffusion.md reports it (to 0.005); every row is inside issue
25's targets (5% memory, 15% time) or listed in KNOWN_MISSES with its mechanism. The constants the offload model
takes from these runs' session are checked against their sources.

The errors are those of the planner after research/results/2026-12-02-h200-c/diffusion.md (its kernel-path
re-split: the SVD-XT rows came inside the targets, no longer listed as misses; the sequential-offload VAE phase is
still one, now by the host-side cast alone; diffusion.md of this folder gives the values of its own commit)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
from rowcheck import check_reported

from gpuscope.estimate.diffusion import DiffusionRequest, plan_diffusion
from gpuscope.estimate.diffusion.offload import PAGEABLE_FRACTION, TENSOR_LAUNCHES
from gpuscope.specs.hardware import load_hardware

RESULTS = Path(__file__).resolve().parents[1] / "results"
RUN = RESULTS / "2026-12-02-h200-b"
HOSTS = {"catalog": "h200", "run_host": str(RESULTS / "2026-12-02-h200" / "h200-gvisor-host.toml")}
MEMORY = ("peak", "peak_text", "peak_denoise", "peak_vae")
SEQ = "sdxl/pipeline-b1-1024x1024-s2-fp16-offload-sequential"
TEXT = "sdxl/text-encoders-b1-1024x1024-fp16"
SVD = "svd-xt/denoiser-b1-576x1024x14f-fp16"

# (point, metric): (error on the catalog h200, error on the run's host)
REPORTED = {
    (SEQ, "peak"): (-0.004, -0.004), (SEQ, "peak_text"): (-0.007, -0.007),
    (SEQ, "peak_denoise"): (0.023, 0.023), (SEQ, "peak_vae"): (-0.004, -0.004),
    (SEQ, "text"): (-0.248, -0.012), (SEQ, "loop_step"): (-0.246, -0.055),
    (SEQ, "vae"): (-0.271, -0.192), (SEQ, "total"): (-0.248, -0.059),
    (TEXT, "peak"): (-0.005, -0.005), (TEXT, "text"): (-0.168, 1.083),
    (SVD, "peak"): (-0.004, -0.004), (SVD, "step"): (-0.064, -0.062), (SVD, "gpu_busy"): (-0.067, -0.067),
}
SEQ_HOST = ("sequential offload's host cost per weight tensor scales with the host's launch cost: the catalog's "
            "bare-metal 17.2 us plans 76 us a tensor where this gVisor VM took ~200")
KNOWN_MISSES = {
    **{(SEQ, m, "catalog"): SEQ_HOST for m in ("text", "loop_step", "vae", "total")},
    (SEQ, "vae", "run_host"): ("the fp32 upcast under sequential offload: accelerate casts each fp16 CPU tensor to "
                               "fp32 on the host before copying it (set_module_tensor_to_device), not modelled; "
                               "with the fp32 decode planned from its own table (2026-12-02-h200-c) that is the "
                               "43 ms the phase misses"),
    (TEXT, "text", "catalog"): ("host-bound CLIPs: ~300 us of host time per encoder layer (17.6 and 22.1 us a "
                                "kernel) against 241-275 us planned"),
    (TEXT, "text", "run_host"): ("the run host's 45.05 us a kernel is an LLM decode's (transformers Llama); the "
                                 "CLIPs on the same machine took 17.6-22.1 us a kernel"),
}


@lru_cache(maxsize=None)
def _measurements() -> tuple:
    out = []
    for path in sorted(RUN.glob("call*/gpu_diffusion2/*.out")):
        out += [{**m, "name": m["name"].removeprefix("diffusion/")} for m in json.loads(path.read_text())["measurements"]]
    return tuple(out)


def _points() -> list[dict]:
    return [m for m in _measurements() if m["status"] == "ok"]


def _result(name: str) -> dict:
    return next(m["result"] for m in _points() if m["name"] == name)


@lru_cache(maxsize=None)
def _plan(name: str, host: str) -> dict:
    r = _result(name)
    offload = next((o for o in ("model", "sequential") if name.endswith(f"-offload-{o}")), "none")
    req = DiffusionRequest(model=name.split("/")[0], batch=r["batch"], height=r["height"], width=r["width"],
                           frames=r["frames"], steps=r.get("steps"), cfg=r["cfg"], dtype=r["dtype"],
                           component=r["component"], offload=offload)
    return plan_diffusion(req, load_hardware(HOSTS[host]), limits=False).to_json()


def errors(name: str, host: str) -> dict[str, float]:
    """planned / measured - 1 per metric the point measured."""
    r, p = _result(name), _plan(name, host)
    t, phases = p["time"], p["memory"]["phases_bytes"]
    den = [c for c in p["components"].values() if c["role"] == "denoiser"]
    pairs = {"peak": (p["memory"]["peak_bytes_per_gpu"], r["peak_bytes"]),
             "peak_text": (phases.get("text_encode"), r.get("peak_text_bytes")),
             "peak_denoise": (phases.get("denoise"), r.get("peak_denoise_bytes")),
             "peak_vae": (phases.get("vae_decode"), r.get("peak_vae_bytes")),
             "step": (t["step_s"], r.get("denoiser_step_s")),
             "loop_step": (t["step_s"] + t["step_overhead_s"], r.get("loop_step_s")),
             "gpu_busy": (den[0]["gpu_s"] if den else None, r.get("device_busy_s")),
             "vae": (t["vae_decode_s"], r.get("vae_decode_s")), "total": (t["total_s"], r.get("total_s")),
             "text": (t["text_encode_s"], r.get("text_encode_s"))}
    return {k: e / m - 1 for k, (e, m) in pairs.items() if e and m}


def test_every_stored_point_is_reported_and_the_cut_ones_are_timeouts():
    assert {m["name"] for m in _points()} == {SEQ, TEXT, SVD}
    assert {(n, k) for n in (SEQ, TEXT, SVD) for k in errors(n, "catalog")} == set(REPORTED)
    cut = {m["name"]: m["result"] for m in _measurements() if m["status"] != "ok"}
    assert set(cut) == {"sdxl/pipeline-b1-1024x1024-s4-fp16-offload-model", "sdxl/vae-decode-b1-1024x1024-fp16"}
    assert all(r["status"] == "timeout" for r in cut.values())


@pytest.mark.parametrize("host", ["catalog", "run_host"])
@pytest.mark.parametrize("key", sorted(REPORTED))
def test_error_as_reported(key, host):
    name, metric = key
    check_reported(key, host, errors(name, host)[metric], REPORTED, KNOWN_MISSES, 0.05 if metric in MEMORY else 0.15)


def test_pageable_fraction_is_the_same_sessions_micro_bench():
    """offload.PAGEABLE_FRACTION: `bench micro`'s pageable / pinned copy rates of call1 (micro_lowp.json)."""
    doc = json.loads((RUN / "call1" / "micro_lowp.json").read_text())
    gbs = {m["name"].split("/")[2]: m["result"]["gbs"] for m in doc["bench_micro_quick"]["json"]["measurements"]
           if m["name"].startswith("micro/transfer/")}
    for way in ("h2d", "d2h"):
        assert PAGEABLE_FRACTION[way] == pytest.approx(gbs[f"{way}-pageable"] / gbs[f"{way}-pinned"], rel=0.01)


def test_tensor_launches_set_by_the_text_encoders():
    """TENSOR_LAUNCHES: the text phase under sequential offload less its planned forwards and its bytes at the
    pageable rate, per weight tensor, in run-host launches (45.05 us); the UNet step is the check."""
    p = _plan(SEQ, "run_host")
    enc = [c for c in p["components"].values() if c["role"] == "text_encoder"]
    plain = _plan_without_offload(SEQ)
    copies = _result(SEQ)["text_encode_s"] - plain["time"]["text_encode_s"]
    moved = sum(c["weight_bytes"] for c in enc) / (54.0e9 * PAGEABLE_FRACTION["h2d"])
    tensors = 196 + 517  # CLIP-L and CLIP-bigG's parameter tensors (tests/test_plan_diffusion_offload.py)
    assert (copies - moved) / tensors / 45.05e-6 == pytest.approx(TENSOR_LAUNCHES, abs=0.15)
    assert abs(errors(SEQ, "run_host")["loop_step"]) < 0.15


def _plan_without_offload(name: str) -> dict:
    r = _result(name)
    req = DiffusionRequest(model="sdxl", batch=r["batch"], height=r["height"], width=r["width"], steps=r["steps"],
                           cfg=r["cfg"], dtype=r["dtype"], component="pipeline")
    return plan_diffusion(req, load_hardware(HOSTS["run_host"]), limits=False).to_json()


def test_svd_kernel_table_norms_as_priced():
    """The SVD-XT UNet's kernel table: its group and layer norm kernels (105 GroupNorms, 112 LayerNorms: the
    planned op counts) took 55.7 ms, 15% of the forward; since the kernel-path re-split
    (research/results/2026-12-02-h200-c/diffusion.md) the plan prices them within 5% of that (it planned 14.6 ms
    before, under 0.015 s, which this test asserted until then)."""
    r = _result(SVD)
    rows = r["kernel_table"]
    req = DiffusionRequest(model="svd-xt", batch=1, height=576, width=1024, frames=14, cfg=True, component="denoiser")
    ops = plan_diffusion(req, load_hardware("h200"), limits=False).costs[0].forward["times"]
    norms = [o for o in ops if o.kind == "elementwise" and o.name.split(".")[-1].startswith(("norm", "conv_norm"))]
    planned_ln = [o for o in norms if "transformer_blocks" in o.name]
    moments = [o for o in ops if o.name.endswith(".moments")]  # GroupNorm's row moments, one per GroupNorm
    assert (len(norms) - len(planned_ln), len(planned_ln), len(moments)) == (105, 112, 105)
    gn = sum(x["s"] for x in rows if "RowwiseMoments" in x["name"] or "GroupNorm" in x["name"])
    ln = sum(x["s"] for x in rows if "layer_norm" in x["name"])
    assert sum(x["calls"] for x in rows if "RowwiseMoments" in x["name"]) == 105
    assert sum(x["calls"] for x in rows if "layer_norm" in x["name"]) == 112
    assert gn + ln > 0.15 * r["device_busy_s"]
    assert (gn, ln) == (pytest.approx(0.0356, abs=0.001), pytest.approx(0.0201, abs=0.001))
    assert sum(o.gpu_s for o in norms + moments) == pytest.approx(gn + ln, rel=0.05)
