"""The ``compression`` kind: DDP gradient-compression hooks as one torchrun job, a reference run then one run per
hook with the same seed and data: step time, bytes sent per step, loss deviation (measure/distributed/compression.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.errors import UserError
from gpuscope.specs.axes import MEASURED_PRECISIONS, Precision, WorkloadKind
from gpuscope.workloads.dist import DistCase, run_job
from gpuscope.workloads.notes import not_ok

WORKER = "gpuscope.measure.distributed.compression"


@dataclass(frozen=True, kw_only=True)
class CompressionCase(DistCase):
    KIND = WorkloadKind.COMPRESSION
    ALWAYS = ("micro_batch", "seq", "precision", "steps", "warmup", "hooks", "lr", "start_powersgd_iter", "nproc",
              "nnodes", "timeout_s")
    FLAGS = {"timeout_s": "timeout", "start_powersgd_iter": "start-powersgd-iter"}

    model: str | None = None
    config: dict | None = None
    micro_batch: int = 1
    seq: int = 1024
    precision: Precision = Precision.FP32
    steps: int = 12
    warmup: int = 3
    hooks: list = field(default_factory=lambda: ["none"])
    lr: float = 1e-3
    start_powersgd_iter: int = 2
    nproc: int = 2
    nnodes: int = 1
    timeout_s: float = 1800
    device: str | None = None

    def __post_init__(self):
        self.check_launch()
        self.axis("precision", Precision, among=MEASURED_PRECISIONS)
        if self.start_powersgd_iter < 2:
            raise UserError(f"--start-powersgd-iter must be >= 2 (PowerSGD's rule), not {self.start_powersgd_iter}.")
        if not 0 <= self.warmup < self.steps:
            raise UserError(f"--warmup must be >= 0 and below --steps ({self.steps}), not {self.warmup}.")
        if not self.lr > 0:
            raise UserError(f"--lr must be positive, not {self.lr}.")

    @property
    def name(self) -> str:
        return (f"compression/{self.model_label}/{self.world}p-mb{self.micro_batch}-s{self.seq}-{self.precision}-"
                f"{'+'.join(self.hooks)}")


CASE = CompressionCase


estimate = None  # the planner does not model gradient compression


def run(case: CompressionCase) -> list[dict]:
    return run_job(case, WORKER)


def headline(r: dict) -> str:
    bad = not_ok(r)
    if bad is not None:
        return bad
    ref = (r.get("reference") or {}).get("step_s")
    at = f", reference step {ref * 1e3:.2f} ms" if ref else ""
    return f"{len(r.get('variants') or [])} hooks on {r.get('world_size')} ranks{at}"
