"""Offload in `plan diffusion` (estimate/diffusion/offload.py): copies from pageable host memory at the host's
pageable rates, each in the phase that makes it (model offload: a module in when it runs, the one before out;
sequential: each running layer's weights at every forward plus a host cost per tensor), and the walkers' count of
the weights a forward runs, exact against the modules."""

from __future__ import annotations

import json

import pytest

from gpuscope.estimate.diffusion import DiffusionRequest, plan_diffusion
from gpuscope.estimate.diffusion.components import Shapes, trace_component
from gpuscope.estimate.diffusion.offload import (FAULT_S, MODULE_D2H_FACTOR, PAGE_BYTES, PAGEABLE_FRACTION,
                                                 TENSOR_LAUNCHES, fresh_bytes_bound, pageable_gbs)
from gpuscope.estimate.engines import engine_for
from gpuscope.estimate.train import host_link_gbs
from gpuscope.specs.diffusion import PRESET_DIR, load_pipeline
from gpuscope.specs.hardware import load_hardware


def _plan(hw, **kw):
    req = dict(model="sdxl", batch=1, height=1024, width=1024, steps=4, cfg=True)
    return plan_diffusion(DiffusionRequest(**{**req, **kw}), hw, limits=False)


@pytest.fixture(scope="module")
def measured_host(tmp_path_factory):
    p = tmp_path_factory.mktemp("hw") / "h200-pageable.toml"
    p.write_text('base = "nvidia_h200_sxm"\nname = "H200 with measured pageable copies"\n[measured]\n'
                 "h2d_pageable_gbs = 5.0\nd2h_pageable_gbs = 10.0\n")
    return load_hardware(str(p))


def test_pageable_rates_measured_or_a_fraction_of_the_pinned_link(measured_host):
    hw = load_hardware("h200")
    for way in ("h2d", "d2h"):
        assert pageable_gbs(hw, way) == pytest.approx(host_link_gbs(hw) * PAGEABLE_FRACTION[way])
    assert (pageable_gbs(measured_host, "h2d"), pageable_gbs(measured_host, "d2h")) == (5.0, 10.0)


def test_model_offload_moves_each_module_in_its_phase(measured_host):
    plain, model = _plan(measured_host), _plan(measured_host, offload="model")
    w = {c.name: c.weight_bytes for c in model.costs}
    n = {c.name: c.tensors for c in model.costs}
    t0, t = plain.times, model.times
    h2d, d2h = 5e9, 10e9 * MODULE_D2H_FACTOR  # a move out: one copy per tensor into a new host tensor
    assert n == {"text_encoder": 196, "text_encoder_2": 517, "unet": 1680, "vae": 248}  # each moved on its own
    # text: CLIP-L in, out when CLIP-bigG comes in; denoise: bigG out, the UNet in; decode: UNet out, VAE in and out
    assert t["text_encode_s"] - t0["text_encode_s"] == pytest.approx(
        (w["text_encoder"] + w["text_encoder_2"]) / h2d + w["text_encoder"] / d2h)
    assert t["denoise_s"] - t0["denoise_s"] == pytest.approx(w["unet"] / h2d + w["text_encoder_2"] / d2h)
    assert t["vae_decode_s"] - t0["vae_decode_s"] == pytest.approx(w["vae"] / h2d + (w["unet"] + w["vae"]) / d2h)
    assert t["offload_transfer_s"] == pytest.approx(t["total_s"] - t0["total_s"])
    assert t["step_s"] == t0["step_s"] and t["step_overhead_s"] == t0["step_overhead_s"]  # the UNet stays in


def test_sequential_offload_copies_the_running_layers_at_every_forward(measured_host):
    plain, seq = _plan(measured_host), _plan(measured_host, offload="sequential")
    launch = engine_for("eager", measured_host).launch_s
    c = {c.name: c for c in seq.costs}

    def copies(name):
        return c[name].run_bytes / 5e9 + c[name].run_tensors * TENSOR_LAUNCHES * launch

    assert seq.times["step_overhead_s"] - plain.times["step_overhead_s"] == pytest.approx(copies("unet"))
    assert seq.times["vae_decode_s"] - plain.times["vae_decode_s"] == pytest.approx(copies("vae"))
    assert c["vae"].run_bytes < c["vae"].weight_bytes  # a decode runs the decoder only, not the encoder
    assert seq.times["offload_transfer_s"] == pytest.approx(seq.times["total_s"] - plain.times["total_s"])


@pytest.mark.parametrize("preset", ["sdxl", "svd-xt", "flux.1-schnell"])
def test_run_weights_are_the_modules_own(preset):
    """The weights a forward runs, counted by the walkers, against the module built on the meta device: every
    parameter tensor (the VAE: its decoder and post_quant_conv)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    from gpuscope.measure.diffusion import build as b

    spec = load_pipeline(preset)
    folder = PRESET_DIR / spec.name
    for comp in spec.components.values():
        t = trace_component(comp, Shapes(2, 1, 1, 16, 16, frames=2, ctx_tokens=77, t5_tokens=16), 2.0, 2.0, "sdpa")
        lib, cls = b.read_index(folder)[comp.name]
        with torch.device("meta"):
            m = b.empty(lib, b.module_class(lib, cls), b.component_config(folder, comp.name))
        params = [p for n, p in m.named_parameters()
                  if comp.role != "vae" or n.startswith(("decoder.", "post_quant_conv."))]
        assert (t.run_tensors, t.run_params) == (len(params), sum(p.numel() for p in params)), comp.name
        assert t.tensors == len(list(m.parameters())), comp.name  # model offload moves every one


def test_model_offload_says_its_time_is_a_known_miss_and_the_other_modes_do_not():
    """`--offload model`'s time was measured 2x the plan on an H200 (research/results/2026-12-02-h200-c/diffusion.md):
    the plan says so in its assumptions; sequential offload (-5.9% on the run host) and no offload say nothing."""
    from cli_inproc import run_cli

    def assumptions(mode):
        r = run_cli("plan", "diffusion", "--model", "sdxl", "--gpu", "h200", "--steps", "2", "--offload", mode,
                    "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["assumptions"]

    model = assumptions("model")
    line = next(a for a in model if "first calls after loading" in a)
    fresh = sum(c.weight_bytes for c in _plan(load_hardware("h200"), steps=2).costs)  # every module moves out once
    assert f"+{fresh / PAGE_BYTES * FAULT_S:.1f} s" in line and f"{fresh / 1e9:.1f} GB" in line
    assert not any("known miss" in a for a in model)
    for mode in ("sequential", "none"):
        assert not any("first calls after loading" in a for a in assumptions(mode))
    assert fresh_bytes_bound(_plan(load_hardware("h200")).costs, "sequential") == 0.0