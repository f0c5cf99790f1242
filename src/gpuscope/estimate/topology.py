"""Default topology of a multi-GPU job: how many GPUs share a node and how fast they talk inside and between
nodes (per GPU, one direction, GB/s decimal), with the per-step latencies the collective model uses (comm.py).

Pure Python (shared/DESIGN.md, "Layers"): no torch, no numpy.

Order of precedence for each figure: an explicit argument, then ``hw.measured`` (``intra_gbs`` or
``allreduce_busbw_gbs`` -- an in-node all-reduce busbw at >= 1 GiB, measured with NCCL_ALGO=Ring --
``inter_gbs``, ``intra_latency_s``, ``inter_latency_s``), then these defaults (each constant below cites its source):

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

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from gpuscope.errors import UserError


class CommError(UserError, ValueError):
    """Bad input to the communication model (a ValueError, and a UserError for the CLI: exit code 2)."""


def is_number(v) -> bool:
    """A finite-or-infinite real number that is not a bool or NaN."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


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
            if not is_number(v) or not v > 0 or math.isinf(v):
                raise CommError(f"Topology.{f} must be a positive number of GB/s, not {v!r}.")
        for f in ("intra_latency_s", "inter_latency_s"):
            v = getattr(self, f)
            if not is_number(v) or not v >= 0 or math.isinf(v):
                raise CommError(f"Topology.{f} must be a non-negative number of seconds, not {v!r}.")

    def to_dict(self) -> dict:
        return asdict(self)


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
    if not is_number(v) or not v > 0:
        raise CommError(f"field 'measured.{key}' of {hw_key} must be a positive number, not {v!r}.")
    return float(v)


def _positive_int(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and v >= 1


def topology_for(hw, num_gpus: int, gpus_per_node: int | None = None, inter_gbs: float | None = None) -> Topology:
    """The default topology of ``num_gpus`` accelerators of kind ``hw`` (a HardwareSpec or a catalog name); the
    precedence of arguments, measured figures and defaults is in the module docstring."""
    if isinstance(hw, str):
        from gpuscope.specs.hardware import load_hardware

        hw = load_hardware(hw)
    if not _positive_int(num_gpus):
        raise CommError(f"num_gpus must be a positive integer, not {num_gpus!r}.")
    if gpus_per_node is not None and not _positive_int(gpus_per_node):
        raise CommError(f"gpus_per_node must be a positive integer, not {gpus_per_node!r}.")
    if inter_gbs is not None and (not is_number(inter_gbs) or not inter_gbs > 0):
        raise CommError(f"inter_gbs must be a positive number of GB/s, not {inter_gbs!r}.")

    key = str(getattr(hw, "key", "") or "").lower()
    measured = dict(getattr(hw, "measured", None) or {})
    hw_key = key or "the hardware spec"
    if gpus_per_node is None:
        gpus_per_node, gpn_src = _default_gpus_per_node(key, num_gpus)
    else:
        gpn_src = "given"
    intra, intra_src, intra_lat, link_desc = _intra_link(hw, key, gpus_per_node)
    m_intra = _measured_number(measured, "intra_gbs", hw_key) or _measured_number(
        measured, "allreduce_busbw_gbs", hw_key)
    if m_intra is not None:
        intra, intra_src = m_intra, f"measured in-node ring all-reduce busbw {m_intra:g} GB/s"
    inter, inter_src, nic_desc = _inter_link(key, _measured_number(measured, "inter_gbs", hw_key), inter_gbs,
                                             gpus_per_node)
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


def _default_gpus_per_node(key: str, num_gpus: int) -> tuple[int, str]:
    """(GPUs per node, why): the family's node size (8 by default; a TPU slice up to its pod), at most num_gpus."""
    fam = _family(key, _GPUS_PER_NODE_BY_FAMILY)
    per_node, src = (fam[0], fam[1]) if fam else (DEFAULT_GPUS_PER_NODE, "8 per node (default)")
    if "tpu" in key:
        pod = next((p for tag, p in _TPU_POD if tag in key), num_gpus)
        per_node, src = pod, f"one ICI domain up to the {pod}-chip pod"
    return min(per_node, num_gpus), src


def _intra_link(hw, key: str, gpus_per_node: int) -> tuple[float, str, float, str]:
    """(per-GPU in-node GB/s, its source, step latency, link description) from the catalog's link fields: PCIe
    through the host, an NVLink bridge too small for the node's ring, NVLink/NVSwitch, or another fabric."""
    bidir = float(getattr(hw, "interconnect_gbs_bidir", 0.0) or 0.0)
    link_name = str(getattr(hw, "interconnect_name", "") or "")
    host = str(getattr(hw, "host_interface", "") or "")
    pcie_gbs, pcie_src = _pcie_gbs(host)
    bridge = _bridge_size(link_name)
    if bidir <= 0:
        return (pcie_gbs, f"no GPU-to-GPU link: {pcie_src}", PCIE_STEP_LATENCY_S,
                f"{host or 'PCIe'} through the host (no GPU-to-GPU link)")
    if bridge is not None and gpus_per_node > bridge:
        return (pcie_gbs,
                f"{link_name} joins only {bridge} GPUs; rings over {gpus_per_node} GPUs cross PCIe: {pcie_src}",
                PCIE_STEP_LATENCY_S, f"{host or 'PCIe'} through the host ({link_name} pairs unused by the ring)")
    link_desc = f"{link_name} ({bidir:g} GB/s bidir)"
    if "nvlink" in link_name.lower():
        ver = re.search(r"nvlink\s*(\d)", link_name.lower())
        frac = NVLINK_RING_FRACTION_BY_VERSION.get(int(ver.group(1)) if ver else 0, NVLINK_RING_FRACTION)
        why = ("8x A100 all_reduce_perf 232.5 GB/s busbw over 300 GB/s per direction, nccl-tests issue #175"
               if frac != NVLINK_RING_FRACTION else
               "nccl-tests ring all_reduce busbw: 8x H100 ~370, 8x H200 366 at 8 GiB, over 450 GB/s per direction")
        return bidir / 2 * frac, f"{bidir:g}/2 GB/s x {frac} ({why})", NVLINK_STEP_LATENCY_S, link_desc
    per_dir, note = bidir / 2, ""
    if "gaudi" in key:
        per_dir *= GAUDI_SCALEUP_PORTS / GAUDI_PORTS
        note = f" x {GAUDI_SCALEUP_PORTS}/{GAUDI_PORTS} scale-up ports"
    return (per_dir * OTHER_SCALEUP_FRACTION,
            f"{bidir:g}/2 GB/s{note} x {OTHER_SCALEUP_FRACTION} (default fraction, not measured)",
            NVLINK_STEP_LATENCY_S, link_desc)


def _inter_link(key: str, measured_gbs: float | None, given_gbs: float | None,
                gpus_per_node: int) -> tuple[float, str, str]:
    """(per-GPU between-node GB/s, its source, description): given, else measured, else the family's NIC line
    rate / 8 bits x NIC_FRACTION."""
    if given_gbs is not None:
        inter = float(given_gbs)
        return inter, f"given: {inter:g} GB/s per GPU", f"{inter:g} GB/s per GPU between nodes (given)"
    if measured_gbs is not None:
        return (measured_gbs, f"measured: {measured_gbs:g} GB/s per GPU",
                f"{measured_gbs:g} GB/s per GPU between nodes (measured)")
    fam = _family(key, _NIC_GBPS)
    nic_gbps, nic_src = (fam[0], fam[1]) if fam else (DEFAULT_NIC_GBPS, DEFAULT_NIC_SOURCE)
    nic_desc = f"{gpus_per_node}x{nic_gbps:g} Gb/s per node" if nic_gbps in (200.0, 400.0) else (
        f"{nic_gbps:g} Gb/s per GPU between nodes")
    return nic_gbps / 8 * NIC_FRACTION, f"{nic_gbps:g} Gb/s per GPU / 8 x {NIC_FRACTION}: {nic_src}", nic_desc
