"""Workload kinds: one module each, chosen by name from ``KINDS``.

A kind's module defines its ``Case`` (a dataclass of typed fields: defaults and validation in one place,
``from_dict``/``to_dict``, ``name`` and ``key``; the module's ``CASE``), ``estimate(case, hw)`` (the planner's estimate, or None where the
planner does not model the kind), ``run(case)`` (torch imported lazily, by the measure module it delegates to),
``headline(result)`` (one line for views) and, where it has an estimate, ``rows(case, estimate, result)`` (the
metrics set beside their measurement). Adding a kind is one module, its tests and one line of ``KINDS``.

The functions below dispatch on a case's (or a result's) ``kind``; none imports torch.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from gpuscope.errors import UserError
from gpuscope.specs.axes import WorkloadKind

KINDS: dict[WorkloadKind, str] = {
    WorkloadKind.MICRO: "micro",
    WorkloadKind.INFER: "infer",
    WorkloadKind.TRAIN: "train",
    WorkloadKind.TRAIN_DIST: "train_dist",
    WorkloadKind.COLLECTIVE: "collective",
    WorkloadKind.COMPRESSION: "compression",
    WorkloadKind.HOST: "host",
    WorkloadKind.SERVE: "serve",
    WorkloadKind.DIFFUSION: "diffusion",
}


def module(kind) -> ModuleType:
    """The module of a kind (a WorkloadKind or its value)."""
    k = WorkloadKind.parse(kind, flag="kind") if not isinstance(kind, WorkloadKind) else kind
    return importlib.import_module(f"gpuscope.workloads.{KINDS[k]}")


def case_class(kind) -> type:
    """The Case dataclass of a kind."""
    return module(kind).CASE


def from_dict(d: dict, kind=None):
    """The typed Case of a case dict (``kind``: where the dict does not carry one, e.g. a collective point's)."""
    if not isinstance(d, dict):
        raise UserError(f"a case must be a JSON object, not {type(d).__name__}.")
    return case_class(kind or d.get("kind")).from_dict(d)


def as_case(case, kind=None):
    return case if not isinstance(case, dict) else from_dict(case, kind)


def case_name(case: dict, strict: bool = True) -> str:
    """A case's readable name; ``strict=False``: a case no kind accepts is named ``kind/model`` (a runner records
    it as an error rather than refusing it)."""
    try:
        return as_case(case).name
    except UserError:
        if strict:
            raise
        from gpuscope.workloads.case import model_name

        return f"{case.get('kind')}/{model_name(case)}"


def case_id(case: dict, strict: bool = True) -> str:
    """The key a case is stored and resumed by: its readable name and a hash of the whole case."""
    try:
        return as_case(case).key
    except UserError:
        if strict:
            raise
        from gpuscope.workloads.case import digest

        return f"{case_name(case, strict=False)}#{digest(case)}"


def has_estimate(kind) -> bool:
    return module(kind).estimate is not None


def estimated_kinds() -> tuple[str, ...]:
    return tuple(k.value for k in KINDS if has_estimate(k))


def estimate_for(case, hw):
    """The planner's estimate for a case (dict or Case) on ``hw``; a kind the planner does not model is a
    UserError saying so."""
    c = as_case(case)
    m = module(c.KIND)
    if m.estimate is None:
        raise UserError(f"the planner does not estimate {c.KIND.value} workloads.")
    return m.estimate(c, hw)


def rows(case, est, result: dict) -> list[tuple[str, float, float]]:
    """(metric, estimated, measured) of an ok result beside its estimate."""
    c = as_case(case)
    return module(c.KIND).rows(c, est, result)


def run_case(case: dict):
    """Measure one case in this process (torch is imported by the kind's measure module)."""
    c = as_case(case)
    return module(c.KIND).run(c)


def result_kind(result: dict) -> str | None:
    kind = result.get("kind")
    if kind is None and isinstance(result.get("host"), dict):
        return WorkloadKind.HOST.value  # a calibration's host fits carry no kind of their own
    return kind if kind in WorkloadKind.values() else None


def headline(result: dict) -> str:
    """One line for a result of any kind: its figures when ok, else its status and why."""
    kind = result_kind(result)
    if kind is None:
        from gpuscope.workloads.notes import not_ok

        return not_ok(result) or "ok"
    return module(kind).headline(result)
