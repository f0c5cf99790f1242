"""Multi-GPU plans against published results (shared/reference/published_results.md), tolerance 15%."""

from __future__ import annotations

import pytest

from gpuscope.estimate.parallel import Layout, estimate_parallel, parallel_memory
from gpuscope.estimate.search import search_layouts
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

A100 = load_hardware("a100-80gb")
H100 = load_hardware("h100")
TOL = 0.15

# Narayanan et al. 2021 (arXiv 2104.04473) Table 1: model, TP, PP, GPUs, global batch, TFLOP/s per GPU.
# Selene: A100-80GB, 8 GPUs per node on NVSwitch, 8 x 200 Gb/s HDR InfiniBand per node; micro-batch 1, full
# activation recomputation. The paper used the interleaved schedule without printing its degree: we plan the plain
# 1F1B schedule (virtual 1), the conservative case.
TABLE1 = [
    ("megatron-1.7b", 1, 1, 32, 512, 137), ("megatron-3.6b", 2, 1, 64, 512, 138),
    ("megatron-7.5b", 4, 1, 128, 512, 142), ("megatron-18.4b", 8, 1, 256, 1024, 135),
    ("megatron-39.1b", 8, 2, 512, 1536, 138), ("megatron-76.1b", 8, 4, 1024, 1792, 140),
    ("megatron-145.6b", 8, 8, 1536, 2304, 148), ("megatron-310.1b", 8, 16, 1920, 2160, 155),
    ("megatron-529.6b", 8, 35, 2520, 2520, 163), ("megatron-1t", 8, 64, 3072, 3072, 163),
]


def _table1_layout(tp, pp, gpus, batch):
    return Layout(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=1, global_batch=batch, recompute="full")


@pytest.mark.parametrize("name,tp,pp,gpus,batch,published", TABLE1)
def test_megatron_table1_tflops_per_gpu(name, tp, pp, gpus, batch, published):
    est = estimate_parallel(load_model(name), A100, _table1_layout(tp, pp, gpus, batch), attention="materialized")
    assert est.fits
    assert est.tflops_per_gpu == pytest.approx(published, rel=TOL)


@pytest.mark.parametrize("name,tp,pp,gpus,batch,published", TABLE1[:6])
def test_search_matches_or_beats_the_published_layout(name, tp, pp, gpus, batch, published):
    """The search's best layout is at least as fast as the paper's (the paper's is in the search space)."""
    m = load_model(name)
    mine = estimate_parallel(m, A100, _table1_layout(tp, pp, gpus, batch), attention="materialized")
    res = search_layouts(m, A100, gpus, batch, attention="materialized", zeros=(0, 1), virtuals=(1, 2))
    assert res.ranked, "no layout fits"
    assert res.ranked[0].tokens_per_s >= mine.tokens_per_s * 0.999


# Narayanan et al. 2021 Table 2: 174.6B parameters, model-parallel size 96 (TP 8 x PP 12), batch 1536,
# micro-batch 1: PTD-P reaches 153 / 149 / 141 TFLOP/s per GPU on 384 / 768 / 1536 GPUs. (The same table's ZeRO-3
# column, 144 / 88 / 44, is not reproduced: a bandwidth model of its gathers over 8 x 200 Gb/s per node predicts
# far less communication time than the measured collapse implies; see the issue notes.)
@pytest.mark.parametrize("gpus,published", [(384, 153), (768, 149), (1536, 141)])
def test_megatron_table2_ptdp(gpus, published):
    lay = Layout(tp=8, pp=12, dp=gpus // 96, micro_batch=1, global_batch=1536, recompute="full")
    est = estimate_parallel(load_model("gpt3-175b"), A100, lay, attention="materialized")
    assert est.tflops_per_gpu == pytest.approx(published, rel=TOL)


# Korthikanti et al. 2022 (arXiv 2205.05198) Tables 3/5: TP 8, s 2048, A100-80GB; iteration seconds with full
# recompute, and with selective recompute + sequence parallelism.
TABLE5 = [
    ("korthikanti-22b", 1, 8, 4, 4, 1.42, 1.10), ("gpt3-175b", 8, 64, 64, 1, 18.13, 13.75),
    ("megatron-529.6b", 35, 280, 280, 1, 49.05, 37.83), ("megatron-1t", 64, 512, 512, 1, 94.42, 71.49),
]


@pytest.mark.parametrize("name,pp,gpus,batch,mb,full_s,selective_s", TABLE5)
def test_korthikanti_table5_iteration_time(name, pp, gpus, batch, mb, full_s, selective_s):
    m = load_model(name)
    for rc, sp, published in (("full", False, full_s), ("selective", True, selective_s)):
        lay = Layout(tp=8, pp=pp, dp=gpus // (8 * pp), micro_batch=mb, global_batch=batch, recompute=rc, sp=sp)
        est = estimate_parallel(m, A100, lay, attention="materialized")
        assert est.step_s == pytest.approx(published, rel=TOL), rc


# Llama 3 Herd of Models (arXiv 2407.21783) Table 4: 405B on H100-80GB (700 W), TP 8, PP 16, seq 8192, BF16 MFU.
# Flash attention, sequence parallelism, ZeRO-1-style sharded optimizer; 400 Gb/s RoCE per GPU (50 GB/s). The
# paper's interleaving degree is not printed: we assume 2 model chunks per GPU.
@pytest.mark.parametrize("gpus,dp,batch_per_dp,mfu", [(8192, 64, 32, 0.43), (16384, 128, 16, 0.41)])
def test_llama3_405b_mfu(gpus, dp, batch_per_dp, mfu):
    lay = Layout(tp=8, pp=16, dp=dp, micro_batch=1, global_batch=dp * batch_per_dp, zero=1, sp=True, virtual=2,
                 recompute="none")
    est = estimate_parallel(load_model("llama-3.1-405b"), H100, lay, seq=8192, inter_gbs=50.0)
    assert lay.num_gpus == gpus
    assert est.mfu == pytest.approx(mfu, rel=TOL)


def test_llama3_405b_context_parallel_row_is_a_known_miss():
    """Table 4 row 3: 16,384 GPUs, TP 8, CP 16, PP 16, DP 8, seq 131,072, 16 sequences per DP rank, 38% MFU.
    With the interleaving degree of rows 1-2 (2) we estimate 48%: +27%. Not yet explained: the all-gather CP's
    exposed time and flash attention's rate at 128K context are the candidates (neither measured). The bound
    keeps the miss from growing unnoticed; an improvement past 15% means this test must become a plain check."""
    lay = Layout(tp=8, pp=16, dp=8, cp=16, micro_batch=1, global_batch=128, zero=1, sp=True, virtual=2,
                 recompute="none")
    est = estimate_parallel(load_model("llama-3.1-405b"), H100, lay, seq=131072, inter_gbs=50.0)
    assert lay.num_gpus == 16384
    err = est.mfu / 0.38 - 1
    assert TOL < abs(err) <= 0.30, err


# ZeRO (Rajbhandari et al. 2020) section 3.1 / Figure 1: 7.5B parameters, 64-way data parallel, model states per GPU.
@pytest.mark.parametrize("stage,published_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_7_5b_model_states_per_gpu(stage, published_gb):
    m = load_model("megatron-7.5b")  # 7.5B parameters (Narayanan Table 1's 7.5B configuration)
    mem = parallel_memory(m, Layout(dp=64, zero=stage, global_batch=64), states="zero")
    states = mem["parameters"] + mem["gradients"] + mem["optimizer_states"]
    assert states / 1e9 == pytest.approx(published_gb, rel=0.05)


def test_pipeline_bubble_and_tp_comm_show_up():
    m = load_model("megatron-39.1b")
    one = estimate_parallel(m, A100, Layout(tp=8, pp=2, dp=32, global_batch=1536), attention="materialized")
    few = estimate_parallel(m, A100, Layout(tp=8, pp=2, dp=32, global_batch=64), attention="materialized")
    # with 2 micro-batches per pipeline the bubble is (p-1)/m = 50% of the useful time; with 48, ~2%
    assert few.time_s["bubble"] / (few.time_s["pipeline"] - few.time_s["bubble"]) == pytest.approx(0.5, rel=0.02)
    assert one.time_s["bubble"] / one.time_s["pipeline"] < 0.03
    assert one.time_s["tp_comm"] > 0


def test_expert_parallelism_splits_expert_states_and_adds_all_to_all():
    """EP (Megatron-Core style): routed experts over ep ranks of the data-parallel group. Mixtral-8x7B on 32 H100s
    (dp 32, ZeRO-1): without EP every GPU holds all 8 experts (45 B of its 46.7 B parameters) and nothing fits;
    with ep = 8 each holds one expert per layer and ZeRO shards its states over the 4 ranks sharing it."""
    from gpuscope.errors import UserError
    from gpuscope.estimate.params import count_params

    m, h100 = load_model("mixtral-8x7b"), load_hardware("h100")
    pc = count_params(m)
    base = dict(tp=1, pp=1, dp=32, micro_batch=1, global_batch=256, zero=1, recompute="full")
    no_ep = estimate_parallel(m, h100, Layout(**base), seq=4096)
    ep8 = estimate_parallel(m, h100, Layout(**base, ep=8), seq=4096)
    assert not no_ep.fits and ep8.fits
    # bf16 parameters: dense part whole, routed experts / 8
    dense = pc.total - pc.routed_experts
    assert ep8.memory_bytes["parameters"] == pytest.approx(2.0 * (dense + pc.routed_experts / 8), rel=1e-9)
    assert no_ep.memory_bytes["parameters"] == pytest.approx(2.0 * pc.total, rel=1e-9)
    # ZeRO-1 shards dense optimizer states over 32 ranks, expert ones over the dp / ep = 4 that share them
    assert ep8.memory_bytes["optimizer_states"] == pytest.approx(12.0 * (dense / 32 + pc.routed_experts / 8 / 4),
                                                                 rel=1e-9)
    assert no_ep.time_s["ep_comm"] == 0 and ep8.time_s["ep_comm"] > 0
    with pytest.raises(UserError):
        estimate_parallel(load_model("llama-3.1-8b"), h100, Layout(**base, ep=2))  # dense model
    with pytest.raises(UserError):
        estimate_parallel(m, h100, Layout(**base, ep=3))  # 3 divides neither dp 32 nor 8 experts


def test_search_considers_expert_parallelism_for_moe():
    res = search_layouts(load_model("mixtral-8x7b"), load_hardware("h100"), 16, 256, seq=4096)
    assert res.ranked and any(e.layout.ep > 1 for e in res.ranked)
    assert all(e.fits for e in res.ranked)
    dense = search_layouts(load_model("llama-3.1-8b"), load_hardware("h100"), 16, 256, seq=4096)
    assert all(e.layout.ep == 1 for e in dense.ranked)


def test_hybrid_shard_memory_is_one_nodes_fsdp_and_adds_the_cross_node_reduce():
    """FSDP2 hybrid shard (HSDP) on 4 nodes of 8: states sharded over the 8 GPUs of a node, so per-GPU memory
    equals full-shard FSDP on 8 GPUs; the gradient shards are all-reduced across the 4 replicas over the network."""
    from gpuscope.errors import UserError
    from gpuscope.estimate.train import estimate_train

    m, h100 = load_model("llama-3.1-8b"), load_hardware("h100")
    kw = dict(micro_batch=1, seq=4096, precision="bf16", recompute="full")
    hsdp = estimate_train(m, h100, num_gpus=32, strategy="hsdp", **kw)
    fsdp8 = estimate_train(m, h100, num_gpus=8, strategy="fsdp", **kw)
    fsdp32 = estimate_train(m, h100, num_gpus=32, strategy="fsdp", **kw)
    assert hsdp.phases_bytes == pytest.approx(fsdp8.phases_bytes)
    assert fsdp32.peak_bytes_per_gpu < hsdp.peak_bytes_per_gpu
    assert hsdp.time["exposed_comm_s"] > fsdp8.time["exposed_comm_s"]  # + the inter-node all-reduce
    one_node = estimate_train(m, h100, num_gpus=8, strategy="hsdp", **kw)  # one node: HSDP is FSDP
    assert one_node.time["step_s"] == pytest.approx(fsdp8.time["step_s"])
    with pytest.raises(UserError):
        estimate_train(m, h100, num_gpus=12, strategy="hsdp", **kw)  # not whole nodes
