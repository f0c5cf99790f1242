"""The values of the workload axes (gpuscope.specs.axes) that the measurement runs, and the one sentence a case
with another value gets (a ValueError naming the case key and what is allowed). No torch: the torchrun workers'
case checks import it before a process group exists."""

from __future__ import annotations

from gpuscope.specs.axes import (MEASURED_PRECISIONS, MEASURED_RECOMPUTE, MEASURED_STRATEGIES, TRAIN_PRECISIONS,
                                 Engine, Precision, Recompute, Strategy)

ENGINES = Engine.values()  # every engine `bench infer` measures
HF_ENGINES = Engine.values([e for e in Engine if e.hf_generate])  # those whose decode loop is HF generate
PRECISIONS = Precision.values(MEASURED_PRECISIONS)  # training precisions a workload runs (fp8 is planner only)
TRAIN_PRECISION_NAMES = Precision.values(TRAIN_PRECISIONS)  # single-GPU `bench train`: + bf16-master
RECOMPUTES = Recompute.values(MEASURED_RECOMPUTE)  # none | full (selective is planner only)
STRATEGIES = Strategy.values(MEASURED_STRATEGIES)  # ddp | fsdp (hsdp is planner only)


def check_choice(key: str, value, allowed: tuple[str, ...]) -> None:
    """ValueError "<key>: '<value>' is not one of a, b, c" unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{key}: '{value}' is not one of {', '.join(allowed)}")
