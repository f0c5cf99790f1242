"""`bench diffusion --offload` and `--profile` on the CPU with tiny diffusers folders (tests/diffusion_tiny.py):
model offload chains one accelerate hook per module in the pipeline's order and frees them at the end of a call,
sequential offload keeps every weight in a CPU state dict (meta on the module) and computes the same output, the
profile's kernel table groups events by name, the text encoders are also timed back to back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("accelerate")

from diffusion_tiny import write_all  # noqa: E402

from gpuscope.cli import main  # noqa: E402

BASE = {"kind": "diffusion", "batch": 1, "height": 16, "width": 16, "steps": 1, "dtype": "fp32", "repeats": 1,
        "warmup": 0, "device": "cpu"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_all(tmp_path_factory.mktemp("diffusion_offload"))


def _load(folder, **kw):
    from gpuscope.measure.device.device import Device
    from gpuscope.measure.diffusion.components import load

    return load({**BASE, "model": str(folder), "component": "pipeline", **kw}, folder, Device("cpu"))


def _run(case, folder):
    from gpuscope.measure.diffusion.run import run_points

    out = []
    run_points([case], folder, lambda c, r: out.append(r))
    return out[0]


def test_model_offload_chains_the_hooks_in_pipeline_order(tiny):
    mods = _load(tiny["tiny-sdxl"], offload="model")
    order = [*mods.encoders.values(), mods.denoiser, mods.vae]
    assert [h.model for h in mods.hooks] == order
    # each hook moves the module before it out when its own module runs (diffusers' model_cpu_offload_seq)
    assert [h.hook.prev_module_hook for h in mods.hooks[1:]] == mods.hooks[:-1]
    assert mods.hooks[0].hook.prev_module_hook is None
    assert _load(tiny["tiny-sdxl"]).hooks == []


def test_sequential_offload_streams_weights_and_computes_the_same(tiny):
    from gpuscope.measure.diffusion.components import denoiser_for, settings

    folder = tiny["tiny-sdxl"]
    plain, seq = _load(folder), _load(folder, offload="sequential")
    assert {p.device.type for p in seq.denoiser.parameters()} == {"meta"}  # the weights live in the hooks' map
    outs = []
    for mods in (plain, seq):
        t = settings({**BASE, "model": str(folder), "component": "denoiser"})
        den = denoiser_for(mods, t, torch.Generator().manual_seed(0))
        with torch.inference_mode():
            outs.append(den(den.expand(den.latents())))
    assert torch.allclose(outs[0], outs[1])


@pytest.mark.parametrize("mode", ["model", "sequential"])
def test_offloaded_pipeline_runs_and_is_its_own_case(tiny, mode):
    from gpuscope.workloads.diffusion import DiffusionCase

    folder = tiny["tiny-sdxl"]
    case = {**BASE, "model": str(folder), "component": "pipeline", "offload": mode}
    r = _run(case, folder)
    assert r["status"] == "ok" and r["total_s"] >= r["denoise_s"] > 0
    assert ("offload_h2d_gbs" in r) == (mode == "model")
    # minor page faults per phase of the timed calls (getrusage), and the bytes they stand for
    import resource

    faults = r["host_page_faults"]
    assert set(faults) == {"text", "denoise", "vae"} and all(v >= 0 for v in faults.values())
    assert r["host_fault_bytes"] == sum(r["host_page_faults"].values()) * resource.getpagesize()
    typed = DiffusionCase.from_dict(case)
    assert typed.name.endswith(f"-offload-{mode}")
    assert typed.key != DiffusionCase.from_dict({**case, "offload": "none"}).key


def test_a_plain_case_keeps_its_stored_key(tiny):
    """offload at its default is not written: cases stored before the field keep their keys."""
    from gpuscope.workloads.diffusion import DiffusionCase

    d = DiffusionCase.from_dict({**BASE, "model": str(tiny["tiny-sd"]), "component": "denoiser"}).to_dict()
    assert "offload" not in d


def test_profile_tables_on_vae_and_text(tiny):
    folder = tiny["tiny-sdxl"]
    vae = _run({**BASE, "model": str(folder), "component": "vae-decode", "profile": True}, folder)
    assert vae["status"] == "ok" and vae["device_busy_s"] is None  # a CPU has no device timeline
    names = [row["name"] for row in vae["kernel_table"]]
    assert any("conv" in n for n in names) and vae["profiled_host_s"] > 0
    assert 0 < sum(row["share"] for row in vae["host_ops"]) <= 1 + 1e-9
    text = _run({**BASE, "model": str(folder), "component": "text-encoders", "profile": True}, folder)
    assert set(text["text_profile"]) == set(text["text_encode_each_s"]) == {"text_encoder", "text_encoder_2"}
    assert text["text_encode_together_s"] > 0 and set(text["text_enqueue_each_s"]) == {"text_encoder",
                                                                                       "text_encoder_2"}


def test_table_groups_by_name():
    from types import SimpleNamespace as E

    from gpuscope.measure.diffusion.timing import table

    cuda = torch.autograd.DeviceType.CUDA
    ev = [E(name="gemm", device_type=cuda, device_time_total=30.0, self_cpu_time_total=0.0),
          E(name="gemm", device_type=cuda, device_time_total=10.0, self_cpu_time_total=0.0),
          E(name="copy", device_type=cuda, device_time_total=60.0, self_cpu_time_total=0.0)]
    assert table(ev, "cuda", 5) == [{"name": "copy", "calls": 1, "s": 60e-6, "share": 0.6},
                                    {"name": "gemm", "calls": 2, "s": 40e-6, "share": 0.4}]
    assert table(ev, "cuda", 1)[0]["name"] == "copy"
    assert table(ev, "cpu", 5) == []  # no host events


def test_bad_offload_is_one_sentence(tiny, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "diffusion", "--model", str(tiny["tiny-sd"]), "--offload", "disk", "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--offload 'disk' is not one of none, model, sequential." in err and len(err.splitlines()) == 1


def test_model_offload_pipeline_warms_up_four_calls_by_default(monkeypatch):
    """bench diffusion without --warmup: 4 untimed calls for a pipeline under --offload model, else the case's 2."""
    from gpuscope.cli import bench_diffusion as cli

    seen = []
    monkeypatch.setattr(cli, "run_sweep", lambda s, cases, gpu, timeout_s: seen.extend(cases))
    monkeypatch.setattr(cli.options, "require_torch", lambda: None)
    for offload, component, want in (("model", "pipeline", 4), ("none", "pipeline", None), ("model", "denoiser", None)):
        seen.clear()
        main(["bench", "diffusion", "--model", "sdxl", "--offload", offload, "--component", component,
              "--device", "cpu", "--json"])
        assert seen and all(c.get("warmup") == want for c in seen), (offload, component, seen)
