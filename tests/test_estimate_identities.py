"""Identities and mechanisms the estimates must respect (parts vs whole, monotonicity, closed forms)."""

from __future__ import annotations

import pytest

from gpuscope.errors import UserError
from gpuscope.estimate.infer import estimate_infer
from gpuscope.estimate.infer_memory import kv_cache_bytes, weight_bytes
from gpuscope.estimate.params import count_params
from gpuscope.estimate.runtime import TRAIN_WORKSPACE_BYTES
from gpuscope.estimate.train import estimate_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

H100 = load_hardware("h100")
H200 = load_hardware("h200")


def test_kv_cache_gqa_llama31_8b():
    m = load_model("llama-3.1-8b")
    # 2 (K, V) x 8 KV heads x 128 x 32 layers x 2 bytes = 131,072 bytes per token
    assert kv_cache_bytes(m, 1, 1, "bf16") == 131072
    assert kv_cache_bytes(m, 4, 1000, "fp8") == 4 * 1000 * 65536


def test_kv_cache_sliding_window_caps_mistral():
    m = load_model("mistral-7b")
    assert m.sliding_window == 4096
    assert kv_cache_bytes(m, 1, 10000, "bf16") == kv_cache_bytes(m, 1, 4096, "bf16")


def test_kv_cache_mla_deepseek_v3_is_per_head_decompressed():
    m = load_model("deepseek-v3")
    # transformers caches K (128 nope + 64 rope) and V (128) for each of 128 heads in each of 61 layers
    assert kv_cache_bytes(m, 1, 1, "bf16") == 128 * (128 + 64 + 128) * 61 * 2


def test_quantized_weights_are_smaller_with_scales():
    m = load_model("llama-3.1-8b")
    bf16, int8, int4 = (weight_bytes(m, d)["weights"] for d in ("bf16", "int8", "int4"))
    pc = count_params(m)
    assert bf16 == pytest.approx(2 * pc.total)
    linear = pc.attention + pc.mlp
    # int4, group 128: 0.5 + 2.5/128 bytes per linear weight; embeddings, head and norms stay 16 bit
    assert int4 == pytest.approx(linear * (0.5 + 2.5 / 128) + 2 * (pc.total - linear))
    assert bf16 > int8 > int4


def test_tensor_parallel_splits_weights_and_kv():
    m = load_model("llama-3.1-70b")
    one = estimate_infer(m, H200, batch=8, prompt=2048, gen=128, num_gpus=1, tp=1)
    four = estimate_infer(m, H200, batch=8, prompt=2048, gen=128, num_gpus=4, tp=4)
    assert four.breakdown_bytes["weights"] < one.breakdown_bytes["weights"] / 3.5
    assert four.time["tp_comm_s_per_token"] > 0


def test_infer_monotonic_and_limits():
    m = load_model("qwen2.5-7b")
    small = estimate_infer(m, H100, batch=1, prompt=1024, gen=64)
    big = estimate_infer(m, H100, batch=32, prompt=4096, gen=64)
    assert big.peak_bytes_per_gpu > small.peak_bytes_per_gpu
    assert big.time["prefill_s"] > small.time["prefill_s"]
    assert small.limits["max_batch"] >= 32 or not big.fits
    at_limit = estimate_infer(m, H100, batch=small.limits["max_batch"], prompt=1024, gen=64)
    over = estimate_infer(m, H100, batch=small.limits["max_batch"] + 1, prompt=1024, gen=64)
    assert at_limit.fits and not over.fits


def test_graph_engine_removes_host_bound_decode():
    m = load_model("llama-3.1-8b")
    eager = estimate_infer(m, H200, batch=1, prompt=512, gen=64, engine="eager")
    graph = estimate_infer(m, H200, batch=1, prompt=512, gen=64, engine="graph")
    assert eager.time["decode_host_s"] > eager.time["decode_gpu_s"]  # plain generate is launch-bound at batch 1
    assert graph.time["decode_s_per_token"] < eager.time["decode_s_per_token"] / 3
    # graph decode can't beat streaming the weights once per token at the achievable bandwidth
    assert graph.time["decode_s_per_token"] >= graph.breakdown_bytes["weights"] / (H200.achievable_bw_gbs() * 1e9)


def test_hf_graph_is_the_graph_step_plus_host_in_series_and_the_tips_say_so():
    """hf-graph = the graph loop's GPU step + generate's step + the compiled call's host (fixed + per layer), not
    overlapped; an HF-generate estimate carries the other engines' TPOT and its tip quotes them."""
    from gpuscope.estimate.engines import ENGINES

    m = load_model("llama-3.1-8b")
    kw = dict(batch=1, prompt=128, gen=256)
    eager, hf, graph = (estimate_infer(m, H200, engine=e, **kw) for e in ("eager", "hf-graph", "graph"))
    assert hf.time["decode_gpu_s"] == pytest.approx(graph.time["decode_gpu_s"])
    assert hf.time["decode_serial_host_s"] == pytest.approx(ENGINES["hf-graph"].serial_host_s(m.num_layers))
    assert hf.time["decode_s_per_token"] == pytest.approx(hf.time["decode_gpu_s"] + hf.time["decode_serial_host_s"])
    assert eager.time["decode_s_per_token_if_graph"] == pytest.approx(graph.time["decode_s_per_token"])
    assert eager.time["decode_s_per_token_if_hf_graph"] == pytest.approx(hf.time["decode_s_per_token"])
    assert hf.time["decode_s_per_token_if_graph"] == pytest.approx(graph.time["decode_s_per_token"])
    assert "decode_s_per_token_if_hf_graph" not in hf.time and not any("_if_" in k for k in graph.time)
    (tip,) = [t for t in eager.suggestions if "launch-bound" in t]
    assert f"~{graph.time['decode_s_per_token'] * 1e3:.2f} ms/token" in tip and "--engine hf-graph" in tip
    (tip,) = [t for t in hf.suggestions if "waits on the GPU" in t]
    assert f"{hf.time['decode_serial_host_s'] * 1e3:.2f} of {hf.time['decode_s_per_token'] * 1e3:.2f} ms" in tip


def test_train_optimizer_phase_is_zero_16_bytes_per_param():
    # ZeRO section 3.1: mixed-precision Adam keeps 16 bytes per parameter of model states (here fp32 weights and
    # grads and two fp32 moments: 4 + 4 + 8); at the optimizer step all of them are live.
    m = load_model("llama-3.2-1b")
    est = estimate_train(m, H100, micro_batch=1, seq=512, precision="amp-bf16", optimizer="adamw")
    P = count_params(m).total
    assert est.phases_bytes["optimizer"] - TRAIN_WORKSPACE_BYTES == 16 * P


@pytest.mark.parametrize("change,lower", [
    ({"recompute": "full"}, True), ({"optimizer": "adamw-8bit"}, True), ({"precision": "bf16"}, True),
    ({"offload": "optimizer"}, True), ({"micro_batch": 1}, True), ({"grad_accum": 4}, False),
])
def test_train_memory_levers(change, lower):
    m = load_model("llama-3.2-3b")
    base = dict(micro_batch=2, seq=2048, precision="amp-bf16", optimizer="adamw", recompute="none")
    ref = estimate_train(m, H100, **base).peak_bytes_per_gpu
    got = estimate_train(m, H100, **{**base, **change}).peak_bytes_per_gpu
    assert (got < ref) if lower else (got >= ref)


def test_foreach_optimizer_allocates_temporaries():
    m = load_model("llama-3.2-1b")
    fused = estimate_train(m, H100, micro_batch=1, seq=256, fused=True)
    foreach = estimate_train(m, H100, micro_batch=1, seq=256, fused=False)
    assert foreach.phases_bytes["optimizer"] - fused.phases_bytes["optimizer"] == pytest.approx(
        4 * count_params(m).total)


def test_mfu_convention_and_recompute_hfu():
    m = load_model("llama-3.1-8b")
    est = estimate_train(m, H200, micro_batch=1, seq=4096, recompute="full")
    pc = count_params(m)
    per_token = 6 * pc.matmul_active + 12 * m.num_layers * 4096 * m.q_dim
    assert est.flops["model_per_token"] == pytest.approx(per_token)
    assert est.mfu == pytest.approx(per_token * 4096 / est.time["step_s"] / (989.5e12))
    assert est.hfu > est.mfu


def test_fp32_training_keeps_the_s2_attention_term():
    m = load_model("qwen2.5-0.5b")
    a = estimate_train(m, H100, micro_batch=1, seq=1024, precision="fp32").breakdown_bytes["activations"]
    b = estimate_train(m, H100, micro_batch=1, seq=2048, precision="fp32").breakdown_bytes["activations"]
    assert b > 2.2 * a  # superlinear in s: SDPA's math path saves b x heads x s^2 probabilities


def test_unsupported_precision_on_v100_is_a_user_error():
    with pytest.raises(UserError, match="bf16"):
        estimate_train(load_model("gpt2"), load_hardware("v100"), micro_batch=1, seq=128, precision="amp-bf16")


def test_ddp_adds_gradient_buckets_and_fsdp_shards_states():
    m = load_model("llama-3.1-8b")
    kw = dict(micro_batch=1, seq=2048, recompute="full")
    one = estimate_train(m, H200, **kw)
    ddp = estimate_train(m, H200, num_gpus=2, strategy="ddp", **kw)
    P = count_params(m).total
    # DDP's flat buckets: one more copy of the fp32 gradients in every phase
    for phase in ("forward", "backward", "optimizer"):
        assert ddp.phases_bytes[phase] - one.phases_bytes[phase] == pytest.approx(4 * P)
    f2 = estimate_train(m, H200, num_gpus=2, strategy="fsdp", **kw)
    f8 = estimate_train(m, H200, num_gpus=8, strategy="fsdp", **kw)
    assert f8.peak_bytes_per_gpu < f2.peak_bytes_per_gpu < one.peak_bytes_per_gpu
    # at the optimizer step FSDP holds sharded fp32 params + grads + AdamW (16 B/param / N), the root resharded
    # (fused AdamW: no temporaries)
    assert f8.phases_bytes["optimizer"] - TRAIN_WORKSPACE_BYTES == pytest.approx(16 * P / 8)
    assert f2.time["exposed_comm_s"] >= 0 and f2.throughput["tokens_per_s"] > one.throughput["tokens_per_s"]


def test_fsdp_limits_are_user_errors():
    with pytest.raises(UserError, match="fsdp"):
        estimate_train(load_model("gpt2"), H100, micro_batch=1, seq=128, num_gpus=2, strategy="fsdp",
                       precision="fp32")


def test_gemma2_eager_attention_keeps_the_s2_scores():
    """Gemma-2's soft-capping has no SDPA path in transformers: prefill materialises b x heads x s^2 scores."""
    g = load_model("gemma-2-9b")
    assert g.eager_attention and not load_model("llama-3.1-8b").eager_attention
    short = estimate_infer(g, H100, batch=1, prompt=2048, gen=8).breakdown_bytes["activations"]
    long_ = estimate_infer(g, H100, batch=1, prompt=8192, gen=8).breakdown_bytes["activations"]
    scores = 16 * 8192 * 8192 * (2 * 2 + 4 + 2)  # heads x s^2 x (scores, soft-capped, fp32 softmax, probs)
    assert long_ >= scores and long_ > 10 * short


def test_recommend_train_ranks_fitting_configurations():
    from gpuscope.explain.recommend import recommend_train

    m = load_model("llama-3.1-8b")
    choices = recommend_train(m, H200, seq=2048)
    assert choices and all(c.required_bytes <= H200.device_total_bytes for c in choices)
    speeds = [c.tokens_per_s for c in choices]
    assert max(speeds) == pytest.approx(speeds[0], rel=0.02)  # first is the fastest, up to the 2% tie band
    for c in choices:
        est = estimate_train(m, H200, micro_batch=c.micro_batch, seq=2048, precision=c.precision,
                             optimizer=c.optimizer, recompute=c.recompute, grad_accum=c.grad_accum)
        assert est.fits and est.throughput["tokens_per_s"] == pytest.approx(c.tokens_per_s)
    with pytest.raises(UserError):
        recommend_train(load_model("llama-3.1-405b"), H100, seq=8192)
    # the tie band is relative to the fastest: a configuration slightly slower that needs no extra package is not
    # ranked behind 8-bit AdamW or torchao/torch-optimi; pure bf16 is ranked only on request (explain/recommend.py),
    # so fp32 master weights at bf16 speed come first (llama-2-7b on an H200)
    top = recommend_train(load_model("llama-2-7b"), H200, seq=2048)
    assert (top[0].precision, top[0].optimizer, top[0].recompute, top[0].needs) == ("bf16-master", "adamw", "none", "")
    assert top[0].to_json()["needs"] == "" and any(c.needs == "bitsandbytes" for c in top)


def test_measured_host_costs_drive_the_eager_engine(tmp_path):
    from gpuscope.specs.hardware import load_hardware as load

    toml = tmp_path / "fast_host.toml"
    toml.write_text('base = "h200"\n[measured]\nhost_launch_s = 2e-6\nhost_forward_s = 1e-4\nhost_step_s = 1e-4\n')
    m = load_model("llama-3.1-8b")
    slow = estimate_infer(m, H200, batch=1, prompt=512, gen=32)
    fast = estimate_infer(m, load(str(toml)), batch=1, prompt=512, gen=32)
    assert fast.time["decode_host_s"] < slow.time["decode_host_s"] / 5
    assert any("this machine" in a for a in fast.assumptions)
    bad = tmp_path / "bad.toml"
    bad.write_text('base = "h200"\n[measured]\nhost_launch_s = -1\n')
    with pytest.raises(UserError, match="host_launch_s"):
        load(str(bad))


def test_mla_latent_cache_is_kv_lora_plus_rope_per_token():
    """DeepSeek-V2 section 2.1: MLA caches (d_c + d_h^R) elements per token per layer: 512 + 64 for V3."""
    m = load_model("deepseek-v3")
    full = estimate_infer(m, H200, batch=8, prompt=4096, gen=64, num_gpus=8, tp=8, dtype="fp8")
    lat = estimate_infer(m, H200, batch=8, prompt=4096, gen=64, num_gpus=8, tp=8, dtype="fp8", mla_cache="latent")
    tokens = 8 * 4096
    assert lat.breakdown_bytes["kv_cache"] == pytest.approx(tokens * (512 + 64) * 61 * 1)  # fp8, replicated per rank
    assert full.breakdown_bytes["kv_cache"] == pytest.approx(tokens * 128 * (192 + 128) * 61 / 8)
    assert lat.limits["max_batch"] > full.limits["max_batch"]
    with pytest.raises(UserError, match="MLA"):
        estimate_infer(load_model("llama-3.1-8b"), H200, batch=1, prompt=16, gen=4, mla_cache="latent")


def test_static_cache_attention_pays_repeat_kv_unless_folded():
    """A StaticCache always hands SDPA a mask: transformers then expands K/V per query head (repeat_kv) and SDPA
    reads every slot; gpuscope's GQA fold (--attn gs-gqa) skips the copy. The eager engine's DynamicCache decode has
    no mask and pays neither."""
    from gpuscope.estimate import ops as O

    m = load_model("llama-3.1-8b")
    names = lambda ops: {o.name for o in ops}  # noqa: E731
    static = O.forward_ops(m, 1, 1, 2100, 2.0, 2.0, 2.0, head_tokens=1, hf_cache_cat=False, static_len=2176)
    folded = O.forward_ops(m, 1, 1, 2100, 2.0, 2.0, 2.0, head_tokens=1, hf_cache_cat=False, static_len=2176,
                           gqa_fold=True)
    dynamic = O.forward_ops(m, 1, 1, 2100, 2.0, 2.0, 2.0, head_tokens=1)
    assert {"repeat_kv", "attention_masked", "kv_cache_update"} <= names(static)
    assert "repeat_kv" not in names(folded) and "attention_masked" in names(folded)
    assert not {"repeat_kv", "attention_masked"} & names(dynamic)
    rk = next(o for o in static if o.name == "repeat_kv")
    kv = 2176 * 2 * m.kv_dim * 2.0  # K and V of one layer's static cache, bf16
    assert rk.bytes == pytest.approx(kv * (1 + m.num_heads // m.num_kv_heads))
    slow = estimate_infer(m, H200, batch=1, prompt=2048, gen=128, engine="graph")
    fast = estimate_infer(m, H200, batch=1, prompt=2048, gen=128, engine="graph", gqa_fold=True)
    assert fast.time["decode_s_per_token"] < slow.time["decode_s_per_token"]


def test_generate_moe_decode_holds_both_gathered_expert_copies():
    """batched_mm decode (generate on a GPU) keeps the gate|up and the down copies of each routed row's expert live
    at once: batch x top-k x 3 x I x H x bytes on top of the decode peak; dense models are unaffected."""
    from gpuscope.estimate.infer_memory import phase_memory as _memory

    m = load_model("mixtral-8x7b")
    args = (m, 4, 512, 32, "bf16", "bf16", 2.0, 1)
    plain, batched = (_memory(*args, moe_batched=b)["phases"]["decode_end"] for b in (False, True))
    assert batched - plain == 4 * 2 * 3 * 14336 * 4096 * 2
    dense = load_model("llama-3.1-8b")
    dargs = (dense, 4, 512, 32, "bf16", "bf16", 2.0, 1)
    assert _memory(*dargs, moe_batched=True) == _memory(*dargs)


def test_training_host_model_and_its_verdict():
    """Host-bound small-model training: the step is the host's time (roofline.TrainHost, in units of launch_s), the
    planner says so and suggests more work per launch; a large step stays GPU-bound and unchanged by it."""
    from dataclasses import replace

    from gpuscope.estimate.engines import TRAIN_HOST
    from gpuscope.estimate.train import estimate_train
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.specs.models import load_model

    hw, m = load_hardware("h200"), load_model("llama-3.2-1b")
    small = estimate_train(m, hw, micro_batch=1, seq=128)
    t = small.time
    assert t["host_s_per_micro_batch"] > 3 * t["gpu_s_per_micro_batch"]
    assert t["step_s"] == pytest.approx(t["host_s_per_micro_batch"] + t["optimizer_s"], rel=0.1)
    assert any("host (launch)-bound" in a for a in small.assumptions)
    assert any("host (launch)-bound" in s for s in small.suggestions)
    big = estimate_train(m, hw, micro_batch=4, seq=2048)
    assert big.time["gpu_s_per_micro_batch"] > big.time["host_s_per_micro_batch"]
    assert not any("host (launch)-bound" in s for s in big.suggestions)
    # the host part scales with the host's cost per kernel (a calibrated host): twice the launch, twice the host
    slow_host = replace(hw, measured={**(hw.measured or {}), "host_launch_s": 2 * 17.2e-6})
    slow = estimate_train(m, slow_host, micro_batch=1, seq=128)
    assert slow.time["host_s_per_micro_batch"] == pytest.approx(2 * t["host_s_per_micro_batch"], rel=1e-6)
    assert TRAIN_HOST.recompute > TRAIN_HOST.bwd > TRAIN_HOST.fwd > 1.0


def test_a_measured_prefill_launch_cost_changes_the_eager_prefill_only():
    """host_prefill_launch_s (`hardware calibrate --host` on a GPU) is the eager prefill's host cost per kernel;
    decode keeps host_launch_s. A host-bound prefill (8B p128) grows by its kernels x the difference."""
    from dataclasses import replace

    m = load_model("llama-3.1-8b")
    base = replace(H200, measured={**(H200.measured or {}), "host_launch_s": 17.5e-6})
    pre = replace(H200, measured={**(H200.measured or {}), "host_launch_s": 17.5e-6, "host_prefill_launch_s": 19.3e-6})
    a, b = (estimate_infer(m, hw, batch=1, prompt=128, gen=64, with_ops=True) for hw in (base, pre))
    assert b.time["decode_s_per_token"] == pytest.approx(a.time["decode_s_per_token"])
    kernels = sum(o["kernels"] for o in a.ops if o["phase"] == "prefill")  # per op, its repeats included
    assert kernels == 32 * 39 + 17
    assert b.time["prefill_s"] - a.time["prefill_s"] == pytest.approx(kernels * 1.8e-6, rel=1e-6)


def test_hf_static_cache_ttft_adds_the_caches_creation_per_layer_in_launch_units():
    """HF generate over a StaticCache (hf-graph, hf-graph-defer) makes each layer's K/V tensors inside the prompt's
    forward: its TTFT = eager's prefill + (35 + 2.8 x layers) x the eager prefill's host cost per kernel (session 10:
    0.745 ms + 59.5 us a layer on the H200 host). The other engines, and the decode, are unchanged; a calibrated
    slower host scales it."""
    from dataclasses import replace

    from gpuscope.estimate.engines import ENGINES

    for name, layers in (("llama-3.2-1b", 16), ("llama-3.1-8b", 32)):
        m = load_model(name)
        kw = dict(batch=1, prompt=2048, gen=128)
        eager, hf, defer, graph = (estimate_infer(m, H200, engine=e, **kw)
                                   for e in ("eager", "hf-graph", "hf-graph-defer", "graph"))
        init = (35.0 + 2.8 * layers) * ENGINES["eager"].launch_s
        assert hf.time["prefill_cache_init_s"] == pytest.approx(init) == defer.time["prefill_cache_init_s"]
        assert eager.time["prefill_cache_init_s"] == 0.0 == graph.time["prefill_cache_init_s"]
        # the same prefill GPU work; the TTFT differs by the cache's creation (and generate's step and setup, alike)
        assert hf.time["prefill_gpu_s"] == pytest.approx(defer.time["prefill_gpu_s"])
        assert hf.time["prefill_s"] - defer.time["prefill_s"] == pytest.approx(0.0, abs=1e-12)
        assert 0.7e-3 < init < 2.6e-3  # 1B: 1.37 ms; 8B: 2.14 ms at the catalog's 17.2 us
        slow = replace(H200, measured={**(H200.measured or {}), "host_launch_s": 34.4e-6})
        assert estimate_infer(m, slow, engine="hf-graph", **kw).time["prefill_cache_init_s"] == pytest.approx(2 * init)


def test_full_recompute_reruns_the_decoder_layers_not_the_head_or_loss():
    """HF checkpoints each decoder layer: the backward re-runs the layers' forward, not the embeddings, final norm,
    LM head or loss. For Llama-3.2-1B (128k vocabulary) at 4 x 2048 that is about a fifth of the forward; HFU
    counts the same (2 x the layers' matmul weights, not the head's)."""
    from gpuscope.estimate import ops as opsmod
    from gpuscope.estimate.engines import ENGINES
    from gpuscope.estimate.roofline import forward_time
    from gpuscope.estimate.train import train_forward_ops

    m = load_model("llama-3.2-1b")
    kw = dict(micro_batch=4, seq=2048, precision="amp-bf16")
    none, full = (estimate_train(m, H200, recompute=r, **kw) for r in ("none", "full"))
    fwd = train_forward_ops(m, 4, 2048, 2.0, 4.0)
    assert {o.name for o in fwd if not opsmod.in_layers(o)} == set(opsmod.OUTSIDE_LAYERS)
    _, f_gpu, _, times = forward_time(fwd, H200.achievable_tflops("bf16"), H200.achievable_bw_gbs(), ENGINES["eager"],
                                      132, False, m.head_dim)
    layers_gpu = sum(t.gpu_s for o, t in zip(fwd, times) if opsmod.in_layers(o))
    assert full.time["recompute_s"] == pytest.approx(layers_gpu)
    assert 0.7 < layers_gpu / f_gpu < 0.85  # the head and the loss over 128k logits: 15-30% of this forward
    assert full.time["step_s"] - none.time["step_s"] == pytest.approx(layers_gpu, rel=1e-6)
    pc = count_params(m)
    per_token = 2.0 * (pc.matmul_active - pc.lm_head_matmul) + 4.0 * m.num_layers * 2048 * m.q_dim
    assert (full.hfu - full.mfu) == pytest.approx(per_token * 4 * 2048 / full.time["step_s"] / (H200.peak("bf16") * 1e12))
