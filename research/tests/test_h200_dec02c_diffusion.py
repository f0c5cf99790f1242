"""Diffusion on one H200, the third set (research/results/2026-12-02-h200-c/diffusion.md): every point of
call1/gpu_diffusion2 (the SDXL pipeline at 1024x1024 under model CPU offload, 2 steps; the SDXL VAE decode at
1024x1024 with its kernel table), call2/gpu_diffusion3 (kernel tables of the SVD-XT UNet at 20 frames, the SDXL
VAE decode at 768x768 batch 2, the SDXL UNet at 768x768 and the SD3.5-medium transformer at 1024x1024, CFG; fp16)
and call3/gpu_diffusion3 (the SDXL VAE decode at 1024x1024 in fp32 with its kernel table; the allocator probe)
planned again from its stored inputs on the catalog h200 and on the run host of the first set
(research/results/2026-12-02-h200/h200-gvisor-host.toml: 45.05 us a kernel, set by an LLM decode measured apart).

Each error (planned / measured - 1) is asserted as diffusion.md reports it (to 0.005); every row is inside issue
25's targets (5% memory, 15% time) or listed in KNOWN_MISSES with its mechanism. The kernel-path constants of
estimate/diffusion/time.py are derived again from the tables that set them, and each kernel class of the other
tables is compared with its plan (the independent checks). The VAE decode at 768x768 batch 2 sets two of them (the channels-last copies and the
NHWC upsample: test_vae_batch2_table_sets_the_channels_last_copies_and_upsample), so its time is no check; its
peak is (the channels-last structure has no constant)."""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import pytest
from rowcheck import check_reported

from gpuscope.estimate.diffusion import DiffusionRequest, plan_diffusion
from gpuscope.estimate.diffusion import time as dtime
from gpuscope.estimate.diffusion.offload import PAGEABLE_FRACTION
from gpuscope.specs.hardware import load_hardware

RESULTS = Path(__file__).resolve().parents[1] / "results"
RUN = RESULTS / "2026-12-02-h200-c"
SVD14 = RESULTS / "2026-12-02-h200-b" / "call1" / "gpu_diffusion2" / "svd_unet14_profile.out"
HOSTS = {"catalog": "h200", "run_host": str(RESULTS / "2026-12-02-h200" / "h200-gvisor-host.toml")}
MEMORY = ("peak", "peak_text", "peak_denoise", "peak_vae")
MODEL = "sdxl/pipeline-b1-1024x1024-s2-fp16-offload-model"
VAE = "sdxl/vae-decode-b1-1024x1024-fp16"
SVD20 = "svd-xt/denoiser-b1-576x1024x20f-fp16"
VAE2 = "sdxl/vae-decode-b2-768x768-fp16"
UNET = "sdxl/denoiser-b1-768x768-fp16"
SD3 = "sd-3.5-medium/denoiser-b1-1024x1024-fp16"
VAE32 = "sdxl/vae-decode-b1-1024x1024-fp32"

# (point, metric): (error on the catalog h200, error on the run's host)
REPORTED = {
    (MODEL, "peak"): (-0.016, -0.016), (MODEL, "peak_text"): (-0.002, -0.002),
    (MODEL, "peak_denoise"): (-0.016, -0.016), (MODEL, "peak_vae"): (-0.004, -0.004),
    (MODEL, "text"): (-0.475, -0.446), (MODEL, "denoise"): (-0.527, -0.483),
    (MODEL, "vae"): (-0.635, -0.635), (MODEL, "total"): (-0.565, -0.540),
    (VAE, "peak"): (-0.003, -0.003), (VAE, "gpu_busy"): (0.003, 0.003), (VAE, "vae"): (0.007, 0.010),
    (SVD20, "peak"): (-0.003, -0.003), (SVD20, "step"): (-0.033, -0.031), (SVD20, "gpu_busy"): (-0.035, -0.035),
    (VAE2, "peak"): (-0.003, -0.003), (VAE2, "gpu_busy"): (-0.055, -0.055), (VAE2, "vae"): (-0.057, -0.053),
    (UNET, "peak"): (-0.019, -0.019), (UNET, "step"): (-0.433, 0.437), (UNET, "gpu_busy"): (-0.123, -0.123),
    (VAE32, "peak"): (-0.004, -0.004), (VAE32, "gpu_busy"): (0.022, 0.022), (VAE32, "vae"): (0.022, 0.024),
    (SD3, "peak"): (-0.007, -0.007), (SD3, "step"): (-0.101, 0.059), (SD3, "gpu_busy"): (-0.073, -0.073),
}
MODEL_HOST = ("model offload: the timed call was the second after loading (one warm-up), planned in the steady "
              "state; the 2026-12-02 d probe's second call met 2.0 GB of fresh host pages in its moves out (3.9 us a "
              "4 KiB page: +2.0 s), its third 0.2 GB (research/results/2026-12-02-h200-d/offload.md)")
KNOWN_MISSES = {
    **{(MODEL, m, h): MODEL_HOST for m in ("text", "denoise", "vae", "total") for h in ("catalog", "run_host")},
    (UNET, "step", "catalog"): "host-bound step: the bench host (gVisor) is not the catalog's bare-metal host",
    (UNET, "step", "run_host"): ("host-bound step: this call's host issued 2,344 kernels in 64.6 ms, 27.6 us a "
                                 "kernel, against the run host TOML's 45.05 (another session's host)"),
}


@lru_cache(maxsize=None)
def _measurements() -> tuple:
    out = []
    for path in sorted(RUN.glob("call*/gpu_diffusion*/gpu_diffusion*/*.out")):
        if path.name == "alloc_probe.out":  # the allocator probe's own JSON (alloc_probe.json), not a bench run
            continue
        out += [{**m, "name": m["name"].removeprefix("diffusion/")} for m in json.loads(path.read_text())["measurements"]]
    return tuple(out)


def _result(name: str) -> dict:
    return next(m["result"] for m in _measurements() if m["name"] == name and m["status"] == "ok")


def _request(name: str, r: dict) -> DiffusionRequest:
    offload = next((o for o in ("model", "sequential") if name.endswith(f"-offload-{o}")), "none")
    return DiffusionRequest(model=name.split("/")[0], batch=r["batch"], height=r["height"], width=r["width"],
                            frames=r["frames"], steps=r.get("steps"), cfg=r["cfg"], dtype=r["dtype"],
                            component=r["component"], offload=offload)


@lru_cache(maxsize=None)
def _plan(name: str, host: str):
    return plan_diffusion(_request(name, _result(name)), load_hardware(HOSTS[host]), limits=False)


def errors(name: str, host: str) -> dict[str, float]:
    """planned / measured - 1 per metric the point measured."""
    r, plan = _result(name), _plan(name, host)
    p = plan.to_json()
    t, phases = p["time"], p["memory"]["phases_bytes"]
    busy = plan.costs[0].forward["gpu_s"] if r["component"] in ("denoiser", "vae-decode") else None
    pairs = {"peak": (p["memory"]["peak_bytes_per_gpu"], r["peak_bytes"]),
             "peak_text": (phases.get("text_encode"), r.get("peak_text_bytes")),
             "peak_denoise": (phases.get("denoise"), r.get("peak_denoise_bytes")),
             "peak_vae": (phases.get("vae_decode"), r.get("peak_vae_bytes")),
             "step": (t["step_s"], r.get("denoiser_step_s")), "gpu_busy": (busy, r.get("device_busy_s")),
             "text": (t["text_encode_s"], r.get("text_encode_s")), "denoise": (t["denoise_s"], r.get("denoise_s")),
             "vae": (t["vae_decode_s"], r.get("vae_decode_s")), "total": (t["total_s"], r.get("total_s"))}
    return {k: e / m - 1 for k, (e, m) in pairs.items() if e and m}


def test_every_stored_point_is_reported():
    names = {m["name"] for m in _measurements()}
    assert all(m["status"] == "ok" for m in _measurements())
    assert names == {MODEL, VAE, SVD20, VAE2, UNET, SD3, VAE32}
    assert {(n, k) for n in names for k in errors(n, "catalog")} == set(REPORTED)


@pytest.mark.parametrize("host", ["catalog", "run_host"])
@pytest.mark.parametrize("key", sorted(REPORTED))
def test_error_as_reported(key, host):
    name, metric = key
    check_reported(key, host, errors(name, host)[metric], REPORTED, KNOWN_MISSES,
                   0.05 if metric in MEMORY else 0.15)


# ---- kernel classes ------------------------------------------------------------------------------------------

def measured_class(kernel: str) -> str:
    """The class of a profiled kernel, by its name (the planner's time.kernel_class; GEGLU's multiply is not told
    apart from the other non-vectorized multiplies by its name: both count as "nonvec")."""
    if "RowwiseMoments" in kernel or "ComputeFusedParams" in kernel:
        return "gn_moments"
    if "GroupNormKernelImpl" in kernel:
        return "gn_apply"
    if "layer_norm" in kernel:
        return "layer_norm"
    if any(k in kernel for k in ("nchwToNhwc", "nhwcToNchw", "tensorTransform")):
        return "layout"
    if any(k in kernel for k in ("sdpa", "flash", "fmha")):
        return "attention"
    if "fprop" in kernel or "convolve" in kernel:
        return "conv"
    if "nvjet" in kernel or "gemm" in kernel.lower() or "gemv" in kernel.lower():
        return "gemm"
    if "upsample_nearest2d" in kernel:
        return "upsample_nhwc" if "nhwc" in kernel else "upsample"
    if kernel.startswith("void at::native::elementwise_kernel<128, "):  # <128, 4> in 16-bit, <128, 2> in fp32
        if "direct_copy" in kernel:
            return "copy"  # a strided copy: the planner's "transpose" (a VAE's channels-last stream) or "nonvec"
        return "geglu_gelu" if "Gelu" in kernel else "nonvec"
    return "vec"


def measured_classes(r: dict, copies_apart: bool = False) -> dict[str, float]:
    """Device seconds by class; strided copies count as "nonvec" unless ``copies_apart`` (then "copy")."""
    out: dict[str, float] = defaultdict(float)
    for k in r["kernel_table"]:
        c = measured_class(k["name"])
        out["nonvec" if c == "copy" and not copies_apart else c] += k["s"]
    return out


def planned_classes(req: DiffusionRequest, copies_apart: bool = False) -> dict[str, float]:
    """Planned GPU seconds by class: GEGLU's multiply counts as "nonvec" (its kernel name does not tell it apart),
    and so do the channels-last copies unless ``copies_apart`` (then "transpose")."""
    fwd = plan_diffusion(req, load_hardware("h200"), limits=False).costs[0].forward
    out: dict[str, float] = defaultdict(float)
    for t, c in zip(fwd["times"], fwd["classes"]):
        out["nonvec" if c == "geglu_mul" or (c == "transpose" and not copies_apart) else c] += t.gpu_s
    return out


@lru_cache(maxsize=None)
def _classes(name: str) -> tuple[dict, dict]:
    if name == "svd14":
        r = json.loads(SVD14.read_text())["measurements"][0]["result"]
    else:
        r = _result(name)
    return planned_classes(_request("svd-xt/denoiser-14f" if name == "svd14" else name, r)), measured_classes(r)


def test_vae_table_sets_the_moments_convolutions_broadcasts_and_wide_head():
    """The SDXL VAE decode at 1024x1024 (batch 1, fp16; its top 25 kernels are all of it): each constant it sets,
    derived again (the planned time of a class scales as 1 / its constant)."""
    plan, meas = _classes(VAE)
    assert sum(meas.values()) == pytest.approx(_result(VAE)["device_busy_s"], rel=1e-6)
    assert meas["gn_moments"] / _result(VAE)["device_busy_s"] > 0.5  # GroupNorm's moments: half the decode
    assert dtime.GN_BLOCK_FRACTION * plan["gn_moments"] / meas["gn_moments"] == pytest.approx(0.082, abs=0.001)
    conv = dtime.CONV_EFFICIENCY * plan["conv"] / meas["conv"]
    assert conv == pytest.approx(1.047, abs=0.005) and dtime.CONV_EFFICIENCY == 1.0  # kept at the GEMM rate
    plan, meas = planned_classes(_request(VAE, _result(VAE)), True), measured_classes(_result(VAE), True)
    nonvec = dtime.NONVEC_BW_FRACTION * (plan["gn_apply"] + plan["nonvec"]) / (meas["gn_apply"] + meas["nonvec"])
    assert nonvec == pytest.approx(dtime.NONVEC_BW_FRACTION, abs=0.005)
    vec = dtime.VEC_BW_FRACTION * plan["vec"] / meas["vec"]
    assert vec == pytest.approx(1.08, abs=0.01) and dtime.VEC_BW_FRACTION == 1.0  # kept at the copy rate
    ups = dtime.UPSAMPLE_BW_FRACTION["upsample"]
    assert ups * plan["upsample"] / meas["upsample"] == pytest.approx(ups, abs=0.003)
    assert dtime.WIDE_HEAD_FRACTION * plan["attention"] / meas["attention"] == pytest.approx(0.2, abs=0.005)


def test_vae_batch2_table_sets_the_channels_last_copies_and_upsample():
    """The SDXL VAE decode at 768x768 batch 2: its channels-last stream's copies to NCHW (17 direct copies) and
    the NHWC upsample kernels set TRANSPOSE_BW_FRACTION and the NHWC upsample rate; its peak is the structure's
    check (no constant: the upsampler convolutions take channels-last input in place, no layout buffers)."""
    r = _result(VAE2)
    plan, meas = planned_classes(_request(VAE2, r), True), measured_classes(r, True)
    t = dtime.TRANSPOSE_BW_FRACTION
    assert t * plan["transpose"] / meas["copy"] == pytest.approx(t, abs=0.002)
    nhwc = dtime.UPSAMPLE_BW_FRACTION["upsample_nhwc"]
    assert nhwc * plan["upsample_nhwc"] / meas["upsample_nhwc"] == pytest.approx(nhwc, abs=0.002)
    assert abs(errors(VAE2, "catalog")["peak"]) < 0.01


def test_fp32_table_sets_the_wide_head_and_the_element_bound_paths():
    """The SDXL VAE decode at 1024x1024 in fp32 (call 3): the wide head's 3xTF32 kernel and the element-bound
    paths' fp32 factor derived again; GroupNorm's moments take the fp16 decode's time (the rate is per element)."""
    r = _result(VAE32)
    plan = planned_classes(_request(VAE32, r), True)
    meas = measured_classes(r, True)
    frac = dtime.WIDE_HEAD_FP32_FRACTION
    assert frac * plan["attention"] / meas["attention"] == pytest.approx(frac, abs=0.002)
    f = dtime.FP32_ELEMENT_BOUND_FACTOR
    bound = ("nonvec", "gn_apply", "layout")
    fit = f * (sum(plan[k] for k in bound) + plan["transpose"]) / (sum(meas[k] for k in bound) + meas["copy"])
    assert fit == pytest.approx(f, abs=0.01)
    assert meas["gn_moments"] / _classes(VAE)[1]["gn_moments"] == pytest.approx(1.03, abs=0.01)


def test_wide_head_attention_is_not_where_the_vae_time_went():
    """The first set attributed 49.4 ms of this decode to its head_dim-512 attention by elimination; the kernel
    table gives that kernel 3.7 ms and GroupNorm's moments 44.7."""
    _, meas = _classes(VAE)
    assert meas["attention"] == pytest.approx(0.00368, abs=0.0001)
    assert meas["gn_moments"] == pytest.approx(0.0447, abs=0.0002)


def test_svd_table_sets_layer_norm_and_geglu():
    """SVD-XT's UNet at 14 frames (the second set's table): LayerNorm and GEGLU's GELU derived again; GEGLU's
    multiply is what its non-vectorized kernels leave after the other non-vectorized ops at NONVEC_BW_FRACTION."""
    plan, meas = _classes("svd14")
    assert dtime.LAYER_NORM_BW_FRACTION * plan["layer_norm"] / meas["layer_norm"] == pytest.approx(0.245, abs=0.005)
    gelu = dtime.GEGLU_BW_FRACTION["geglu_gelu"]
    assert gelu * plan["geglu_gelu"] / meas["geglu_gelu"] == pytest.approx(gelu, abs=0.002)
    fwd = plan_diffusion(DiffusionRequest(model="svd-xt", height=576, width=1024, frames=14, cfg=True,
                                          component="denoiser"), load_hardware("h200"), limits=False).costs[0].forward
    mul = sum(t.gpu_s for t, c in zip(fwd["times"], fwd["classes"]) if c == "geglu_mul")
    frac = dtime.GEGLU_BW_FRACTION["geglu_mul"]
    assert frac * mul / (meas["nonvec"] - (plan["nonvec"] - mul)) == pytest.approx(frac, abs=0.01)


# (point, class): planned / measured - 1 at the points no constant was set on (top 25 kernels; convolutions are
# partly outside SVD-XT's top 25, so its row is an upper bound on the planned side)
CLASS_CHECKS = {
    (SVD20, "gn_moments"): -0.055, (SVD20, "layer_norm"): -0.011, (SVD20, "geglu_gelu"): -0.005,
    (SVD20, "nonvec"): -0.011, (SVD20, "gn_apply"): 0.012, (SVD20, "attention"): -0.009, (SVD20, "gemm"): -0.069,
    (SVD20, "vec"): 0.046, (SVD20, "layout"): -0.159, (SVD20, "conv"): 0.261,
    (VAE2, "gn_moments"): -0.020, (VAE2, "conv"): 0.009, (VAE2, "gn_apply"): 0.031, (VAE2, "attention"): -0.219,
    (VAE2, "layout"): -0.191, (VAE2, "nonvec"): -0.080, (VAE2, "vec"): -0.039,
    (UNET, "gemm"): 0.022, (UNET, "layer_norm"): 0.050, (UNET, "gn_apply"): -0.060, (UNET, "geglu_gelu"): -0.144,
    (UNET, "nonvec"): -0.108, (UNET, "vec"): -0.108, (UNET, "attention"): -0.162, (UNET, "conv"): -0.143,
    (UNET, "gn_moments"): 0.363, (UNET, "layout"): -0.724,
    (SD3, "gemm"): 0.052, (SD3, "attention"): 0.405, (SD3, "layer_norm"): 0.839, (SD3, "nonvec"): -0.343,
    (SD3, "vec"): -0.474,
}


@pytest.mark.parametrize("key", sorted(CLASS_CHECKS))
def test_kernel_class_at_the_independent_points(key):
    name, cls = key
    plan, meas = _classes(name)
    assert plan[cls] / meas[cls] - 1 == pytest.approx(CLASS_CHECKS[key], abs=0.005)


def test_sd3_sin_cos_table_is_held_with_the_weights():
    """SD3.5-medium held 0.49 GB after load beyond its parameters: PatchEmbed's persistent sin-cos buffer,
    384^2 x 1,536 in fp16 (0.45 GB; the rest: its conditioning inputs and cuBLAS's workspace). The plan holds it
    with the weights (dit.sd3)."""
    r = _result(SD3)
    plan = _plan(SD3, "catalog")
    assert r["mem_after_load_bytes"] - r["weights_bytes"]["transformer"] == pytest.approx(0.489e9, rel=0.01)
    assert plan.costs[0].weight_bytes - r["weights_bytes"]["transformer"] == 384 * 384 * 1536 * 2
    assert plan.costs[0].weight_bytes / r["mem_after_load_bytes"] - 1 == pytest.approx(-0.007, abs=0.002)


# ---- model offload -------------------------------------------------------------------------------------------

def test_model_offload_d2h_and_the_allocator_probe():
    """The bench's probe of the UNet's move out (module.to("cpu"), 8.42 GB/s) sits within 6% of the module rate
    estimate/diffusion/offload.py plans from a later probe's resident moves (MODULE_D2H_FACTOR x 12.75 GB/s).
    Call 3's alloc probe (the same UNet moved with PyTorch's cache kept and after empty_cache, three rounds) rules
    the allocator out of the phases' extra time: emptying the cache of the UNet's 1,680 tensors took 15 ms, and the
    move in after it took no longer than with the cache kept; its first moves out (host memory not yet touched) ran
    6-9x slower than the later ones (first touch: the 2026-12-02 d probe counts a page fault each 4 KiB)."""
    from gpuscope.estimate.diffusion.offload import MODULE_D2H_FACTOR

    r = _result(MODEL)
    assert r["offload_d2h_gbs"] / (MODULE_D2H_FACTOR * 12.75) - 1 == pytest.approx(-0.054, abs=0.01)
    assert r["offload_h2d_gbs"] == pytest.approx(54.0 * PAGEABLE_FRACTION["h2d"], rel=0.05)  # the copy in: micro's
    probe = json.loads((RUN / "call3" / "gpu_diffusion3" / "gpu_diffusion3" / "alloc_probe.json").read_text())
    assert (probe["tensors"], probe["device"]) == (1680, "cuda")
    rounds = probe["rounds"]
    assert all(x["empty_cache_s"] < 0.02 for x in rounds)
    fresh = sum(x["h2d_fresh_blocks_s"] for x in rounds)
    cached = sum(x["h2d_cached_blocks_s"] for x in rounds)
    assert fresh < cached  # no allocator cost to find: 2.44 s against 2.95 s over the three rounds
    first, later = rounds[0]["d2h_cache_kept_s"], rounds[2]["d2h_cache_kept_s"]
    assert first / later > 6  # 4.52 s, then 0.52 s: first-touch of host pages
    # what the call left over the plan (its copies and forwards) on the run host: 2.59 s, about what the d probe's
    # second call met (2.0 s of fresh-page faults) plus its steady-state residual (third call +0.76 s over the plan)
    left = {m: r[k] - _plan(MODEL, "run_host").times[k] for m, k in
            (("text", "text_encode_s"), ("denoise", "denoise_s"), ("vae", "vae_decode_s"))}
    assert 2.0 + 0.76 - sum(left.values()) == pytest.approx(0.17, abs=0.05), left
