"""Communication model for multi-GPU plans: an alpha-beta model of NCCL-style collectives.

Pure Python (shared/DESIGN.md, "Layers"): no torch, no numpy.

Public API (used by the layout planner, ``estimate/parallel.py``)::

    topo = topology_for(hw, num_gpus, gpus_per_node=None, inter_gbs=None)   # -> Topology
    t_s  = collective_time(op, nbytes, group, topo, gpus_per_node_in_group=None, algorithm="ring")
    bus_bandwidth_gbs(op, nbytes, group, seconds)   # nccl-tests "busbw"
    alg_bandwidth_gbs(nbytes, seconds)              # nccl-tests "algbw"

Units: bytes, seconds, GB/s decimal (1e9 bytes/s), as nccl-tests prints them.

Definitions (nccl-tests doc/PERFORMANCE.md, "Performance reported by NCCL tests")
-------------------------------------------------------------------------------
``algbw = S / t`` where S is the buffer size nccl-tests prints in its "size" column and t the operation time.
For all_gather S is the full *output* buffer (n x the per-rank input); for reduce_scatter the full *input*
buffer (n x the per-rank output); for all_reduce, broadcast, all_to_all and send_recv the per-rank buffer.
``busbw = algbw x F(op, n)`` with F the bytes each rank must move through its busiest link per byte of S
under the optimal algorithm, so that busbw is comparable with the hardware's per-GPU link bandwidth:

    all_reduce       F = 2(n-1)/n   (a ring reduce-scatter then a ring all-gather: 2(n-1) steps of S/n bytes)
    all_gather       F = (n-1)/n    (n-1 steps of S/n bytes)
    reduce_scatter   F = (n-1)/n
    all_to_all       F = (n-1)/n    (each rank keeps 1/n of its buffer and sends the rest)
    broadcast        F = 1          (pipelined chain: every byte crosses every link once)
    send_recv        F = 1

The time model (alpha-beta, Hockney) is therefore

    t = latency_steps x alpha  +  S x F(op, n) / B

with B the per-GPU unidirectional bandwidth that the collective achieves (the "bus bandwidth" of nccl-tests at
large sizes) and alpha the per-step latency. All ring collectives share this B, so all_gather(S) +
reduce_scatter(S) == all_reduce(S) exactly (the ring all-reduce *is* a reduce-scatter followed by an all-gather).

Bandwidth of a group (B)
------------------------
* Inside one node: ``B = topo.intra_gbs`` (NVLink/NVSwitch, xGMI, ICI or PCIe through the host).
* Across nodes, ring-type collectives (all_reduce, all_gather, reduce_scatter, broadcast): NCCL builds one ring
  per channel and gives each channel its own NIC, so the traffic a ring pushes across a node boundary (one
  rank's worth: S x F) is spread over the NICs of the k group ranks on that node. NCCL's own tuning model says
  so: ``busBw = nChannels * bwInter`` for inter-node rings (NCCL src/graph/tuning.cc, ncclTopoTuneModel), and
  nccl-tests issue #119 measures it: 8 A100 per node with 4x HDR (100 GB/s per node) -> 85-96 GB/s busbw.
  Hence ``B = min(intra_gbs, k x inter_gbs)`` with k = ranks of the group per node. With one rank per node
  (a data-parallel group across TP=8 nodes) this is ``min(intra_gbs, inter_gbs)``: the slower of the two links.
  Conservative on two nodes: NCCL may pick its tree there and beat the ring (a public 2x8 H100 run, GCP A3 Mega
  with 8x200 Gb/s NICs per node, reports 339 GB/s busbw at 8 GiB, above the 8 x 25 GB/s NIC line rate; a user
  cites ~470 GB/s for 2 nodes of 8x400 Gb/s from nccl-tests issue #309, in NVIDIA/nccl issue #2409); we keep
  the ring. A measured inter_gbs (hw.measured) or the inter_gbs argument overrides the default.
* all_to_all: a rank sends S/n to each peer; S(k-1)/n stay in the node (intra_gbs) and S(n-k)/n leave it
  through the rank's own NIC share (inter_gbs); every rank of the node sends its own off-node share at the
  same time, so there is no NIC pooling. The two paths run concurrently: t_bw = max(intra part, inter part).
* send_recv: one message rank -> next rank; over NVLink/PCIe if the group sits in one node, else inter_gbs
  (a pipeline-parallel boundary crosses the node on the sending GPU's own NIC share).

Latency (alpha)
---------------
Steps follow NCCL's tuning model (src/graph/tuning.cc): ring all_reduce 2(n-1) steps of which 2(m-1) cross
nodes; all_gather / reduce_scatter n-1 steps of which m-1 cross; broadcast a chain of n-1 hops (m-1 across
nodes); m = nodes spanned. ``algorithm="tree"`` (all_reduce only; NCCL implements tree for all-reduce only, so
other ops fall back to the ring): a binary tree, reduce up then broadcast down, 2 x (ceil(log2 k) intra hops +
ceil(log2 m) inter hops), i.e. about 2 log2(n) steps instead of 2(n-1); the bandwidth term is the ring's (NCCL's
double binary tree sends half the data down each of two trees and reaches the ring's bus bandwidth at large
sizes; NCCL 2.4 release blog "Massively Scale Your Deep Learning Training with NCCL 2.4"). NCCL's tree chains
the ranks inside a node, so our in-node tree latency is optimistic; it matters only for small messages.
all_to_all: one round per peer, (k-1) intra and (n-k) inter. send_recv: one hop.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from gpuscope.errors import UserError

__all__ = [
    "OPS",
    "ALGORITHMS",
    "CommError",
    "Topology",
    "topology_for",
    "collective_time",
    "bus_bandwidth_gbs",
    "alg_bandwidth_gbs",
    "bus_factor",
]

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
ALGORITHMS = ("ring", "tree")


class CommError(UserError, ValueError):
    """Bad input to the communication model (a ValueError, and a UserError for the CLI: exit code 2)."""


# --- achievable-fraction and latency constants, each with its source --------------------------------------------
# NVLink/NVSwitch ring: nccl-tests all_reduce ring busbw / per-GPU unidirectional NVLink bandwidth.
#   8x H100 SXM: ~370 GB/s ring busbw / 450 GB/s = 0.822; 8x H200 SXM at 8 GiB: 366 (ring only) / 450 = 0.813
#   (shared/reference/published_results.md, "Collective and matmul ceilings seen publicly"). We take 0.82.
#   Check: H800 (400 GB/s bidir) -> 200 x 0.82 = 164 GB/s, vs DeepSeek-V3's "NVLink 160 GB/s" usable per GPU.
NVLINK_RING_FRACTION = 0.82
# NVLink 3.0 (A100/A800): 8x A100 SXM single-node all_reduce_perf 232.5 GB/s busbw (NVIDIA/nccl-tests issue #175)
# / 300 GB/s per direction = 0.775. NVLink 2.0 and 5.0 (and bridges) use the Hopper figure by analogy.
NVLINK_RING_FRACTION_BY_VERSION = {3: 0.775, 4: NVLINK_RING_FRACTION}
# Other scale-up fabrics (AMD Infinity Fabric/xGMI, Gaudi on-die RoCE, TPU ICI): no public ring busbw in our
# references; 0.70 of the per-direction link rate is a default, not measured.
OTHER_SCALEUP_FRACTION = 0.70
# Gaudi HLS-2 / HLS-3 baseboards: 21 of the 24 on-die Ethernet ports connect the 8 chips all-to-all, 3 go to
# scale-out (Intel Gaudi 2 / Gaudi 3 white papers; not in our reference files, planning figure).
GAUDI_SCALEUP_PORTS, GAUDI_PORTS, GAUDI_SCALEOUT_PORTS = 21, 24, 3

# PCIe-only cards (interconnect 0): collectives go GPU -> host (root complex, CPU, memory) -> GPU.
# One-way achievable copy rate by PCIe generation (x16): Gen3 ~12, Gen4 ~25, Gen5 ~50 GB/s (a Gen5 x16
# host-to-device copy reaches ~55 GB/s, published_results.md). A collective through the host gets less: NCCL's
# maintainer notes that "on PCI systems, the performance you get is usually determined by the bandwidth your CPU
# and memory can deliver", with all_reduce busbw of 35 GB/s on 4x RTX 5090 (Gen5) and 28 GB/s on 8 of them on a
# dual-socket host (NVIDIA/nccl issue #1639). 35 / 50 = 0.70 of the copy rate, applied to every generation:
# Gen3 8.4, Gen4 17.5, Gen5 35 GB/s. Not measured here on Gen3/Gen4.
PCIE_COPY_GBS = {3: 12.0, 4: 25.0, 5: 50.0, 6: 100.0}
PCIE_COLLECTIVE_FRACTION = 0.70
PCIE_ACHIEVABLE_GBS = {gen: gbs * PCIE_COLLECTIVE_FRACTION for gen, gbs in PCIE_COPY_GBS.items()}
PCIE_DEFAULT_GEN = 4

# Inter-node: achievable fraction of NIC line rate for NCCL's ring over InfiniBand/RoCE.
#   NVIDIA/nccl-tests issue #290 (NVIDIA maintainer): two-node NCCL_ALGO=RING on NDR 400 Gb/s "you should see
#   46-48GB/s per NIC" = 0.92-0.96 of 50 GB/s; NVIDIA/nccl-tests issue #119: 3 nodes x 8 A100 with 4x HDR per
#   node (100 GB/s line per node) measure 85-96 GB/s all_reduce busbw = 0.85-0.96 (and show busbw ~ the node's
#   NIC total, the k x inter_gbs pooling used below). We take 0.90, a little under NVIDIA's figure, for clusters
#   that are not tuned. Check: H800 50 GB/s IB (DeepSeek-V3) x 0.90 = 45 GB/s.
NIC_FRACTION = 0.90

# Per-GPU NIC line rate (Gb/s) by accelerator family, first match on the catalog key wins.
_NIC_GBPS: tuple[tuple[str, float, str], ...] = (
    ("a100", 200.0, "8x200 Gb/s HDR InfiniBand per 8-GPU node (Selene, Megatron-LM, arXiv 2104.04473)"),
    ("a800", 200.0, "8x200 Gb/s HDR per 8-GPU node, as A100 (Selene); assumed"),
    ("v100", 50.0, "4x100 Gb/s EDR per 8-GPU node (DGX-1; DGX-2: 8 per 16 GPUs); assumed"),
    ("h800", 400.0, "8x400 Gb/s per 8-GPU node; DeepSeek-V3 (arXiv 2412.19437): 'IB (50 GB/s)' per H800"),
    ("h100", 400.0, "8x400 Gb/s NDR InfiniBand per 8-GPU node (DGX H100 ConnectX-7); Llama 3 used 400 Gb/s RoCE/IB"),
    ("h200", 400.0, "8x400 Gb/s NDR per 8-GPU node (DGX/HGX H200 ConnectX-7)"),
    ("h20", 400.0, "8x400 Gb/s per 8-GPU node, as HGX H100; assumed"),
    ("b200", 400.0, "8x400 Gb/s per 8-GPU node (DGX B200 ConnectX-7)"),
    ("mi300", 400.0, "8x400 Gb/s per 8-GPU node (typical MI300X platforms); assumed"),
    ("mi325", 400.0, "8x400 Gb/s per 8-GPU node, as MI300X; assumed"),
    ("mi250", 200.0, "4x200 Gb/s Slingshot per 4-MI250X node (Frontier); assumed"),
    ("gaudi2", 300.0, "3 of 24 on-die 100 GbE ports per chip go to scale-out (HLS-2)"),
    ("gaudi3", 600.0, "3 of 24 on-die 200 GbE ports per chip go to scale-out (HLS-3)"),
    ("tpu", 200.0, "data-centre network between TPU slices, 200 Gb/s per chip assumed (not published)"),
)
# PCIe-only and bridged cards without a listed family: one 100 Gb/s port's worth per GPU, an assumption.
DEFAULT_NIC_GBPS = 100.0
DEFAULT_NIC_SOURCE = "100 Gb/s Ethernet/IB per GPU assumed (PCIe server or workstation; not published)"

# Per-step latencies, from NCCL's tuning model (src/graph/tuning.cc): per-hop hwLat for the ring/LL protocol
# is 0.6 us on NVLink, 1.0 us on PCIe and 2.7 us on the network, plus a base latency of 6.6 us per call.
# Topology has no per-call term, so the base is spread over the 14 steps of an 8-GPU ring all-reduce:
#   NVLink 0.6 + 6.6/14 = 1.07 -> 1.0 us; PCIe 1.0 + 0.47 -> 1.5 us; network 2.7 + ~1 us of per-step
#   network post overhead (tuning.cc getNetOverhead) -> 3.5 us. An 8-GPU NVLink all-reduce of a few KiB thus
#   costs ~14 us, as NCCL's model (6.6 + 14 x 0.6 = 15 us) predicts.
NVLINK_STEP_LATENCY_S = 1.0e-6
PCIE_STEP_LATENCY_S = 1.5e-6
NET_STEP_LATENCY_S = 3.5e-6

DEFAULT_GPUS_PER_NODE = 8
_GPUS_PER_NODE_BY_FAMILY = (("mi250", 4, "4 MI250X per node (HPE Cray EX235a, Frontier)"),)
_TPU_POD = (("v5e", 256), ("v5p", 8960))


# --- Topology ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Topology:
    """Where a job's GPUs sit and how fast they talk. Bandwidths per GPU, one direction, GB/s decimal."""

    gpus_per_node: int
    intra_gbs: float  # achievable per-GPU unidirectional bandwidth to peers inside a node (ring busbw)
    inter_gbs: float  # achievable per-GPU unidirectional bandwidth between nodes (its share of the node's NICs)
    intra_latency_s: float  # per-step latency of a ring/tree step inside a node
    inter_latency_s: float  # per-step latency of a step that crosses nodes
    name: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise CommError(f"Topology.gpus_per_node must be a positive integer, not {self.gpus_per_node!r}.")
        for f in ("intra_gbs", "inter_gbs"):
            v = getattr(self, f)
            if not _is_number(v) or not v > 0 or math.isinf(v):
                raise CommError(f"Topology.{f} must be a positive number of GB/s, not {v!r}.")
        for f in ("intra_latency_s", "inter_latency_s"):
            v = getattr(self, f)
            if not _is_number(v) or not v >= 0 or math.isinf(v):
                raise CommError(f"Topology.{f} must be a non-negative number of seconds, not {v!r}.")

    def to_dict(self) -> dict:
        return asdict(self)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def _pcie_gen(host_interface: str) -> int | None:
    """PCIe generation from strings like 'PCIe Gen4 x16 (64 GB/s)' or 'PCIe 4.0 x16'; None if not stated."""
    h = host_interface.lower()
    m = re.search(r"gen\s*(\d)", h) or re.search(r"pcie\s*(\d)\.0", h)
    return int(m.group(1)) if m else None


def _pcie_gbs(host_interface: str) -> tuple[float, str]:
    gen = _pcie_gen(host_interface)
    if gen not in PCIE_ACHIEVABLE_GBS:
        gbs = PCIE_ACHIEVABLE_GBS[PCIE_DEFAULT_GEN]
        return gbs, (f"host interface '{host_interface}' names no PCIe generation; Gen{PCIE_DEFAULT_GEN} assumed, "
                     f"{gbs:g} GB/s")
    gbs = PCIE_ACHIEVABLE_GBS[gen]
    return gbs, (f"PCIe Gen{gen} x16 through the host, {PCIE_COPY_GBS[gen]:g} GB/s copy x {PCIE_COLLECTIVE_FRACTION} "
                 f"= {gbs:g} GB/s per GPU per direction (4x RTX 5090 all_reduce busbw 35 GB/s, nccl issue #1639)")


def _bridge_size(interconnect_name: str) -> int | None:
    """GPUs joined by an NVLink bridge ('2-way', '2- or 4-way', '(2 GPUs)'); None when the link is not a bridge."""
    n = interconnect_name.lower()
    if "bridge" not in n:
        return None
    sizes = [int(x) for x in re.findall(r"(\d+)\s*-?\s*(?:way|gpus)", n)]
    sizes += [int(x) for x in re.findall(r"(\d+)-\s*or", n)]
    return max(sizes) if sizes else 2


def _family(key: str, table):
    k = key.lower()
    for fam, *rest in table:
        if fam in k:
            return rest
    return None


def _measured_number(measured: dict, key: str, hw_key: str) -> float | None:
    if key not in measured:
        return None
    v = measured[key]
    if not _is_number(v) or not v > 0:
        raise CommError(f"field 'measured.{key}' of {hw_key} must be a positive number, not {v!r}.")
    return float(v)


def topology_for(hw, num_gpus: int, gpus_per_node: int | None = None, inter_gbs: float | None = None) -> Topology:
    """The default topology of ``num_gpus`` accelerators of kind ``hw`` (a HardwareSpec or a catalog name).

    Order of precedence for each figure: an explicit argument, then ``hw.measured`` (``intra_gbs`` or
    ``allreduce_busbw_gbs`` -- an in-node all-reduce busbw at >= 1 GiB, measured with NCCL_ALGO=Ring --
    ``inter_gbs``, ``intra_latency_s``, ``inter_latency_s``), then the defaults documented in this module:

    * NVLink/NVSwitch: intra = bidir/2 x 0.82 (nccl-tests ring busbw 370/450 on H100, 366/450 on H200);
      NVLink 3.0 x 0.775 (8x A100: 232.5/300).
    * NVLink bridges (A100 PCIe, H100 PCIe/NVL, H200 NVL, RTX 3090): the bridge joins 2 (or 4) cards; a node
      with more cards than that runs its rings over PCIe through the host, so intra is the PCIe figure.
    * Other scale-up fabrics (xGMI, Gaudi RoCE, TPU ICI): bidir/2 x 0.70 (Gaudi: 21 of 24 ports).
    * PCIe-only cards (interconnect 0): intra from the PCIe generation, host-bound: 0.70 x the copy rate
      (Gen3 12, Gen4 25, Gen5 50 GB/s) = 8.4, 17.5, 35 GB/s (4x RTX 5090 all_reduce: 35 GB/s busbw).
    * gpus_per_node: 8 (4 for MI250X; a TPU slice up to its pod size), or num_gpus if fewer. Consumer PCIe cards
      (RTX 4090, Arc A770, ...) are also assumed 8 to a host, as in the 8-card servers GPU clouds rent; a desktop
      holds 2-4, pass gpus_per_node for it. On PCIe the per-GPU rate is host-bound whatever the count.
    * inter: the family's per-GPU NIC line rate (HDR 200 Gb/s for A100, NDR 400 Gb/s for Hopper/Blackwell...)
      / 8 bits x 0.90 (nccl-tests: 46-48 GB/s per 400 Gb/s NIC).
    """
    if isinstance(hw, str):
        from gpuscope.specs.hardware import load_hardware

        hw = load_hardware(hw)
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
        raise CommError(f"num_gpus must be a positive integer, not {num_gpus!r}.")
    if gpus_per_node is not None and (
        isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1
    ):
        raise CommError(f"gpus_per_node must be a positive integer, not {gpus_per_node!r}.")
    if inter_gbs is not None and (not _is_number(inter_gbs) or not inter_gbs > 0):
        raise CommError(f"inter_gbs must be a positive number of GB/s, not {inter_gbs!r}.")

    key = str(getattr(hw, "key", "") or "").lower()
    bidir = float(getattr(hw, "interconnect_gbs_bidir", 0.0) or 0.0)
    link_name = str(getattr(hw, "interconnect_name", "") or "")
    host = str(getattr(hw, "host_interface", "") or "")
    measured = dict(getattr(hw, "measured", None) or {})
    is_tpu = "tpu" in key

    # gpus per node
    gpn_src = ""
    if gpus_per_node is None:
        fam = _family(key, _GPUS_PER_NODE_BY_FAMILY)
        per_node, gpn_src = (fam[0], fam[1]) if fam else (DEFAULT_GPUS_PER_NODE, "8 per node (default)")
        if is_tpu:
            pod = next((p for tag, p in _TPU_POD if tag in key), num_gpus)
            per_node, gpn_src = pod, f"one ICI domain up to the {pod}-chip pod"
        gpus_per_node = min(per_node, num_gpus)
    else:
        gpn_src = "given"

    # intra-node bandwidth
    pcie_gbs, pcie_src = _pcie_gbs(host)
    bridge = _bridge_size(link_name)
    if bidir <= 0:
        intra, intra_src, intra_lat, link_desc = pcie_gbs, f"no GPU-to-GPU link: {pcie_src}", PCIE_STEP_LATENCY_S, (
            f"{host or 'PCIe'} through the host (no GPU-to-GPU link)")
    elif bridge is not None and gpus_per_node > bridge:
        intra, intra_lat = pcie_gbs, PCIE_STEP_LATENCY_S
        intra_src = f"{link_name} joins only {bridge} GPUs; rings over {gpus_per_node} GPUs cross PCIe: {pcie_src}"
        link_desc = f"{host or 'PCIe'} through the host ({link_name} pairs unused by the ring)"
    elif "nvlink" in link_name.lower():
        ver = re.search(r"nvlink\s*(\d)", link_name.lower())
        frac = NVLINK_RING_FRACTION_BY_VERSION.get(int(ver.group(1)) if ver else 0, NVLINK_RING_FRACTION)
        intra, intra_lat = bidir / 2 * frac, NVLINK_STEP_LATENCY_S
        why = ("8x A100 all_reduce_perf 232.5 GB/s busbw over 300 GB/s per direction, nccl-tests issue #175"
               if frac != NVLINK_RING_FRACTION else
               "nccl-tests ring all_reduce busbw: 8x H100 ~370, 8x H200 366 at 8 GiB, over 450 GB/s per direction")
        intra_src = f"{bidir:g}/2 GB/s x {frac} ({why})"
        link_desc = f"{link_name} ({bidir:g} GB/s bidir)"
    else:
        per_dir = bidir / 2
        note = ""
        if "gaudi" in key:
            per_dir *= GAUDI_SCALEUP_PORTS / GAUDI_PORTS
            note = f" x {GAUDI_SCALEUP_PORTS}/{GAUDI_PORTS} scale-up ports"
        intra, intra_lat = per_dir * OTHER_SCALEUP_FRACTION, NVLINK_STEP_LATENCY_S
        intra_src = f"{bidir:g}/2 GB/s{note} x {OTHER_SCALEUP_FRACTION} (default fraction, not measured)"
        link_desc = f"{link_name} ({bidir:g} GB/s bidir)"
    hw_key = key or "the hardware spec"
    m_intra = _measured_number(measured, "intra_gbs", hw_key) or _measured_number(
        measured, "allreduce_busbw_gbs", hw_key)
    if m_intra is not None:
        intra, intra_src = m_intra, f"measured in-node ring all-reduce busbw {m_intra:g} GB/s"

    # inter-node bandwidth
    fam = _family(key, _NIC_GBPS)
    nic_gbps, nic_src = (fam[0], fam[1]) if fam else (DEFAULT_NIC_GBPS, DEFAULT_NIC_SOURCE)
    m_inter = _measured_number(measured, "inter_gbs", hw_key)
    if inter_gbs is not None:
        inter, inter_src = float(inter_gbs), f"given: {float(inter_gbs):g} GB/s per GPU"
        nic_desc = f"{inter:g} GB/s per GPU between nodes (given)"
    elif m_inter is not None:
        inter, inter_src = m_inter, f"measured: {m_inter:g} GB/s per GPU"
        nic_desc = f"{inter:g} GB/s per GPU between nodes (measured)"
    else:
        inter = nic_gbps / 8 * NIC_FRACTION
        inter_src = f"{nic_gbps:g} Gb/s per GPU / 8 x {NIC_FRACTION}: {nic_src}"
        nic_desc = f"{gpus_per_node}x{nic_gbps:g} Gb/s per node" if nic_gbps in (200.0, 400.0) else (
            f"{nic_gbps:g} Gb/s per GPU between nodes")

    intra_lat = _measured_number(measured, "intra_latency_s", hw_key) or intra_lat
    inter_lat = _measured_number(measured, "inter_latency_s", hw_key) or NET_STEP_LATENCY_S

    return Topology(
        gpus_per_node=gpus_per_node,
        intra_gbs=float(intra),
        inter_gbs=float(inter),
        intra_latency_s=float(intra_lat),
        inter_latency_s=float(inter_lat),
        name=f"{gpus_per_node} GPUs/node on {link_desc}, {nic_desc}",
        source=f"gpus_per_node: {gpn_src}; intra: {intra_src}; inter: {inter_src}; latency per step: intra "
               f"{intra_lat * 1e6:g} us, inter {inter_lat * 1e6:g} us (NCCL tuning.cc hwLat + base, see comm.py)",
    )


# --- nccl-tests definitions -------------------------------------------------------------------------------------
def _op(op: str) -> str:
    o = re.sub(r"[\s\-]+", "_", str(op).strip().lower())
    o = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
         "alltoall": "all_to_all", "sendrecv": "send_recv"}.get(o.replace("_", ""), o)
    if o not in OPS:
        raise CommError(f"collective op '{op}' is not supported; allowed: {', '.join(OPS)}.")
    return o


def _check_group(group) -> int:
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise CommError(f"group must be a positive integer number of ranks, not {group!r}.")
    return group


def _check_bytes(nbytes) -> float:
    if not _is_number(nbytes) or nbytes < 0 or math.isinf(nbytes):
        raise CommError(f"nbytes must be a non-negative finite number of bytes, not {nbytes!r}.")
    return float(nbytes)


def bus_factor(op: str, group: int) -> float:
    """nccl-tests' busbw / algbw factor F(op, n) (doc/PERFORMANCE.md): see the module docstring."""
    o, n = _op(op), _check_group(group)
    if o == "all_reduce":
        return 2 * (n - 1) / n
    if o in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0  # broadcast, send_recv


def alg_bandwidth_gbs(nbytes: float, seconds: float) -> float:
    """nccl-tests algbw: S / t in GB/s (1e9 bytes/s), S the buffer size printed in the 'size' column."""
    b = _check_bytes(nbytes)
    if not _is_number(seconds) or not seconds > 0:
        raise CommError(f"seconds must be a positive number, not {seconds!r}.")
    return b / seconds / 1e9


def bus_bandwidth_gbs(op: str, nbytes: float, group: int, seconds: float) -> float:
    """nccl-tests busbw: algbw x F(op, n); all_reduce 2(n-1)/n, all_gather/reduce_scatter/all_to_all (n-1)/n,
    broadcast/send_recv 1."""
    return alg_bandwidth_gbs(nbytes, seconds) * bus_factor(op, group)


# --- time model -------------------------------------------------------------------------------------------------
def _ceil_log2(x: int) -> int:
    return (x - 1).bit_length() if x > 1 else 0


def collective_time(op: str, nbytes: float, group: int, topo: Topology, *, gpus_per_node_in_group: int | None = None,
                    algorithm: str = "ring") -> float:
    """Seconds for one collective of ``group`` ranks on ``topo`` (alpha-beta; see the module docstring).

    ``nbytes`` is the buffer size as nccl-tests counts it (all_gather: the full output; reduce_scatter: the
    full input; others: the per-rank buffer). ``gpus_per_node_in_group`` (k) is how many of the group's ranks
    share a node; default min(group, topo.gpus_per_node), i.e. packed. The group spans ceil(group / k) nodes.
    """
    o = _op(op)
    n = _check_group(group)
    s = _check_bytes(nbytes)
    if not isinstance(topo, Topology):
        raise CommError(f"topo must be a Topology (see topology_for), not {type(topo).__name__}.")
    alg = str(algorithm).strip().lower()
    if alg not in ALGORITHMS:
        raise CommError(f"algorithm '{algorithm}' is not supported; allowed: {', '.join(ALGORITHMS)}.")
    if gpus_per_node_in_group is None:
        k = min(n, topo.gpus_per_node)
    else:
        k = gpus_per_node_in_group
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= min(n, topo.gpus_per_node):
            raise CommError(
                f"gpus_per_node_in_group must be an integer from 1 to min(group, gpus_per_node) = "
                f"{min(n, topo.gpus_per_node)}, not {k!r}."
            )
    if n == 1:
        return 0.0
    m = -(-n // k)  # nodes spanned
    a_in, a_net = topo.intra_latency_s, topo.inter_latency_s
    gb = 1e9

    if o == "all_to_all":
        # S(k-1)/n to on-node peers over intra, S(n-k)/n off-node over the rank's own NIC share; concurrent.
        t_bw = max(s * (k - 1) / n / (topo.intra_gbs * gb), s * (n - k) / n / (topo.inter_gbs * gb))
        return (k - 1) * a_in + (n - k) * a_net + t_bw

    if o == "send_recv":
        if m == 1:
            return a_in + s / (topo.intra_gbs * gb)
        return a_net + s / (topo.inter_gbs * gb)

    # Ring-type collectives: all_reduce, all_gather, reduce_scatter, broadcast.
    bw = topo.intra_gbs if m == 1 else min(topo.intra_gbs, k * topo.inter_gbs)
    t_bw = s * bus_factor(o, n) / (bw * gb)
    if o == "all_reduce" and alg == "tree":
        latency = 2 * (_ceil_log2(k) * a_in + _ceil_log2(m) * a_net)
    else:
        steps = 2 * (n - 1) if o == "all_reduce" else n - 1
        inter_steps = (2 * (m - 1) if o == "all_reduce" else m - 1)
        latency = (steps - inter_steps) * a_in + inter_steps * a_net
    return latency + t_bw
