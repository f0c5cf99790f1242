"""The planner's CPU model (estimate/cpu.py): a hardware entry with this host's per-op costs ([measured.cpu]) is
priced as a CPU (each op's compute at the GEMM rate of its rows, in series with its dispatch; the unfused AdamW
loop), every other entry exactly as before; and a CPU case's timed phases end at their budget
(measure/runner/progress.py). No torch here."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpuscope.cli import bench_cpu
from gpuscope.estimate import cpu as cpumod
from gpuscope.estimate import ops as opsmod
from gpuscope.estimate.engines import engine_for
from gpuscope.estimate.infer import estimate_infer
from gpuscope.estimate.platform import platform_for
from gpuscope.estimate.train import estimate_train
from gpuscope.measure.runner import progress
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.hf_config import spec_from_config
from gpuscope.specs.models import load_model

CPU_TOML = """name = "test cpu (calibrated)"
vendor = "unknown"
memory_gb = 24
memory_bw_gbs = 20.0
matmul_efficiency = 1.0
memory_bw_efficiency = 1.0
fp32_tflops_dense = 0.2
bf16_tflops_dense = 0.4
source = "test"
efficiency_source = "1.0"

[measured]
memory_bw_gbs = 20.0
host_launch_s = {op_s}
host_forward_s = 0.0003
host_step_s = 0.0005
host_setup_s = 0.002

[measured.matmul_tflops]
fp32 = 0.2
bf16 = 0.4

[measured.cpu]
gpt2_op_s = {gpt2_op_s}
gpt2_forward_s = 0.0004
gemm_rows = [1, 4, 16, 64, 256]
gemm_tflops = {rates}
elementwise_cache_gbs = 80.0
elementwise_dram_gbs = 25.0
first_touch_gbs = 3.0
"""
RATES = [0.01, 0.02, 0.1, 0.16, 0.2]
LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 8,
         "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
         "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def _cpu(tmp_path, name="cpu.toml", op_s=8e-6, gpt2_op_s=2.4e-5, rates=RATES):
    p = tmp_path / name
    p.write_text(CPU_TOML.format(op_s=op_s, gpt2_op_s=gpt2_op_s, rates=rates))
    return load_hardware(str(p))


def _without_cpu_table(hw):
    return replace(hw, measured={k: v for k, v in hw.measured.items() if k != "cpu"})


def test_only_an_entry_with_measured_cpu_costs_is_priced_as_a_cpu(tmp_path):
    hw = _cpu(tmp_path)
    assert cpumod.cpu_costs(hw) is not None and engine_for("eager", hw).cpu is not None
    assert platform_for(hw).name.startswith("CPU")
    for gpu in ("h100", "h200", "mi300x", "a770"):  # catalog accelerators: the accelerator model, untouched
        g = load_hardware(gpu)
        assert cpumod.cpu_costs(g) is None
        assert engine_for("eager", g).cpu is None and not platform_for(g).name.startswith("CPU")
    assert cpumod.cpu_costs(_without_cpu_table(hw)) is None


@pytest.mark.parametrize("bad", [{"gemm_rows": [1, 4], "gemm_tflops": [0.1]},  # unequal lengths
                                 {"gemm_rows": [4, 1], "gemm_tflops": [0.1, 0.2]},  # rows not increasing
                                 {"gemm_tflops": [0.1, -1, 0.2, 0.3, 0.4]},  # a rate that is not positive
                                 {"elementwise_dram_gbs": "fast"}, {"gemm_rows": "1,4"}])
def test_a_cpu_table_that_describes_no_cpu_is_not_used(tmp_path, bad):
    hw = _cpu(tmp_path)
    cpu = dict(hw.measured["cpu"], **bad)
    assert cpumod.cpu_costs(replace(hw, measured=dict(hw.measured, cpu=cpu))) is None


def test_the_gemm_rate_by_rows_interpolates_in_log_rows_and_never_falls(tmp_path):
    c = cpumod.cpu_costs(_cpu(tmp_path, rates=[0.01, 0.004, 0.1, 0.16, 0.2]))  # a loaded host's dip at 4 rows
    assert c.tflops[1] == 0.01  # an M-row GEMM runs at least as fast as row slices of it
    assert c.gemm_tflops(1) == c.gemm_tflops(0.5) == 0.01 and c.gemm_tflops(4096) == 0.2  # flat beyond the ends
    assert c.gemm_tflops(8) == pytest.approx(0.01 + 0.5 * (0.1 - 0.01))  # 8 is halfway from 4 to 16 in log rows
    assert c.gemm_tflops(32, scale=2.0) == pytest.approx(2 * (0.1 + 0.5 * 0.06))


def test_a_cpu_forward_is_its_ops_compute_plus_their_dispatch_in_series(tmp_path):
    m = spec_from_config(LLAMA)
    kernels = sum(o.kernels * o.count for o in opsmod.forward_ops(m, 1, 32, 0, 4.0, 4.0, 4.0, head_tokens=1,
                                                                  head_w_b=4.0))
    runs = [estimate_infer(m, _cpu(tmp_path, f"{x}.toml", op_s=x), batch=1, prompt=32, gen=8, dtype="fp32")
            for x in (8e-6, 16e-6)]
    t0, t1 = (r.time for r in runs)
    assert t0["prefill_gpu_s"] == t1["prefill_gpu_s"]  # the compute does not depend on the dispatch
    # doubling the cost per kernel adds exactly the prompt forward's kernels once more: nothing overlaps
    assert t1["prefill_s"] - t0["prefill_s"] == pytest.approx(kernels * 8e-6, rel=1e-9)
    assert t0["prefill_s"] == pytest.approx(t0["prefill_gpu_s"] + kernels * 8e-6 + 0.0003 + 0.0005 + 0.002,
                                            rel=1e-9)
    assert t0["decode_s_per_token"] == pytest.approx(t0["decode_gpu_s"] + t0["decode_host_s"], rel=1e-9)


def test_a_short_prompts_gemms_run_at_the_rate_of_their_rows_not_the_peak(tmp_path):
    m = spec_from_config(LLAMA)
    hw = _cpu(tmp_path)
    flat = _cpu(tmp_path, "flat.toml", rates=[0.2] * 5)  # every row count at the large-GEMM rate
    slow, fast = (estimate_infer(m, h, batch=1, prompt=32, gen=8, dtype="fp32").time["prefill_gpu_s"]
                  for h in (hw, flat))
    mm = [o for o in opsmod.forward_ops(m, 1, 32, 0, 4.0, 4.0, 4.0, head_tokens=1, head_w_b=4.0)
          if o.kind == "matmul"]
    c = cpumod.cpu_costs(hw)
    extra = sum(o.count * (max(o.flops / (c.gemm_tflops(o.matmul_shape[0]) * 1e12), o.bytes / 25e9)
                           - max(o.flops / 0.2e12, o.bytes / 25e9)) for o in mm)
    assert slow - fast == pytest.approx(extra, rel=1e-9) and extra > 0.3 * fast


def test_gpt2_gets_the_cost_per_kernel_measured_on_tiny_gpt2s(tmp_path):
    hw = _cpu(tmp_path)
    g2, ll = load_model("gpt2"), spec_from_config(LLAMA)
    assert cpumod.for_model(engine_for("eager", hw), g2).launch_s == 2.4e-5
    assert cpumod.for_model(engine_for("eager", hw), ll).launch_s == 8e-6
    h100 = engine_for("eager", load_hardware("h100"))
    assert cpumod.for_model(h100, g2) is h100  # an accelerator's engine is left as it is


def test_a_cpu_training_step_runs_the_unfused_adamw_loop_in_series(tmp_path):
    m = spec_from_config(LLAMA)
    hw = _cpu(tmp_path)
    est = estimate_train(m, hw, micro_batch=1, seq=128, precision="fp32", fused=True)
    t = est.time
    P = 8 * (512 * (512 + 256 + 256 + 512) + 3 * 512 * 1408 + 2 * 512) + 2 * 32000 * 512 + 512
    assert t["optimizer_s"] >= 20 * 4 * P * 0.99 / 25e9  # AdamW's 20 accesses a parameter, not the fused 7
    # the embedding and the untied head (65.5 MB each) are made anew each step: gradients and two temporaries each
    big = cpumod.large_tensor_bytes(m, 4.0)
    assert big == 2 * 32000 * 512 * 4.0
    assert cpumod.fresh_memory_s(m, 4.0, 128 * 32000 * 4.0, cpumod.cpu_costs(hw)) == (3 * big / 3e9, 0.0)
    assert t["step_s"] == pytest.approx(t["forward_s"] + t["backward_s"] + t["optimizer_s"], rel=1e-9)
    assert est.time["host_s_per_micro_batch"] > 0 and math.isfinite(t["step_s"])


def test_the_cpu_says_how_it_was_priced(tmp_path):
    est = estimate_infer(spec_from_config(LLAMA), _cpu(tmp_path), batch=1, prompt=32, gen=8, dtype="fp32")
    text = " ".join(est.assumptions)
    assert "on the CPU" in text and "in series" in text and "GEMM rate by rows" in text
    assert "host (launch)-bound" not in text


def test_a_timed_phase_ends_at_its_budget_after_two_repeats(monkeypatch):
    clock = iter(range(0, 1000, 10))  # every look at the clock is 10 s later: the phase's start, then before
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))  # each repeat past the second
    monkeypatch.setenv(progress.BUDGET_ENV, "15")
    assert list(progress.repeats("timed", iter(range(6)), 6)) == [0, 1, 2]  # 10 s in at the third, 20 at the fourth
    monkeypatch.setenv(progress.BUDGET_ENV, "1000")
    assert list(progress.repeats("timed", iter(range(6)), 6)) == list(range(6))
    for bad in ("", "soon", "-1", "nan", "inf"):  # no budget: every repeat asked for runs
        monkeypatch.setenv(progress.BUDGET_ENV, bad)
        assert progress.budget_s() is None
        assert list(progress.repeats("timed", iter(range(6)), 6)) == list(range(6))


def test_a_cpu_training_case_takes_fewer_steps_unless_given(monkeypatch):
    monkeypatch.setattr(bench_cpu, "on_cpu", lambda device: True)
    given, note = bench_cpu.defaults("bench train", None, seq=None, precision=None, steps=None, warmup=None)
    assert (given["steps"], given["warmup"]) == (3, 1) and "--steps 3, --warmup 1" in note
    given, _ = bench_cpu.defaults("bench train", None, seq=None, precision=None, steps=8, warmup=0)
    assert (given["steps"], given["warmup"]) == (8, 0)  # given values are kept
    monkeypatch.setattr(bench_cpu, "on_cpu", lambda device: False)
    given, note = bench_cpu.defaults("bench train", None, seq=None, precision=None, steps=None, warmup=None)
    assert (given["steps"], given["warmup"], note) == (6, 2, None)  # an accelerator's, unchanged
