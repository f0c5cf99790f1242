"""Diffusion on one H200 (research/results/2026-12-02-h200/diffusion.md): every point of the `bench diffusion` run
(call1/gpu_diffusion: SDXL UNet steps at 512 and 1024 for batches 1-8 with CFG, the SDXL VAE decode at 1024, the
SVD-XT UNet at 14 and 25 frames of 576x1024, the full SDXL pipeline of 30 steps at 1024, fp16) planned again from
its stored inputs, on the catalog h200 (a bare-metal host: 17.2 us a kernel) and on the run's own host
(h200-gvisor-host.toml: 45.05 us a kernel, set by an LLM decode measured apart, call4/decode_batch.out).

Each error (planned / measured - 1) is asserted as diffusion.md reports it (to 0.005), and every row is either
inside issue 25's targets (5% peak allocated, 15% time) or listed in KNOWN_MISSES with its mechanism.

The errors are those of the planner after research/results/2026-12-02-h200-c/diffusion.md (norms, GEGLU and the
other memory-bound kernels priced by their kernel path, convolutions at the GEMM rate from their own kernels, the
VAE's wide-head attention from its own kernel); diffusion.md of this folder gives the values of its own commit."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
from rowcheck import check_reported

from gpuscope.estimate.diffusion import DiffusionRequest, plan_diffusion
from gpuscope.specs.hardware import load_hardware

RUN = Path(__file__).resolve().parents[1] / "results" / "2026-12-02-h200"
POINTS = RUN / "call1" / "gpu_diffusion"
HOSTS = {"catalog": "h200", "run_host": str(RUN / "h200-gvisor-host.toml")}
TARGET = {"peak": 0.05, "step": 0.15, "gpu_busy": 0.15, "vae": 0.15, "total": 0.15, "text": 0.15}

# (point, metric): (error on the catalog h200, error on the run's host); peak and gpu_busy do not depend on the host
REPORTED = {
    ("sdxl/denoiser-b1-512x512-fp16", "peak"): (-0.021, -0.021),
    ("sdxl/denoiser-b1-512x512-fp16", "step"): (-0.695, -0.206),
    ("sdxl/denoiser-b1-512x512-fp16", "gpu_busy"): (-0.051, -0.051),
    ("sdxl/denoiser-b2-512x512-fp16", "peak"): (-0.019, -0.019),
    ("sdxl/denoiser-b2-512x512-fp16", "step"): (-0.630, -0.043),
    ("sdxl/denoiser-b2-512x512-fp16", "gpu_busy"): (-0.084, -0.084),
    ("sdxl/denoiser-b4-512x512-fp16", "peak"): (-0.016, -0.016),
    ("sdxl/denoiser-b4-512x512-fp16", "step"): (-0.537, 0.111),
    ("sdxl/denoiser-b4-512x512-fp16", "gpu_busy"): (0.037, 0.037),
    ("sdxl/denoiser-b8-512x512-fp16", "peak"): (-0.012, -0.012),
    ("sdxl/denoiser-b8-512x512-fp16", "step"): (-0.339, -0.057),
    ("sdxl/denoiser-b8-512x512-fp16", "gpu_busy"): (0.017, 0.017),
    ("sdxl/denoiser-b1-1024x1024-fp16", "peak"): (-0.016, -0.016),
    ("sdxl/denoiser-b1-1024x1024-fp16", "step"): (-0.588, -0.132),
    ("sdxl/denoiser-b1-1024x1024-fp16", "gpu_busy"): (0.066, 0.066),
    ("sdxl/denoiser-b2-1024x1024-fp16", "peak"): (-0.012, -0.012),
    ("sdxl/denoiser-b2-1024x1024-fp16", "step"): (-0.325, -0.130),
    ("sdxl/denoiser-b2-1024x1024-fp16", "gpu_busy"): (0.062, 0.062),
    ("sdxl/denoiser-b4-1024x1024-fp16", "peak"): (-0.004, -0.004),
    ("sdxl/denoiser-b4-1024x1024-fp16", "step"): (-0.005, -0.001),
    ("sdxl/denoiser-b4-1024x1024-fp16", "gpu_busy"): (0.024, 0.024),
    ("sdxl/denoiser-b8-1024x1024-fp16", "peak"): (0.007, 0.007),
    ("sdxl/denoiser-b8-1024x1024-fp16", "step"): (0.010, 0.013),
    ("sdxl/denoiser-b8-1024x1024-fp16", "gpu_busy"): (0.040, 0.040),
    ("sdxl/vae-decode-b1-1024x1024-fp16", "peak"): (-0.003, -0.003),
    ("sdxl/vae-decode-b1-1024x1024-fp16", "vae"): (-0.004, -0.001),
    ("svd-xt/denoiser-b1-576x1024x14f-fp16", "peak"): (-0.004, -0.004),
    ("svd-xt/denoiser-b1-576x1024x14f-fp16", "step"): (-0.062, -0.060),
    ("svd-xt/denoiser-b1-576x1024x14f-fp16", "gpu_busy"): (-0.059, -0.059),
    ("svd-xt/denoiser-b1-576x1024x25f-fp16", "peak"): (-0.003, -0.003),
    ("svd-xt/denoiser-b1-576x1024x25f-fp16", "step"): (-0.022, -0.021),
    ("svd-xt/denoiser-b1-576x1024x25f-fp16", "gpu_busy"): (-0.021, -0.021),
    ("sdxl/pipeline-b1-1024x1024-s30-fp16", "peak"): (-0.011, -0.011),
    ("sdxl/pipeline-b1-1024x1024-s30-fp16", "vae"): (-0.028, -0.026),
    ("sdxl/pipeline-b1-1024x1024-s30-fp16", "total"): (-0.470, 0.073),
    ("sdxl/pipeline-b1-1024x1024-s30-fp16", "text"): (-0.483, 0.294),
}

# rows outside the targets on a host, and why (diffusion.md, "Mechanisms" and "Not within target")
HOST_BOUND = "host-bound step: the bench host (gVisor, ~45 us a launch) is not the catalog's bare-metal host"
KNOWN_MISSES = {
    **{(p, "step", "catalog"): HOST_BOUND for p in (
        "sdxl/denoiser-b1-512x512-fp16", "sdxl/denoiser-b2-512x512-fp16", "sdxl/denoiser-b4-512x512-fp16",
        "sdxl/denoiser-b8-512x512-fp16", "sdxl/denoiser-b1-1024x1024-fp16", "sdxl/denoiser-b2-1024x1024-fp16")},
    ("sdxl/pipeline-b1-1024x1024-s30-fp16", "total", "catalog"): HOST_BOUND,
    ("sdxl/pipeline-b1-1024x1024-s30-fp16", "text", "catalog"): HOST_BOUND + " (the text encoders, ~300 kernels)",
    ("sdxl/pipeline-b1-1024x1024-s30-fp16", "text", "run_host"):
        "text encoding: 22 ms measured, 29 ms at 45 us a kernel; the host's per-launch cost varies 36-52 us",
    ("sdxl/denoiser-b1-512x512-fp16", "step", "run_host"):
        "host noise: 52 us a kernel in this row against 36-46 us in the other host-bound rows (spread 8%)",
}


@lru_cache(maxsize=None)
def _points() -> tuple:
    """The run's ok points (each step's --json), named without the kind prefix."""
    out = []
    for path in sorted(POINTS.glob("*.out")):
        out += [{**m, "name": m["name"].removeprefix("diffusion/")}
                for m in json.loads(path.read_text())["measurements"] if m["status"] == "ok"]
    return tuple(out)


@lru_cache(maxsize=None)
def _plan(name: str, host: str) -> dict:
    r = next(m["result"] for m in _points() if m["name"] == name)
    req = DiffusionRequest(model=name.split("/")[0], batch=r["batch"], height=r["height"], width=r["width"],
                           frames=r["frames"], steps=r.get("steps"), cfg=r["cfg"], dtype=r["dtype"],
                           component=r["component"])
    return plan_diffusion(req, load_hardware(HOSTS[host]), limits=False).to_json()


def errors(name: str, host: str) -> dict[str, float]:
    """planned / measured - 1 per metric the point measured."""
    r = next(m["result"] for m in _points() if m["name"] == name)
    p = _plan(name, host)
    den = [c for c in p["components"].values() if c["role"] == "denoiser"]
    pairs = {"peak": (p["memory"]["peak_bytes_per_gpu"], r["peak_bytes"]),
             "step": (p["time"]["step_s"], r.get("denoiser_step_s")),
             "gpu_busy": (den[0]["gpu_s"] if den else None, r.get("device_busy_s")),
             "vae": (p["time"]["vae_decode_s"], r.get("vae_decode_s")),
             "total": (p["time"]["total_s"], r.get("total_s")),
             "text": (p["time"]["text_encode_s"], r.get("text_encode_s"))}
    return {k: e / m - 1 for k, (e, m) in pairs.items() if e and m}


def test_every_stored_point_is_reported():
    names = {m["name"] for m in _points()}
    assert len(names) == 12
    assert {(n, k) for n in names for k in errors(n, "catalog")} == set(REPORTED)


@pytest.mark.parametrize("host", ["catalog", "run_host"])
@pytest.mark.parametrize("key", sorted(REPORTED))
def test_error_as_reported(key, host):
    name, metric = key
    check_reported(key, host, errors(name, host)[metric], REPORTED, KNOWN_MISSES, TARGET[metric])


def test_the_run_host_is_set_apart_from_these_runs():
    """The run host's launch cost is the LLM decode's (call4), within the spread of these runs' own host-bound
    steps (denoiser_enqueue_s / the profile's kernels: 36-52 us)."""
    hw = load_hardware(HOSTS["run_host"])
    launch = hw.measured["host_launch_s"]
    per_kernel = [m["result"]["denoiser_enqueue_s"] / m["result"]["kernels"] for m in _points()
                  if m["result"].get("kernels") and m["result"]["device_busy_s"] < 0.7 * m["result"]["denoiser_step_s"]]
    assert len(per_kernel) == 6
    assert min(per_kernel) < launch < max(per_kernel)
