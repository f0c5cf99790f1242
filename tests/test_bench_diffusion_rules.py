"""The doctor's diffusion rules (explain/rules_diffusion.py) on synthetic `bench diffusion` results beside the
planner's plans for real presets: a launch-bound denoiser, attention that materialises its scores, and the OOM
levers ranked by the planner; registered with the other rules (explain/findings.RULES) and quiet without a
diffusion summary. No torch needed."""

from __future__ import annotations

from gpuscope.explain.findings import RULES, diagnose
from gpuscope.explain.rules_diffusion import (diagnose_point, diffusion_attention, diffusion_launch_bound,
                                              oom_levers)
from gpuscope.specs.hardware import load_hardware
from gpuscope.workloads.diffusion import DiffusionCase, request

H200 = "NVIDIA H200"


def _den(step, issue, busy=None, device="cuda", batch=2):
    r = {"status": "ok", "component": "denoiser", "device": device, "device_name": H200, "dtype": "fp16",
         "denoiser_step_s": step, "denoiser_enqueue_s": issue, "denoiser_batch": batch}
    return r if busy is None else {**r, "device_busy_s": busy}


def test_launch_bound_denoiser_at_batch_one():
    f = diffusion_launch_bound({"diffusion": {"result": _den(0.040, 0.038, busy=0.015)}})
    assert f is not None and f.code == "diffusion_launch_bound"
    assert abs(f.speedup - 0.040 / 0.015) < 1e-9 and f.severity == "high"
    assert f.evidence["why"] == "the device was busy 38% of the step"
    # device-bound (the host issues in 5 ms, the device is busy the whole step), a CPU run: quiet
    assert diffusion_launch_bound({"diffusion": {"result": _den(0.250, 0.005, busy=0.249)}}) is None
    assert diffusion_launch_bound({"diffusion": {"result": _den(0.040, 0.040, device="cpu")}}) is None


def test_launch_bound_from_the_plan_alone():
    """No profile: the host issuing for the whole step and the planner's host time above its GPU time (the SDXL
    UNet at 512, batch 1 with CFG, on an H200) say launch-bound; a host that issued in a quarter of the step does
    not, whatever the planner says."""
    from gpuscope.explain.rules_diffusion import plan_case

    case = DiffusionCase(model="sdxl", component="denoiser", batch=1, height=512, width=512)
    plan = plan_case(request(case), load_hardware("h200")).to_json()
    f = diffusion_launch_bound({"diffusion": {"result": _den(0.036, 0.035), "plan": plan}})
    assert f is not None and "planner's host time" in f.evidence["why"] and f.speedup > 1
    assert f.evidence["planner_host_s"] > f.evidence["planner_gpu_s"] > 0
    assert diffusion_launch_bound({"diffusion": {"result": _den(0.036, 0.009), "plan": plan}}) is None
    assert diffusion_launch_bound({"diffusion": {"result": _den(0.036, 0.035), "plan": None}}) is None


def test_materialised_attention_and_what_sdpa_saves():
    case = DiffusionCase(model="sd-1.5", component="denoiser", batch=4, height=768, width=768, attn="math")
    res = {**_den(0.5, 0.01, batch=8), "attention_processors": {"unet": {"AttnProcessor": 32}}}
    (f,) = [x for x in diagnose_point(case, res, "h200") if x.code == "diffusion_attention"]
    assert f.memory_saved_bytes > 2**30  # 8 x 8 heads x 9216^2 scores at 2 bytes, twice over, at the peak
    sdpa = {**res, "attention_processors": {"unet": {"AttnProcessor2_0": 32}}}
    assert diffusion_attention({"diffusion": {"result": sdpa, "case_attn": "sdpa"}}) is None


def test_oom_levers_ranked_by_the_planner():
    case = DiffusionCase(model="sdxl", component="pipeline", batch=8, height=1024, width=1024)
    hw = load_hardware("v100-16gb")
    tiers = oom_levers(request(case), hw)
    fit = [t for t in tiers if t["fits"]]
    assert fit and tiers[: len(fit)] == fit  # those that fit come first
    assert [t["slowdown"] for t in fit] == sorted(t["slowdown"] for t in fit)
    assert all(t["saved_bytes"] > 0 for t in fit)
    res = {"status": "oom", "phase": "pipeline", "kind": "diffusion", "component": "pipeline",
           "device_name": "Tesla V100-PCIE-16GB"}
    found = {f.code: f for f in diagnose_point(case, res, "v100-16gb")}
    f = found["diffusion_oom_tiers"]
    assert f.severity == "high" and f.evidence["tiers"] == tiers and fit[0]["lever"] in f.estimated_effect


def test_registered_with_the_doctor_and_quiet_without_a_diffusion_summary():
    from gpuscope.explain.rules_diffusion import RULES as MINE

    assert set(MINE) <= set(RULES)
    assert all(rule({}) is None for rule in MINE)
    codes = [f.code for f in diagnose({"diffusion": {"result": _den(0.040, 0.039, busy=0.012)}})]
    assert codes == ["diffusion_launch_bound"]
