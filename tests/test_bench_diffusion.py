"""`bench diffusion` on the CPU with tiny diffusers folders (tests/diffusion_tiny.py): every component kind built
with random weights and run as its pipeline runs it, the sweep end to end through the CLI with --json and the
store, out of memory as a result, a stalled child as a timeout, and bad input as one sentence with exit 2."""

from __future__ import annotations

import json
import sqlite3

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from diffusion_tiny import FOLDERS, write, write_all  # noqa: E402

from gpuscope.cli import main  # noqa: E402

BASE = {"kind": "diffusion", "batch": 1, "height": 16, "width": 16, "steps": 1, "dtype": "fp32", "repeats": 1,
        "warmup": 0, "device": "cpu"}
FRAMES = {"tiny-svd": 2, "tiny-cogvideox": 1}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_all(tmp_path_factory.mktemp("diffusion"))


def _run(cases, folder, **kw):
    from gpuscope.measure.diffusion.run import run_points

    out = []
    run_points(cases, folder, lambda c, r: out.append(r), **kw)
    return out


def _meta_params(folder, name) -> int:
    """sum(p.numel()) of the component built by diffusers / transformers themselves, on the meta device."""
    from gpuscope.measure.diffusion import build as b

    lib, cls = b.read_index(folder)[name]
    with torch.device("meta"):
        m = b.module_class(lib, cls).from_config(b.component_config(folder, name)) if lib == "diffusers" else \
            b.module_class(lib, cls)(b.transformers_config(b.module_class(lib, cls), b.component_config(folder, name)))
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_pipeline_of_each_kind(tiny, name):
    """One step of the whole pipeline runs every component of the folder: its text or image encoders, the
    denoiser through the folder's scheduler, the VAE; the parameters built are the library's own count."""
    case = {**BASE, "model": str(tiny[name]), "component": "pipeline"}
    if name in FRAMES:
        case["frames"] = FRAMES[name]
    (r,) = _run([case], tiny[name])
    assert r["status"] == "ok", r
    assert r["total_s"] >= r["denoise_s"] > 0 and r["vae_decode_s"] > 0 and r["text_encode_s"] > 0
    assert r["denoiser_batch"] == 2 * r["batch"] if r["cfg"] else r["batch"]
    for comp, n in r["params"].items():
        assert n == _meta_params(tiny[name], comp), comp
    assert r["peak_bytes"] is None  # a CPU has no allocator statistics: null, not zero
    if name == "tiny-sdxl":
        assert r["vae_upcast"] is False  # fp32 run: nothing to upcast


def test_math_attention_materialises_the_scores(tiny):
    """--attn math: diffusers' AttnProcessor in every attention layer of the UNet (SDPA's AttnProcessor2_0 else)."""
    folder = tiny["tiny-sd"]
    (math,) = _run([{**BASE, "model": str(folder), "component": "denoiser", "attn": "math"}], folder)
    assert math["status"] == "ok" and math["attention_processors"] == {"unet": {"AttnProcessor": 8}}


def test_t5_keeps_its_fp32_projections_in_fp16(tiny):
    from gpuscope.measure.diffusion.build import build

    t5 = build(tiny["tiny-flux"], "text_encoder_2", torch.device("cpu"), torch.float16)
    dtypes = {n: p.dtype for n, p in t5.named_parameters()}
    assert all(d == torch.float32 for n, d in dtypes.items() if ".wo." in n)
    assert dtypes["shared.weight"] == torch.float16


def test_out_of_memory_is_a_result_and_cfg_doubles_the_batch(tiny, monkeypatch):
    from gpuscope.measure.diffusion import inputs

    real = inputs.Denoiser.__call__

    def capped(self, x, t=999):  # a device memory cap: the denoiser at batch 4 does not fit
        if self.n >= 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(self, x, t)

    monkeypatch.setattr(inputs.Denoiser, "__call__", capped)
    folder = tiny["tiny-sd"]
    cases = [{**BASE, "model": str(folder), "component": "denoiser", "batch": b, "cfg": c}
             for b, c in ((2, True), (1, True), (2, False))]
    big, small, no_cfg = _run(cases, folder)
    assert big["status"] == "oom" and big["phase"] == "denoiser" and "out of memory" in big["error"]
    assert big["denoiser_batch"] == 4  # 2B with CFG
    assert small["status"] == no_cfg["status"] == "ok"
    assert small["denoiser_batch"] == 2 and no_cfg["denoiser_batch"] == 2
    assert small["denoiser_step_s"] > 0 and small["denoiser_enqueue_s"] > 0 and small["host_probe_s"] > 0


def test_a_build_out_of_memory_is_every_point_s_result(tiny, monkeypatch):
    from gpuscope.measure.diffusion import build as b

    def too_big(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 44.00 GiB")

    monkeypatch.setattr(b, "build", too_big)
    folder = tiny["tiny-sd"]
    rs = _run([{**BASE, "model": str(folder), "component": "denoiser", "batch": n} for n in (1, 2)], folder)
    assert [(r["status"], r["phase"]) for r in rs] == [("oom", "build"), ("oom", "build")]


def test_a_failing_point_is_an_error_result(tiny, monkeypatch):
    from gpuscope.measure.diffusion import run
    from gpuscope.measure.runner.run_case import error_result

    monkeypatch.setattr(run, "measure_vae", lambda *a: 1 / 0)
    folder = tiny["tiny-sd"]
    (r,) = _run([{**BASE, "model": str(folder), "component": "vae-decode"}], folder, on_error=error_result)
    assert r["status"] == "error" and "ZeroDivisionError" in r["error"]


def test_bench_diffusion_json_end_to_end(tiny, tmp_path, capsys):
    """Two points of a sweep, one process: each stored with its own key, the plan's rows and findings beside."""
    db = tmp_path / "r.sqlite"
    main(["bench", "diffusion", "--model", str(tiny["tiny-sd"]), "--batch", "2,1", "--height", "16", "--width", "16",
          "--steps", "1", "--repeats", "1", "--warmup", "0", "--dtype", "fp32", "--device", "cpu", "--gpu", "h200",
          "--db", str(db), "--json"])  # exit 0: no SystemExit
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gpuscope.bench/1"
    names = [m["name"] for m in doc["measurements"]]
    assert names == ["diffusion/tiny-sd/pipeline-b1-16x16-s1-fp32", "diffusion/tiny-sd/pipeline-b2-16x16-s1-fp32"]
    for m in doc["measurements"]:
        assert m["status"] == "ok" and m["result"]["images_per_s"] > 0
        rows = {r["metric"]: r for r in m["estimate"]["rows"]}
        assert set(rows) == {"total_s", "vae_decode_s", "text_encode_s"} and "h200" in m["estimate"]["hardware"]
        assert isinstance(m["findings"], list)
    with sqlite3.connect(db) as c:
        kinds = [k for (k,) in c.execute("select kind from measurements")]
    assert kinds == ["diffusion", "diffusion"]
    main(["bench", "diffusion", "--model", str(tiny["tiny-sd"]), "--batch", "1,2", "--height", "16", "--width", "16",
          "--steps", "1", "--repeats", "1", "--warmup", "0", "--dtype", "fp32", "--device", "cpu", "--gpu", "h200",
          "--db", str(db), "--json", "--resume"])  # nothing left to measure: no process started
    again = json.loads(capsys.readouterr().out)["measurements"]
    assert [m["skipped"] for m in again] == [True, True] and [m["name"] for m in again] == names


def test_weights_from_a_local_checkpoint(tiny, tmp_path, capsys):
    """--weights: each component through its library's from_pretrained (local files only) from a folder whose
    weights were saved by save_pretrained; the same parameters as built."""
    from gpuscope.measure.diffusion.build import build

    folder = write(tmp_path, "tiny-sd")
    assert "holds no *.safetensors" in _bad(capsys, "--model", str(folder), "--weights", "--height", "16",
                                            "--width", "16")
    for name in ("text_encoder", "vae"):  # a transformers and a diffusers module
        build(folder, name, torch.device("cpu"), torch.float32).save_pretrained(folder / name)
    from gpuscope.workloads.diffusion import DiffusionCase

    for comp, name in (("text-encoders", "text_encoder"), ("vae-decode", "vae")):
        case = {**BASE, "model": str(folder), "component": comp, "weights": True}
        DiffusionCase.from_dict(case)  # the checks pass now (the unet's weights are not needed)
        (r,) = _run([case], folder)
        assert r["status"] == "ok" and r["weights"] == "pretrained"
        assert r["params"] == {name: _meta_params(folder, name)}


def test_a_stalled_child_is_a_timeout(tiny):
    from gpuscope.measure.diffusion.spawn import run_group

    recs = []
    case = {**BASE, "model": str(tiny["tiny-sd"]), "component": "denoiser"}
    run_group([case], 0.05, recs.append)  # the child cannot even import torch in 50 ms
    assert [r["result"]["status"] for r in recs] == ["timeout"]


def _bad(capsys, *args) -> str:
    with pytest.raises(SystemExit) as e:
        main(["bench", "diffusion", *args, "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_bad_input_is_one_sentence(tiny, tmp_path, capsys):
    sd = str(tiny["tiny-sd"])
    (tmp_path / "empty").mkdir()
    assert "no model_index.json" in _bad(capsys, "--model", str(tmp_path / "empty"))
    odd = write(tmp_path, "tiny-sd")
    idx = json.loads((odd / "model_index.json").read_text())
    idx["unet"] = ["diffusers", "UNet3DConditionModel"]
    (odd / "model_index.json").write_text(json.dumps(idx))
    assert "UNet3DConditionModel" in _bad(capsys, "--model", str(odd))
    assert "--batch" in _bad(capsys, "--model", sd, "--batch", "0")
    assert "--height 33 is not divisible by 2" in _bad(capsys, "--model", sd, "--height", "33", "--width", "32")
    assert "--frames" in _bad(capsys, "--model", sd, "--frames", "4", "--height", "32", "--width", "32")
    assert "--component" in _bad(capsys, "--model", sd, "--component", "unet")
    assert "unknown diffusion preset" in _bad(capsys, "--model", "sdxxl")
    assert "--height and --width" in _bad(capsys, "--model", sd, "--height", "32,64,96", "--width", "32,64")
    assert "--timeout must be positive" in _bad(capsys, "--model", sd, "--timeout", "0")
    assert "UNets only" in _bad(capsys, "--model", str(tiny["tiny-flux"]), "--attn", "math", "--height", "16",
                                "--width", "16")


def test_device_busy_counts_each_kernel_once():
    """A profile lists each kernel as its own event and again inside its CPU op's self device time."""
    from types import SimpleNamespace as E

    from gpuscope.measure.diffusion.timing import busy_from

    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    events = [E(device_type=cpu, device_time_total=30.0, self_device_time_total=30.0),
              E(device_type=cuda, device_time_total=10.0, self_device_time_total=10.0),
              E(device_type=cuda, device_time_total=20.0, self_device_time_total=20.0)]
    assert busy_from(events) == {"device_busy_s": 30e-6, "kernels": 2}
    assert busy_from(events[:1]) == {"device_busy_s": 30e-6, "kernels": 0}
