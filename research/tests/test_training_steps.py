"""Training steps on one H200: the 7B MFU of the configuration `tune plan` recommends, the planner's training
host model (roofline.TrainHost: per-kernel forward/backward, checkpoint per layer, per-call costs) against the
fits it came from, kernel counts against the profiler's, and full recompute re-running the layers only.

Results: research/results/2026-11-29-h200-b, -d, 2026-11-30-h200-f, -g, -i, -j (README.md in each).
"""

from __future__ import annotations

import json

import pytest

from gpuscope.explain.compare import compare_record
from gpuscope.specs.hardware import hardware_for_device as hardware_for, load_hardware

from results_data import nov29_b, nov29_d, nov30_f, nov30_g, nov30_i, nov30_j


def test_recommended_7b_training_reaches_45_percent_mfu():
    """llama-2-7b, pure bf16, fused AdamW, no recompute, micro-batch 4 x 8 accumulated, on one H200.
    MFU = the planner's model FLOPs per token (6 x matmul params + attention) x measured tokens/s / 989.5 TFLOP/s."""
    from gpuscope.workloads import estimate_for

    rec = next(r for r in nov29_b.RECORDS if r["case_id"].startswith("train/llama-2-7b/mb4-ga8-"))
    est = estimate_for(rec["case"], hardware_for(rec["result"]["device_name"]))
    mfu = est.flops["model_per_token"] * rec["result"]["tokens_per_s"] / 989.5e12
    assert mfu >= 0.45, mfu  # 50.1% measured
    plain = next(r for r in nov29_b.RECORDS if r["case_id"].startswith("train/llama-2-7b/mb1-s2048-amp-bf16"))
    assert est.flops["model_per_token"] * plain["result"]["tokens_per_s"] / 989.5e12 < 0.35  # plain AMP: 32.1%


def test_training_host_fit_is_the_planners():
    """roofline.TrainHost is this file's fit, in units of the same call's decode launch cost (13.7 us)."""
    from gpuscope.estimate.engines import TRAIN_HOST

    th = json.loads((nov29_d.HERE / "train_host.json").read_text())
    launch = th["decode_host"]["host_launch_s"]
    assert launch == pytest.approx(13.7e-6, rel=0.01)
    by = {(r["family"], r["precision"], r["recompute"]): r for r in th["train"]}

    def slope(rs, key):
        from statistics import fmean
        xs = [x for r in rs for x in r["layers"]]
        ys = [y for r in rs for y in r[key]]
        mx, my = fmean(xs), fmean(ys)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)

    pooled = [by[("llama", p, "none")] for p in ("amp-bf16", "bf16", "amp-fp16")]
    assert slope(pooled, "forward_s") / 42 / launch == pytest.approx(TRAIN_HOST.fwd, rel=0.02)
    assert slope(pooled, "backward_s") / 42 / launch == pytest.approx(TRAIN_HOST.bwd, rel=0.02)
    full = [by[("llama", "amp-bf16", "full")]]  # its extra per layer over the pooled no-recompute fit
    ckpt = slope(full, "forward_s") - slope(pooled, "forward_s")  # the checkpoint's own, per layer
    refwd = slope(full, "backward_s") - slope(pooled, "backward_s")  # the backward's re-forward, per kernel
    assert ckpt / launch == pytest.approx(TRAIN_HOST.ckpt_layer, rel=0.02)
    assert refwd / 42 / launch == pytest.approx(TRAIN_HOST.recompute, rel=0.02)
    # GPT-2 fp32 with full recompute, forward + backward a layer: 2.85 ms measured; priced as roofline.TrainHost
    # says (21 planner kernels a layer), 2.87 ms; the whole extra per kernel (before the per-layer checkpoint), 2.43 ms
    g = by[("gpt2", "fp32", "full")]
    measured = g["forward_layer_s"] + g["backward_layer_s"]
    th = TRAIN_HOST
    now = launch * (21 * (th.fwd + th.bwd + th.recompute) + th.ckpt_layer)
    before = launch * 21 * (th.fwd + th.bwd + th.recompute + th.ckpt_layer / 42)
    assert measured == pytest.approx(2.85e-3, rel=0.01) and now == pytest.approx(measured, rel=0.02)
    assert before < 0.86 * measured


def test_gpt2_training_with_recompute_is_planned_within_15_percent_without_it_short():
    """Call 7 (doctor train, GPT-2 mb2 s128 amp-bf16, 5 steps, the bare run timed first): 58.7 ms a step with full
    recompute, 31.7 ms without; 1421 and 1049 kernels a step. Planned on the catalog H200 48.2 and 22.6 ms before the
    per-layer checkpoint (-18%, -29%); since the checkpoint is priced per layer and the per-call costs whole
    (roofline.TrainHost), 54.3 and 23.4 ms (-7%, -26%). Without recompute GPT-2 stays a known miss."""
    from gpuscope.estimate.train import estimate_train
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.models import load_model

    for name, rc, kernels, lo, hi in (("doctor_gpt2_full.json", "full", 1421, -0.15, 0.0),
                                      ("doctor_gpt2_none.json", "none", 1049, -0.30, -0.20)):
        p = json.loads((nov30_f.HERE / name).read_text())["profile"]
        bare = p["bare_s"] / p["steps"]
        est = estimate_train(load_model("gpt2"), load_hardware("h200"), micro_batch=2, seq=128, precision="amp-bf16",
                             optimizer="adamw", recompute=rc, fused=True).time["step_s"]
        assert p["kernels_per_step"] == kernels and p["case"]["recompute"] == rc
        assert lo < (est - bare) / bare < hi, (name, est, bare)


def test_the_planner_under_counts_training_kernels():
    """Device kernels per layer of a training forward (profiler, per phase): GPT-2 33, Llama 49 at tiny and real
    widths; the planner counts 25 and 42. Backward: GPT-2 52, Llama 96 (101 at 1B widths)."""
    from gpuscope.estimate.train import layer_kernels, train_forward_ops
    from gpuscope.measure.host.overhead import TINY
    from gpuscope.specs.hf_config import spec_from_config

    cases = {(c["name"], c["recompute"]): c
             for c in json.loads((nov30_g.HERE / "train_width_seq.json").read_text())["cases"]}

    def per_layer(c, phase):
        k, n = c["kernels"][phase], c["layers"]
        return (k[-1] - k[0]) / (n[-1] - n[0])

    measured = {name: per_layer(cases[(name, "none")], "forward") for name, _ in cases}
    assert measured == {"gpt2-tiny": 33, "gpt2-real": 33, "llama-tiny": 49, "llama-1b-width": 49}
    assert per_layer(cases[("gpt2-real", "none")], "backward") == 52
    assert per_layer(cases[("gpt2-real", "full")], "backward") == 84
    for name in measured:  # the planner's per-layer count does not depend on the widths
        fam = "gpt2" if name.startswith("gpt2") else "llama"
        spec = spec_from_config(dict(TINY[fam], **{("n_layer" if fam == "gpt2" else "num_hidden_layers"): 2}))
        planned = layer_kernels(train_forward_ops(spec, 2, 64, 2.0, 4.0), 2)[0] / 2
        assert planned == (25 if fam == "gpt2" else 42)
        assert 1.1 < measured[name] / planned < 1.35  # under-counted: GPT-2 by 24%, Llama by 14%


def test_the_missing_training_kernels_are_autocasts_weight_casts():
    """Call 5 (kernel_list.json, kernels by name one layer adds): Llama 14 bf16 casts a layer and GPT-2 11; the
    gap to the planner's forward count (7 and 8 kernels a layer) is the weights' (and GPT-2's biases') casts."""
    klist = json.loads((nov30_g.HERE / "kernel_list.json").read_text())

    def casts(fam):
        return sum(v for k, v in klist[fam]["forward"]["per_layer"].items() if "bfloat16_copy_kernel" in k)

    per_layer = {fam: sum(klist[fam]["forward"]["per_layer"].values()) for fam in klist}
    assert per_layer == {"gpt2": 33, "llama": 49} and casts("llama") == 14 and casts("gpt2") == 11
    # Llama: q, k, v, o, gate, up, down; GPT-2: c_attn, c_proj, c_fc, mlp c_proj, each weight and bias
    weight_casts = {"llama": 3 + 1 + 3, "gpt2": 2 * 4}
    planner = {"llama": 42, "gpt2": 25}
    assert {f: per_layer[f] - planner[f] for f in klist} == weight_casts


def test_interleaved_training_fits_are_lines():
    """The same 16 fits (4 models x 2 recompute x forward/backward): timed depth by depth in call 1, a point lay
    51% off its line; timed round-robin in call 2, at most 14%."""
    assert nov30_g.max_residual(nov30_g.HERE / "train_width_seq.json") > 0.45
    assert nov30_g.max_residual(nov30_g.HERE / "train_width_interleaved.json") < 0.15


def test_the_checkpoint_costs_per_layer_and_its_backward_per_kernel():
    """What full recompute adds to a layer's forward does not follow the layer's kernels (GPT-2: 21 planner
    kernels, Llama: 42; Llama fp32 runs SDPA's math path, more kernels still); what it adds to the backward does."""
    ckpt, per_kernel = {}, {}
    for sweep in (0, 1):
        by = nov30_i.by_sweep(sweep)
        for fam, prec, k in (("gpt2", "fp32", 21), ("gpt2", "amp-bf16", 25), ("llama", "amp-bf16", 42)):
            f, n = by[(fam, prec, "full")], by[(fam, prec, "none")]
            ckpt.setdefault(fam, []).append(f["forward_layer_s"] - n["forward_layer_s"])
            per_kernel.setdefault(fam, []).append((f["backward_layer_s"] - n["backward_layer_s"]) / k)
    assert all(0.2e-3 < x < 0.55e-3 for xs in ckpt.values() for x in xs)  # per layer, whatever the kernels
    assert all(33e-6 < x < 51e-6 for xs in per_kernel.values() for x in xs)
    # priced per kernel instead, GPT-2's checkpoint would be half Llama's
    assert min(ckpt["gpt2"]) < 0.55 * max(ckpt["llama"]) < max(ckpt["gpt2"])


@pytest.mark.parametrize("sweep, within", [(0, 7), (1, 8)])
def test_one_llama_calibration_plans_the_other_cases(sweep, within, monkeypatch, tmp_path):
    """At one host speed, the Llama amp-bf16 fits plan the eight cases' 2-layer steps within 15% in 15 of 16
    (the 16th, GPT-2 amp-bf16 full recompute, -15.1%); GPT-2 fp32 full recompute (the `bench all` case) -7% and
    -10%. The planner at daba888 (the whole recompute per kernel, the per-call costs net of Llama's 22 kernels
    outside the layers plus the model's own) missed 7 of 16 here: GPT-2 fp32 full -21% and -25%, GPT-2 amp-bf16
    full -26% and -25% (results README, section 2)."""
    steps = nov30_i.planned_steps(sweep, monkeypatch, tmp_path)
    errors = {k: est / meas - 1 for k, (est, meas) in steps.items()}
    assert sum(abs(e) <= 0.15 for e in errors.values()) == within and all(abs(e) < 0.16 for e in errors.values())
    assert -0.11 < errors[("gpt2", "fp32", "full")] < -0.06


def test_the_same_in_call3_on_a_slower_host(monkeypatch, tmp_path):
    """Call 3's one sweep (probes 8.2-12.6 ms against 7.2-10.7 in call 1): 7 of 8 within 15%, GPT-2 fp32 full
    -6%. GPT-2 amp-bf16 full stays the low one (-19%; -15% and -12% in call 1): autocast's casts, 11 a GPT-2 layer
    against the planner's 4 (research/results/2026-11-30-h200-g, section 3). The planner at daba888 missed 4 of 8."""
    errors = {k: est / meas - 1 for k, (est, meas) in
              nov30_i.planned_steps(0, monkeypatch, tmp_path, nov30_i.PHASES_CALL3).items()}
    assert sum(abs(e) <= 0.15 for e in errors.values()) == 7
    assert -0.20 < errors[("gpt2", "amp-bf16", "full")] < -0.15 and abs(errors[("gpt2", "fp32", "full")]) < 0.07


def test_call1_replanned_with_the_checkpoint_per_layer(monkeypatch, tmp_path):
    """Call 1's calibrations predate the split; refitted from their stored fits, the training rows (as run: Llama
    -21% and +15%, GPT-2 fp32 full -28% and +16%) read -21% and +15%, GPT-2 -14% and +36%. The +36%: that
    calibration's no-recompute backward read 0.87 ms a layer with a 1.76 ms intercept (the 8-layer point low), and
    the intercept now counts whole."""
    from gpuscope.explain.compare import compare_record
    from gpuscope.specs.hardware import load_hardware

    out = []
    for c, r in nov30_i.WORKLOADS:
        if c != "call1" or r["case"]["kind"] != "train":
            continue
        keys = nov30_i.training_keys(nov30_i.refit(nov30_i.HOST[(c, r["run_id"])], monkeypatch))
        text = nov30_i.toml(c, r["run_id"]).read_text()
        lines = [ln for ln in text.splitlines() if not ln.split("=")[0].strip() in keys]
        i = lines.index("[measured]") + 1
        lines[i:i] = [f"{k} = {v!r}" for k, v in keys.items()]
        p = tmp_path / f"{r['run_id']}.toml"
        p.write_text("\n".join(lines) + "\n")
        out += [row.error for row in compare_record(r, load_hardware(str(p))) if row.metric == "step_s"]
    assert [round(e, 2) for e in out] == [-0.21, -0.14, 0.15, 0.36]


def test_full_recompute_re_runs_the_layers_only():
    """The 1B AMP full-recompute step read 8-12% above the plan in every run as bench printed it; the plan re-ran the
    whole forward, the 128k-vocabulary head and loss included, which HF's checkpointing does not. Re-planned with
    the layers only: +2.0% to +5.7%; with the loss's backward at its kernels' traffic (estimate/loss.py, 22 bytes a
    logit, not 40): -1.2% to +2.4%. Its no-recompute twin: within 2% before, -1.9% to -3.6% after loss.py."""
    printed = [m["estimate"] for b in nov30_j.BENCH.values() for m in b["measurements"] if "rc_full" in m["name"]]
    printed = [r["error"] for e in printed for r in e["rows"] if r["metric"] == "step_s"]
    assert len(printed) == 6 and all(0.08 <= e <= 0.125 for e in printed)
    now = [r.error for run, r in nov30_j.rows() if r.metric == "step_s" and "rc_full" in r.case]
    assert len(now) == 7 and all(-0.02 < e < 0.03 for e in now)
    twin = [r.error for run, r in nov30_j.rows() if r.metric == "step_s" and "rc_none" in r.case]
    assert len(twin) == 7 and all(-0.04 < e < -0.015 for e in twin)
