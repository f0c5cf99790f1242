"""The ``collective`` kind: one (op, size) point of a collectives sweep under torchrun (time, algbw and busbw as
nccl-tests computes them, a correctness check; measure/collectives/). The sweep's worker puts the planner's busbw
beside each point, so the kind has no estimate of its own here."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.specs.axes import WorkloadKind
from gpuscope.workloads.case import Case
from gpuscope.workloads.notes import not_ok

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
DTYPES = ("fp32", "bf16", "fp16")
BACKENDS = ("auto", "nccl", "gloo")
WORKER = "gpuscope.measure.collectives.worker"


@dataclass(frozen=True, kw_only=True)
class CollectiveCase(Case):
    KIND = WorkloadKind.COLLECTIVE
    KIND_IN_DICT = False  # a point's stored configuration has no "kind" (the store's row has it)
    ALWAYS = ("op", "nbytes", "dtype", "backend", "world_size", "nnodes", "nproc_per_node", "device")

    op: str
    nbytes: int
    dtype: str
    backend: str
    world_size: int
    nnodes: int
    nproc_per_node: int
    device: str | None = None

    @classmethod
    def from_record(cls, rec: dict) -> "CollectiveCase":
        """The case of one point the worker wrote."""
        return cls.from_dict({k: rec.get(k) for k in cls.ALWAYS})

    @property
    def name(self) -> str:
        return (f"collective/{self.op}/{self.dtype}/{self.nbytes}B/{self.backend}/"
                f"{self.nnodes}x{self.nproc_per_node}")


CASE = CollectiveCase


estimate = None


def run(case: CollectiveCase) -> list[dict]:
    """This one point as its own torchrun job (a sweep of one size)."""
    from gpuscope.measure.distributed.launch import run_torchrun

    args = ["--ops", case.op, "--min-bytes", str(case.nbytes), "--max-bytes", str(case.nbytes), "--dtype",
            case.dtype, "--backend", case.backend]
    return run_torchrun(WORKER, args, case.nproc_per_node, nnodes=case.nnodes)


def headline(r: dict) -> str:
    bad = not_ok(r)
    if bad is not None:
        return bad
    t = r.get("time_s")
    at = f"{t * 1e6:.1f} us" if isinstance(t, (int, float)) and t < 1e-3 else (
        f"{t * 1e3:.3f} ms" if isinstance(t, (int, float)) else "-")
    bw = r.get("busbw_gbs")
    return (f"{r.get('op')} {r.get('size')}: {at}" + (f", busbw {bw:.4g} GB/s" if isinstance(bw, (int, float)) else "")
            + ("" if r.get("correct", True) else " WRONG RESULT"))
