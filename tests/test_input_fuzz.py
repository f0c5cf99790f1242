"""Numbers that are not numbers: every numeric input of a config.json, a hardware TOML and the plan commands is
checked where it is parsed (specs/numbers.py). No input gives a traceback: a UserError (one sentence, exit 2) or
an estimate that is finite, positive and grows with batch and sequence."""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.cli import _run
from gpuscope.errors import UserError
from gpuscope.estimate.infer import estimate_infer
from gpuscope.explain.train_plan import TrainRequest, plan_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.hf_config import spec_from_config
from gpuscope.specs.models import load_model, preset_config
from gpuscope.specs.numbers import loads

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PRESETS = ["llama-3.2-1b", "mixtral-8x7b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "gemma-2-9b", "gpt2",
           "pythia-1.4b", "mistral-7b", "phi-3-mini", "qwen2.5-0.5b"]
FIELDS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
          "intermediate_size", "vocab_size", "max_position_embeddings", "sliding_window", "max_window_layers",
          "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "n_routed_experts",
          "n_shared_experts", "shared_expert_intermediate_size", "decoder_sparse_step", "first_k_dense_replace",
          "moe_layer_freq", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
          "n_embd", "n_layer", "n_head", "n_inner", "n_positions", "mlp_only_layers"]
WEIRD = st.one_of(
    st.integers(-3, 2**33), st.sampled_from([0, 1, 2, 8, 64, 2**31 - 1, 2**31, 2**63, 10**400, 100_001]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, 64.0, 1.5, -0.0]),
    st.booleans(), st.none(), st.text(max_size=3), st.lists(st.integers(-2, 40), max_size=3), st.just({}),
)
HW_FIELDS = ["memory_gb", "memory_bw_gbs", "bf16_tflops_dense", "fp16_tflops_dense", "tdp_w", "matmul_efficiency",
             "memory_bw_efficiency", "interconnect_gbs_bidir", "sm_count", "device_total_bytes", "launch_price_usd"]
MEASURED = ["memory_bw_gbs", "h2d_gbs", "host_launch_s", "host_forward_s", "intra_gbs"]
TOML_VALUES = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "+nan", "0", "-1", "1e308", "1e-300", "\"x\"", "true", "0.5", "2",
                     "1e30", "3e4", "[]"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr), st.integers(-5, 2**70).map(str),
)


def _numbers(d, path=""):
    if isinstance(d, bool):
        return
    if isinstance(d, (int, float)):
        yield path, d
    elif isinstance(d, dict):
        for k, v in d.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _numbers(v, f"{path}[{i}]")


def _check_estimate(est, time_keys) -> dict:
    d = est.to_json()
    bad = [p for p, v in _numbers(d) if not math.isfinite(v)]
    assert not bad, bad
    assert d["memory"]["peak_bytes_per_gpu"] > 0
    for k in time_keys:
        assert d["time"][k] > 0, (k, d["time"])
    return d


def _grows(small: dict, big: dict, time_keys) -> None:
    assert big["memory"]["peak_bytes_per_gpu"] > small["memory"]["peak_bytes_per_gpu"]
    for k in time_keys:
        assert big["time"][k] >= small["time"][k] * (1 - 1e-9), k


INFER_TIMES = ("prefill_s", "decode_s_per_token", "e2e_s")


def _plan_both(spec, hw, batch: int, seq: int) -> None:
    """Infer and train plans of (batch, seq), doubled in each: finite, positive, growing; or a UserError."""
    try:
        base = _check_estimate(estimate_infer(spec, hw, batch=batch, prompt=seq, gen=4), INFER_TIMES)
        for b, s in ((2 * batch, seq), (batch, 2 * seq)):
            _grows(base, _check_estimate(estimate_infer(spec, hw, batch=b, prompt=s, gen=4), INFER_TIMES),
                   INFER_TIMES)
    except UserError as e:
        assert "\n" not in str(e).strip()
    try:
        base = _check_estimate(plan_train(spec, hw, TrainRequest(micro_batch=batch, seq=seq)), ("step_s",))
        for b, s in ((2 * batch, seq), (batch, 2 * seq)):
            big = _check_estimate(plan_train(spec, hw, TrainRequest(micro_batch=b, seq=s)), ("step_s",))
            _grows(base, big, ("step_s",))
    except UserError as e:
        assert "\n" not in str(e).strip()


@FUZZ
@given(preset=st.sampled_from(PRESETS), changes=st.dictionaries(st.sampled_from(FIELDS), WEIRD, max_size=3),
       batch=st.integers(1, 8), seq=st.sampled_from([16, 128, 512]))
def test_config_numbers_never_traceback(preset, changes, batch, seq):
    cfg = {**preset_config(preset), **changes}
    try:
        spec = spec_from_config(loads(json.dumps(cfg), "--model: 'fuzz.json'"), name="fuzz")
    except UserError as e:
        assert "\n" not in str(e).strip() and "--model" in str(e)
        return
    if spec.num_layers <= 200:  # deeper ones plan too, only slower (linear in depth)
        _plan_both(spec, load_hardware("h200"), batch, seq)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(HW_FIELDS), TOML_VALUES, max_size=3),
       measured=st.dictionaries(st.sampled_from(MEASURED), TOML_VALUES, max_size=2), batch=st.integers(1, 4))
def test_hardware_numbers_never_traceback(fields, measured, batch):
    text = 'base = "h200"\n' + "".join(f"{k} = {v}\n" for k, v in fields.items())
    text += "[measured]\n" + "".join(f"{k} = {v}\n" for k, v in measured.items()) if measured else ""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hw.toml"
        path.write_text(text)
        try:
            hw = load_hardware(str(path))
        except UserError as e:
            assert "\n" not in str(e).strip()
            return
    _plan_both(load_model("llama-3.2-1b"), hw, batch, 128)


def _cli(args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _run(args)
    return code, out.getvalue(), err.getvalue()


@FUZZ
@given(flag=st.sampled_from([("infer", f) for f in ("--batch", "--prompt", "--gen", "--num-gpus", "--tp")] +
                            [("train", f) for f in ("--micro-batch", "--seq", "--grad-accum", "--lora-r")] +
                            [("train", "--lora-alpha"), ("train", "--lora-dropout")]),
       value=st.one_of(st.integers(-3, 2**40), st.sampled_from([10**400, 2**31, 2**31 - 1, "nan", "inf", "-inf"])))
def test_command_line_numbers_never_traceback(flag, value):
    (command, flag), extra = flag, (["--lora-r", "8"] if flag[1] in ("--lora-alpha", "--lora-dropout") else [])
    code, out, err = _cli(["plan", command, "--model", "llama-3.2-1b", "--gpu", "h200", flag, str(value), *extra,
                           "--json"])
    assert code in (0, 2)
    if code == 2:  # gpuscope's sentence, or click's usage error ("Error: Invalid value for '--batch': ...") last
        assert flag in err.strip().splitlines()[-1] and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1 or err.strip().splitlines()[-1].startswith("Error: ")
    else:
        assert all(math.isfinite(v) for _p, v in _numbers(json.loads(out)))


MIXTRAL = "mixtral-8x7b"
BAD_CONFIGS = [
    ("llama-3.2-1b", '"hidden_size": Infinity', "hidden_size"),
    ("llama-3.2-1b", '"hidden_size": NaN', "hidden_size"),
    ("llama-3.2-1b", '"hidden_size": 1e308', "hidden_size"),
    ("llama-3.2-1b", '"hidden_size": 1' + "0" * 400, "hidden_size"),
    ("llama-3.2-1b", '"max_position_embeddings": Infinity', "max_position_embeddings"),
    ("llama-3.2-1b", '"max_position_embeddings": "x"', "max_position_embeddings"),
    ("llama-3.2-1b", '"max_position_embeddings": -1', "max_position_embeddings"),
    ("llama-3.2-1b", '"num_hidden_layers": true', "num_hidden_layers"),
    ("llama-3.2-1b", '"num_hidden_layers": 16.5', "num_hidden_layers"),
    ("llama-3.2-1b", '"rope_theta": -Infinity', "rope_theta"),
    (MIXTRAL, '"num_experts_per_tok": 0', "num_experts_per_tok"),
    (MIXTRAL, '"num_experts_per_tok": -2', "num_experts_per_tok"),
    (MIXTRAL, '"num_experts_per_tok": 99', "num_experts_per_tok"),
    ("mistral-7b", '"sliding_window": -5', "sliding_window"),
    ("mistral-7b", '"sliding_window": 0', "sliding_window"),
]


def _config_text(preset: str, field: str) -> str:
    key = field.split(":")[0].strip().strip('"')
    cfg = {k: v for k, v in preset_config(preset).items() if k != key}
    return json.dumps(cfg)[:-1] + ", " + field + "}"


@pytest.mark.parametrize("preset, field, name", BAD_CONFIGS)
def test_bad_config_number_is_one_sentence(tmp_path, preset, field, name):
    p = tmp_path / "config.json"
    p.write_text(_config_text(preset, field))
    code, _out, err = _cli(["plan", "infer", "--model", str(p), "--gpu", "h200"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and name in err, err


def test_deep_json_is_one_sentence(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("[" * 200_000 + "]" * 200_000)
    code, _out, err = _cli(["plan", "infer", "--model", str(p), "--gpu", "h200"])
    assert code == 2 and "nested too deeply" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("field", ["memory_bw_gbs", "bf16_tflops_dense", "tdp_w", "memory_gb"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308"])
def test_bad_hardware_number_is_one_sentence(tmp_path, field, value):
    p = tmp_path / "hw.toml"
    p.write_text(f'base = "h200"\n{field} = {value}\n')
    with pytest.raises(UserError, match=field) as exc:
        load_hardware(str(p))
    assert "\n" not in str(exc.value).strip()
    p.write_text(f'base = "h200"\n[measured]\nmemory_bw_gbs = {value}\n')
    with pytest.raises(UserError, match="memory_bw_gbs"):
        load_hardware(str(p))


def _real_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=120)


def test_real_cli_exits_2_with_one_line(tmp_path):
    """Through `python -m gpuscope`: a config NaN, a Mixtral top-k of 0, a NaN bandwidth; exit 2, one line."""
    cfg = tmp_path / "cfg.json"
    moe = tmp_path / "moe.json"
    hw = tmp_path / "nan.toml"
    cfg.write_text(_config_text("llama-3.2-1b", '"hidden_size": NaN'))
    moe.write_text(_config_text(MIXTRAL, '"num_experts_per_tok": 0'))
    hw.write_text('base = "h200"\nmemory_bw_gbs = nan\n')
    for args, name in ((["--model", str(cfg), "--gpu", "h200"], "hidden_size"),
                       (["--model", str(moe), "--gpu", "h200"], "num_experts_per_tok"),
                       (["--model", "llama-3.2-1b", "--gpu", str(hw)], "memory_bw_gbs"),
                       (["--model", "llama-3.2-1b", "--gpu", "h200", "--batch", "1" + "0" * 400], "--batch")):
        r = _real_cli("plan", "infer", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and name in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
