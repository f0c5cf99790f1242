"""Communication model (gpuscope.estimate.comm): nccl-tests definitions, published busbw, identities, errors.

Published figures: shared/reference/published_results.md ("Collective and matmul ceilings seen publicly";
DeepSeek-V3, arXiv 2412.19437: NVLink 160 GB/s vs IB 50 GB/s per H800).
"""

from __future__ import annotations

import math

import pytest

from gpuscope.errors import UserError
from gpuscope.estimate.comm import (
    OPS,
    alg_bandwidth_gbs,
    bus_bandwidth_gbs,
    bus_factor,
    collective_time,
)
from gpuscope.estimate.topology import Topology, topology_for
from gpuscope.specs.hardware import list_hardware, load_hardware

GIB = 2**30


# --- nccl-tests definitions (doc/PERFORMANCE.md) ---------------------------------------------------------------
def test_algbw_is_bytes_over_seconds_decimal():
    assert alg_bandwidth_gbs(1e9, 1.0) == pytest.approx(1.0)
    assert alg_bandwidth_gbs(8 * GIB, 0.02) == pytest.approx(8 * GIB / 0.02 / 1e9)


@pytest.mark.parametrize("n", [2, 3, 8, 16, 1024])
def test_busbw_factors_as_nccl_tests(n):
    s, t = 1 * GIB, 0.01
    alg = s / t / 1e9
    assert bus_bandwidth_gbs("all_reduce", s, n, t) == pytest.approx(alg * 2 * (n - 1) / n)
    assert bus_bandwidth_gbs("all_gather", s, n, t) == pytest.approx(alg * (n - 1) / n)
    assert bus_bandwidth_gbs("reduce_scatter", s, n, t) == pytest.approx(alg * (n - 1) / n)
    assert bus_bandwidth_gbs("all_to_all", s, n, t) == pytest.approx(alg * (n - 1) / n)
    assert bus_bandwidth_gbs("broadcast", s, n, t) == pytest.approx(alg)
    assert bus_bandwidth_gbs("send_recv", s, n, t) == pytest.approx(alg)


def test_nccl_tests_row_reproduced():
    # A public 2x8 H100 all_reduce_perf row: 8589934592 B in 47535 us -> algbw 180.71, busbw 338.82 GB/s.
    assert alg_bandwidth_gbs(8589934592, 47535e-6) == pytest.approx(180.71, abs=0.01)
    assert bus_bandwidth_gbs("all_reduce", 8589934592, 16, 47535e-6) == pytest.approx(338.82, abs=0.01)


# --- published ring busbw inside one node ------------------------------------------------------------------------
@pytest.mark.parametrize("gpu,published", [("h100", 370.0), ("h200", 366.0)])
def test_8gpu_ring_allreduce_busbw_matches_nccl_tests(gpu, published):
    topo = topology_for(load_hardware(gpu), 8)
    s = 8 * GIB
    t = collective_time("all_reduce", s, 8, topo)
    busbw = bus_bandwidth_gbs("all_reduce", s, 8, t)
    assert busbw == pytest.approx(published, rel=0.10)  # published_results.md: ~370 (H100), 366 ring (H200)
    assert busbw <= topo.intra_gbs  # latency only lowers it


def test_a100_ring_busbw_matches_nccl_tests_issue_175():
    # 8x A100 SXM, single node, all_reduce_perf up to 4 GiB: 232.54 GB/s busbw (NVIDIA/nccl-tests issue #175).
    topo = topology_for("a100", 8)
    t = collective_time("all_reduce", 4 * GIB, 8, topo)
    assert bus_bandwidth_gbs("all_reduce", 4 * GIB, 8, t) == pytest.approx(232.5, rel=0.05)


def test_h800_nvlink_vs_ib_matches_deepseek_v3():
    topo = topology_for("h800", 16)
    assert topo.intra_gbs == pytest.approx(160.0, rel=0.10)  # "NVLink ... 160 GB/s"
    assert topo.intra_gbs / topo.inter_gbs == pytest.approx(160.0 / 50.0, rel=0.25)  # "roughly 3.2 times"
    assert topo.inter_gbs <= 50.0  # achievable below IB line rate


def test_selene_inter_is_hdr_share():
    topo = topology_for("a100", 1024)
    assert topo.gpus_per_node == 8
    assert 20.0 <= topo.inter_gbs <= 25.0  # 8x200 Gb/s HDR per node = 25 GB/s per GPU line rate


# --- intra vs inter ----------------------------------------------------------------------------------------------
def test_two_node_allreduce_slower_than_one_node():
    topo = topology_for("h100", 16)
    s = 1 * GIB
    t8 = collective_time("all_reduce", s, 8, topo)
    t16 = collective_time("all_reduce", s, 16, topo)
    assert t16 > t8
    # One rank per node (a DP group across TP=8 nodes): limited by the GPU's own NIC share.
    t16_spread = collective_time("all_reduce", s, 16, topo, gpus_per_node_in_group=1)
    assert t16_spread > t16
    busbw = bus_bandwidth_gbs("all_reduce", s, 16, t16_spread)
    assert busbw == pytest.approx(topo.inter_gbs, rel=0.02)


def test_all_to_all_across_nodes_uses_inter_for_leaving_fraction():
    topo = topology_for("h800", 64)
    s = 256 * 2**20
    t_in = collective_time("all_to_all", s, 8, topo)
    t_out = collective_time("all_to_all", s, 64, topo)  # EP64 over 8 nodes
    bw_part = s * (64 - 8) / 64 / (topo.inter_gbs * 1e9)
    lat = 7 * topo.intra_latency_s + 56 * topo.inter_latency_s
    assert t_out == pytest.approx(bw_part + lat, rel=1e-9)
    assert t_out > 3 * t_in  # NVLink 164 vs IB 45 GB/s per GPU, for 7/8 vs 56/64 of the bytes


def test_send_recv_inside_and_across_nodes():
    topo = topology_for("h100", 16)
    s = 64 * 2**20
    inside = collective_time("send_recv", s, 2, topo)
    across = collective_time("send_recv", s, 2, topo, gpus_per_node_in_group=1)
    assert inside == pytest.approx(topo.intra_latency_s + s / (topo.intra_gbs * 1e9))
    assert across == pytest.approx(topo.inter_latency_s + s / (topo.inter_gbs * 1e9))


# --- latency and identities --------------------------------------------------------------------------------------
def test_latency_dominates_tiny_messages():
    topo = topology_for("h100", 8)
    t = collective_time("all_reduce", 1024, 8, topo)
    steps = 2 * (8 - 1)
    assert t == pytest.approx(steps * topo.intra_latency_s, rel=0.01)
    assert 5e-6 < t < 50e-6  # NCCL's model: 6.6 + 14 x 0.6 us = 15 us


def test_tree_has_log_latency_and_ring_bandwidth():
    topo = topology_for("h100", 64)
    ring_small = collective_time("all_reduce", 1024, 64, topo)
    tree_small = collective_time("all_reduce", 1024, 64, topo, algorithm="tree")
    assert tree_small == pytest.approx(2 * (3 * topo.intra_latency_s + 3 * topo.inter_latency_s), rel=0.01)
    assert tree_small < ring_small / 4
    big = 16 * GIB
    ring_big = collective_time("all_reduce", big, 64, topo)
    tree_big = collective_time("all_reduce", big, 64, topo, algorithm="tree")
    assert tree_big == pytest.approx(ring_big, rel=0.01)
    # tree is all-reduce only; other ops run the ring, as in NCCL
    ring_ag = collective_time("all_gather", big, 64, topo)
    assert collective_time("all_gather", big, 64, topo, algorithm="tree") == ring_ag


@pytest.mark.parametrize("gpu,n,k", [("h100", 8, None), ("h100", 64, None), ("h100", 32, 1), ("4090", 4, None),
                                     ("a100", 24, 4)])
@pytest.mark.parametrize("nbytes", [4096, 1 * GIB])
def test_all_gather_plus_reduce_scatter_equals_all_reduce(gpu, n, k, nbytes):
    topo = topology_for(gpu, n)
    kw = {"gpus_per_node_in_group": k}
    ag = collective_time("all_gather", nbytes, n, topo, **kw)
    rs = collective_time("reduce_scatter", nbytes, n, topo, **kw)
    ar = collective_time("all_reduce", nbytes, n, topo, **kw)
    assert ag + rs == pytest.approx(ar, rel=1e-9)


def test_time_grows_with_bytes_and_group_one_is_free():
    topo = topology_for("h200", 8)
    for op in OPS:
        assert collective_time(op, 1 * GIB, 1, topo) == 0.0
        assert collective_time(op, 2 * GIB, 8, topo) > collective_time(op, 1 * GIB, 8, topo) > 0.0
    assert collective_time("all_reduce", 0, 8, topo) == pytest.approx(14 * topo.intra_latency_s)


# --- topologies --------------------------------------------------------------------------------------------------
# Host-bound: 0.70 x the PCIe copy rate (Gen3 12, Gen4 25, Gen5 50 GB/s); 4x RTX 5090 all_reduce_perf reaches
# 35 GB/s busbw (NVIDIA/nccl issue #1639).
@pytest.mark.parametrize("gpu,gen_gbs", [("4090", 17.5), ("a770", 17.5), ("t4", 8.4), ("5090", 35.0)])
def test_pcie_only_cards_are_host_bound(gpu, gen_gbs):
    hw = load_hardware(gpu)
    assert hw.interconnect_gbs_bidir == 0
    topo = topology_for(hw, 4)
    assert topo.intra_gbs == pytest.approx(gen_gbs)
    gen = 5 if gpu == "5090" else 3 if gpu == "t4" else 4
    assert topo.intra_gbs < 4 * 2**gen / 2  # below one direction of the card's PCIe x16 line rate
    assert topo.intra_latency_s > topology_for("h100", 4).intra_latency_s
    assert topo.gpus_per_node == 4
    assert "host" in topo.name and "PCIe" in topo.name
    assert topology_for(hw, 16).gpus_per_node == 8  # assumed 8 cards to a host (documented)


def test_nvlink_bridge_only_covers_its_pair():
    pair = topology_for("h100-nvl", 2)
    eight = topology_for("h100-nvl", 8)
    assert pair.intra_gbs == pytest.approx(300 * 0.82)
    assert eight.intra_gbs == pytest.approx(35.0)  # ring over 8 cards crosses PCIe Gen5 through the host


def test_every_catalog_entry_has_a_sane_topology():
    for hw in list_hardware():
        for n in (1, 8, 64):
            topo = topology_for(hw, n)
            assert 1 <= topo.gpus_per_node <= max(n, 1)
            assert 1.0 < topo.intra_gbs < 1000.0, hw.key
            assert 1.0 < topo.inter_gbs < 100.0, hw.key
            assert topo.name and topo.source
            assert math.isfinite(collective_time("all_reduce", GIB, n, topo))


def test_explicit_and_measured_values_win():
    hw = load_hardware("h100")
    assert topology_for(hw, 16, gpus_per_node=4).gpus_per_node == 4
    assert topology_for(hw, 16, inter_gbs=12.5).inter_gbs == 12.5
    hw.measured.update({"allreduce_busbw_gbs": 355.0, "inter_gbs": 47.0})
    topo = topology_for(hw, 16)
    assert topo.intra_gbs == 355.0 and topo.inter_gbs == 47.0
    assert "measured" in topo.source
    assert topology_for(hw, 16, inter_gbs=30.0).inter_gbs == 30.0


def test_gpus_per_node_defaults_to_num_gpus_when_fewer():
    assert topology_for("h100", 4).gpus_per_node == 4
    assert topology_for("h100", 64).gpus_per_node == 8


# --- errors ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda t: collective_time("allreduce_fast", 1, 8, t),
        lambda t: collective_time("all_reduce", -1, 8, t),
        lambda t: collective_time("all_reduce", float("nan"), 8, t),
        lambda t: collective_time("all_reduce", 1, 0, t),
        lambda t: collective_time("all_reduce", 1, -2, t),
        lambda t: collective_time("all_reduce", 1, 8, t, algorithm="butterfly"),
        lambda t: collective_time("all_reduce", 1, 8, t, gpus_per_node_in_group=16),
        lambda t: collective_time("all_reduce", 1, 8, t, gpus_per_node_in_group=0),
        lambda t: collective_time("all_reduce", 1, 8, "h100"),
        lambda t: bus_bandwidth_gbs("all_reduce", 1, 8, 0.0),
        lambda t: alg_bandwidth_gbs(-5, 1.0),
        lambda t: bus_factor("gather", 8),
        lambda t: topology_for("h100", 0),
        lambda t: topology_for("h100", 8, gpus_per_node=0),
        lambda t: topology_for("h100", 8, inter_gbs=-1.0),
        lambda t: Topology(8, 0.0, 10.0, 1e-6, 1e-6),
        lambda t: Topology(0, 10.0, 10.0, 1e-6, 1e-6),
    ],
)
def test_bad_inputs_raise_one_sentence_valueerror(call):
    topo = topology_for("h100", 16)
    with pytest.raises(ValueError) as exc:
        call(topo)
    assert isinstance(exc.value, UserError)  # exit code 2 in the CLI
    msg = str(exc.value)
    assert msg.endswith(".") and msg.count(". ") == 0 and "\n" not in msg


def test_op_spellings_accepted():
    topo = topology_for("h100", 8)
    t = collective_time("all_reduce", GIB, 8, topo)
    assert collective_time("allreduce", GIB, 8, topo) == t
    assert collective_time("All-Reduce", GIB, 8, topo) == t
