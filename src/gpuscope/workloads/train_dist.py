"""The ``train-dist`` kind: data-parallel training (DDP or FSDP2) as one torchrun job, with the per-rank step,
tokens/s, memory per phase and, with ``baseline``, the scaling efficiency against one GPU (measure/distributed/train.py)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.specs.axes import (MEASURED_PRECISIONS, MEASURED_RECOMPUTE, MEASURED_STRATEGIES, Precision, Recompute,
                                 Strategy, WorkloadKind)
from gpuscope.workloads.case import model_spec
from gpuscope.workloads.dist import DistCase, run_job
from gpuscope.workloads.notes import not_ok
from gpuscope.workloads.train import rows  # noqa: F401  (peak, step and phase peaks, as one GPU's)

WORKER = "gpuscope.measure.distributed.train"


@dataclass(frozen=True, kw_only=True)
class TrainDistCase(DistCase):
    KIND = WorkloadKind.TRAIN_DIST
    ALWAYS = ("strategy", "micro_batch", "seq", "precision", "recompute", "steps", "warmup", "baseline", "nproc",
              "nnodes", "timeout_s")
    FLAGS = {"timeout_s": "timeout", "gradient_as_bucket_view": "gradient-as-bucket-view"}
    HOST_PROBE, TTFT_PROBE = "host_probe_train_s", None

    strategy: Strategy = Strategy.DDP
    model: str | None = None
    config: dict | None = None
    micro_batch: int = 1
    seq: int = 2048
    precision: Precision = Precision.AMP_BF16
    recompute: Recompute = Recompute.NONE
    steps: int = 6
    warmup: int = 2
    baseline: bool = False
    nproc: int = 2
    nnodes: int = 1
    timeout_s: float = 1800
    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = False
    device: str | None = None

    def __post_init__(self):
        self.check_launch()
        self.non_negative("warmup")
        self.axis("strategy", Strategy, among=MEASURED_STRATEGIES)
        self.axis("precision", Precision, among=MEASURED_PRECISIONS)
        self.axis("recompute", Recompute, among=MEASURED_RECOMPUTE)
        if self.strategy is Strategy.FSDP and self.precision is Precision.AMP_FP16:
            raise UserError("--precision 'amp-fp16' is not supported with --strategy fsdp; use amp-bf16, bf16 or fp32.")
        if not self.bucket_cap_mb > 0:
            raise UserError(f"--bucket-cap-mb must be positive, not {self.bucket_cap_mb}.")

    def always(self) -> tuple[str, ...]:
        ddp = ("bucket_cap_mb", "gradient_as_bucket_view") if self.strategy is Strategy.DDP else ()
        return self.ALWAYS + ddp

    @property
    def name(self) -> str:
        return (f"train-dist/{self.model_label}/{self.strategy}-{self.world}p-mb{self.micro_batch}-s{self.seq}-"
                f"{self.precision}-rc_{self.recompute}")


CASE = TrainDistCase


def estimate(case: TrainDistCase, hw):
    """The planner's DDP/FSDP estimate over nproc x nnodes GPUs (AdamW, fused, one micro-batch a step)."""
    from gpuscope.estimate.train import estimate_train

    return estimate_train(model_spec(case), hw, micro_batch=case.micro_batch, seq=case.seq,
                          precision=case.precision.value, recompute=case.recompute.value, num_gpus=case.world,
                          strategy=case.strategy.value, bucket_view=case.gradient_as_bucket_view)


def run(case: TrainDistCase) -> list[dict]:
    return run_job(case, WORKER)


def headline(r: dict) -> str:
    bad = not_ok(r)
    if bad is not None:
        return bad
    eff = f", scaling efficiency {r['scaling_efficiency']:.1%}" if r.get("scaling_efficiency") else ""
    tps = f", {r['tokens_per_s']:.0f} tok/s" if r.get("tokens_per_s") else ""
    return f"{r.get('strategy')} on {r.get('world_size')} ranks: step {r['step_s'] * 1e3:.2f} ms{tps}{eff}"
