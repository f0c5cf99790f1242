"""`gpuscope plan diffusion` and estimate.diffusion: the contract's keys, bad input as one sentence (exit 2), and the
planner's identities: monotone in batch, resolution and frames; CFG doubles the denoiser's batch; offload lowers
the peak; VAE tiling lowers the decode's peak. No torch needed."""

from __future__ import annotations

import json
import shutil

import pytest

from gpuscope.errors import UserError
from gpuscope.estimate.diffusion import DiffusionRequest, plan_diffusion
from gpuscope.specs.diffusion import PRESET_DIR, load_pipeline
from gpuscope.specs.hardware import load_hardware

H200 = load_hardware("h200")


class _Result:
    def __init__(self, code, out, err):
        self.exit_code, self.output = code, out + err


@pytest.fixture
def cli(capsys):
    """Run `gpuscope plan diffusion ARGS` as main() does (exit code, stdout + stderr)."""
    from gpuscope import cli as gs

    def run(*args):
        code = gs._run(["plan", "diffusion", *args])
        captured = capsys.readouterr()
        return _Result(code or 0, captured.out, captured.err)

    return run


def _plan(**kw):
    kw.setdefault("model", "sdxl")
    return plan_diffusion(DiffusionRequest(**kw), H200, limits=False).to_json()


def test_cli_json_has_the_contract_keys(cli):
    r = cli("--model", "sdxl", "--gpu", "h200", "--batch", "2", "--height", "768", "--width", "768", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["schema"] == "gpuscope.estimate/1" and d["kind"] == "diffusion"
    for key in ("step_s", "vae_decode_s", "total_s", "text_encode_s"):
        assert d["time"][key] > 0
    assert d["memory"]["peak_bytes_per_gpu"] == round(max(d["memory"]["phases_bytes"].values()))
    assert isinstance(d["fits"], bool) and d["fits"]
    assert d["inputs"]["denoiser_batch"] == 4 and d["throughput"]["images_per_s"] > 0
    assert d["energy"]["j_per_image"] > 0 and d["limits"]["max_batch"] >= 2


def test_cli_text_output_and_video(cli):
    r = cli("--model", "svd-xt", "--gpu", "h100", "--frames", "14", "--steps", "5")
    assert r.exit_code == 0, r.output
    assert "s per clip" in r.output and "14 frames" in r.output


@pytest.mark.parametrize("args,words", [
    (("--batch", "0"), "--batch"),
    (("--height", "-8"), "--height"),
    (("--steps", "0"), "--steps"),
    (("--height", "1020"), "divisible by 8"),
    (("--model", "sd-3.5-medium", "--height", "1016"), "divisible by 16"),
    (("--model", "nosuchpreset"), "unknown diffusion preset"),
    (("--dtype", "int4"), "--dtype"),
    (("--component", "unet"), "--component"),
    (("--offload", "disk"), "--offload"),
    (("--frames", "8"), "makes images"),
])
def test_bad_input_is_one_sentence_exit_2(cli, args, words):
    base = ["--model", "sdxl", "--gpu", "h200"]
    r = cli(*base, *args)
    assert r.exit_code == 2, r.output
    assert words in r.output and "Traceback" not in r.output


def _folder(tmp_path, keep=("unet",), index_edit=None):
    src = PRESET_DIR / "sdxl"
    dst = tmp_path / "pipe"
    dst.mkdir()
    index = json.loads((src / "model_index.json").read_text())
    if index_edit:
        index.update(index_edit)
    (dst / "model_index.json").write_text(json.dumps(index))
    for name in keep:
        shutil.copytree(src / name, dst / name)
    return dst


def test_partial_folder_plans_what_it_holds_and_names_what_is_missing(tmp_path):
    d = _folder(tmp_path)
    out = _plan(model=str(d), component="denoiser")
    assert list(out["components"]) == ["unet"]
    with pytest.raises(UserError, match="vae/config.json, which --component vae-decode needs"):
        _plan(model=str(d), component="vae-decode")


def test_folder_without_model_index_and_unknown_class(cli, tmp_path):
    with pytest.raises(UserError, match="no model_index.json"):
        load_pipeline(str(tmp_path))
    d = _folder(tmp_path, index_edit={"unet": ["diffusers", "UNetMotionModel"]})
    r = cli("--model", str(d), "--gpu", "h200")
    assert r.exit_code == 2 and "UNetMotionModel" in r.output


def test_monotone_in_batch_resolution_and_frames():
    peaks, steps = [], []
    for b in (1, 2, 4, 8):
        d = _plan(batch=b, component="denoiser")
        peaks.append(d["memory"]["peak_bytes_per_gpu"])
        steps.append(d["time"]["step_s"])
    assert peaks == sorted(peaks) and steps == sorted(steps) and peaks[0] < peaks[-1]
    small, big = (_plan(height=s, width=s, component="denoiser") for s in (512, 1024))
    assert big["memory"]["peak_bytes_per_gpu"] > small["memory"]["peak_bytes_per_gpu"]
    assert big["time"]["step_s"] > small["time"]["step_s"]
    f14, f25 = (_plan(model="svd-xt", frames=f, component="denoiser") for f in (14, 25))
    assert f25["memory"]["peak_bytes_per_gpu"] > f14["memory"]["peak_bytes_per_gpu"]
    assert f25["components"]["unet"]["flops"] > f14["components"]["unet"]["flops"]


def test_cfg_doubles_the_denoiser_batch():
    cfg = _plan(batch=3, cfg=True, component="denoiser")
    plain = _plan(batch=6, cfg=False, component="denoiser")
    assert cfg["inputs"]["denoiser_batch"] == 6
    assert cfg["components"]["unet"]["flops"] == plain["components"]["unet"]["flops"]
    assert cfg["time"]["step_s"] == pytest.approx(plain["time"]["step_s"])
    half = _plan(batch=3, cfg=False, component="denoiser")
    assert cfg["components"]["unet"]["flops"] == pytest.approx(2 * half["components"]["unet"]["flops"], rel=1e-3)


def test_offload_lowers_the_peak_and_costs_transfers():
    none, model, seq = (_plan(model="flux.1-schnell", offload=o) for o in ("none", "model", "sequential"))
    p = [x["memory"]["peak_bytes_per_gpu"] for x in (none, model, seq)]
    assert p[0] > p[1] > p[2]
    assert none["time"]["offload_transfer_s"] == 0 < model["time"]["offload_transfer_s"]
    assert seq["time"]["total_s"] > model["time"]["total_s"] > none["time"]["total_s"]


def test_vae_tiling_and_slicing_lower_the_decode_peak():
    plain = _plan(model="sd-1.5", height=1536, width=1536, component="vae-decode")
    tiled = _plan(model="sd-1.5", height=1536, width=1536, component="vae-decode", vae_tiling=True)
    assert tiled["memory"]["peak_bytes_per_gpu"] < plain["memory"]["peak_bytes_per_gpu"]
    four = _plan(model="sd-1.5", batch=4, component="vae-decode")
    sliced = _plan(model="sd-1.5", batch=4, component="vae-decode", vae_slicing=True)
    assert sliced["memory"]["peak_bytes_per_gpu"] < four["memory"]["peak_bytes_per_gpu"]


def test_math_attention_holds_the_score_matrix():
    sdpa = _plan(component="denoiser", height=1024, width=1024)
    math_ = _plan(component="denoiser", height=1024, width=1024, attention="math")
    # SDXL's 64x64 level: 4096 tokens, 10 heads, batch 2 (CFG): scores and probabilities in fp16
    scores = 2 * 10 * 4096 * 4096 * 2
    gap = math_["memory"]["peak_bytes_per_gpu"] - sdpa["memory"]["peak_bytes_per_gpu"]
    assert gap >= scores


def test_library_call_and_weights_per_dtype():
    fp16, fp32 = (_plan(model="sd-1.5", component="denoiser", dtype=d) for d in ("fp16", "fp32"))
    assert fp32["components"]["unet"]["weight_bytes"] == 2 * fp16["components"]["unet"]["weight_bytes"]
    assert fp16["components"]["unet"]["weight_bytes"] == 2 * 859_520_964


def test_compare_rows_costs_and_the_memory_tier_that_fits():
    from gpuscope.explain.compare_diffusion import compare_diffusion

    gpus = [load_hardware(g) for g in ("v100-16gb", "h100")]
    out = compare_diffusion(DiffusionRequest(model="svd-xt", frames=14, steps=2), gpus)
    v100, h100 = out["rows"]
    assert out["video"] and h100["fits"] and h100["s_per_clip"] < v100["s_per_clip"]
    assert not v100["fits"] and v100["fits_with"] == "--vae-slicing"  # the 14-frame decode needs ~16 GiB at once
    assert v100["peak_with_fix_bytes"] < 16 * 2**30 < v100["peak_bytes"]
    assert h100["j_per_unit"] > 0 and any(n.startswith("fastest: nvidia_h100") for n in out["notes"])
