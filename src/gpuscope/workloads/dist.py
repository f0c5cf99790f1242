"""What the two torchrun kinds (train-dist, compression) share: one of --model / --config, the launch sizes, and
their key (the readable name plus a hash of the case as sorted JSON with default separators, as they were stored
from the first)."""

from __future__ import annotations

from gpuscope.errors import UserError
from gpuscope.workloads.case import Case, digest, model_name


class DistCase(Case):
    """Mixin checks of a case that runs as one torchrun job (``nproc`` processes on each of ``nnodes``)."""

    def check_launch(self) -> None:
        if bool(self.model) == bool(self.config):
            raise UserError("give exactly one of --model and --config.")
        if self.config is not None and (not isinstance(self.config, dict) or not self.config.get("model_type")):
            raise UserError("--config: a Hugging Face config with a 'model_type' is needed.")
        self.positive("micro_batch", "seq", "steps", "nproc", "nnodes")
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            raise UserError(f"--timeout must be positive, not {self.timeout_s}.")
        if self.device is not None and self.device not in ("cuda", "cpu"):
            raise UserError(f"--device '{self.device}' is not supported for distributed runs (cuda or cpu).")

    @property
    def world(self) -> int:
        return int(self.nnodes) * int(self.nproc)

    @property
    def model_label(self) -> str:
        return model_name(self)

    @property
    def key(self) -> str:
        return f"{self.name}#{digest(self.to_dict(), compact=False)}"


def run_job(case: DistCase, worker: str) -> list[dict]:
    """The records of one torchrun job of ``worker`` for the case (rank 0's final one last); pipeline/dist.py turns
    a failed job into a result."""
    import json

    from gpuscope.measure.distributed.launch import run_torchrun

    return run_torchrun(worker, ["--case", json.dumps(case.to_dict())], case.nproc, nnodes=case.nnodes,
                        timeout_s=case.timeout_s)
