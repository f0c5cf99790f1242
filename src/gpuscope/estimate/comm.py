"""Communication model for multi-GPU plans: an alpha-beta model of NCCL-style collectives.

Pure Python (shared/DESIGN.md, "Layers"): no torch, no numpy.

Public API (used by the layout planner, ``estimate/parallel.py``)::

    topo = topology.topology_for(hw, num_gpus, gpus_per_node=None, inter_gbs=None)   # -> Topology (topology.py)
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

from gpuscope.estimate.topology import CommError, Topology, is_number

__all__ = [
    "OPS",
    "ALGORITHMS",
    "collective_time",
    "bus_bandwidth_gbs",
    "alg_bandwidth_gbs",
    "bus_factor",
]

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
ALGORITHMS = ("ring", "tree")


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
    if not is_number(nbytes) or nbytes < 0 or math.isinf(nbytes):
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
    if not is_number(seconds) or not seconds > 0:
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
