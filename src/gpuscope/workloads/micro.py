"""The ``micro`` kind: one microbenchmark of a device's ceilings (matmul per dtype, device memory copy/read/write,
host <-> device copies; measure/micro/bench.py). The configurations of a run come from measure/micro/bench
``micro_configs``; each is one stored measurement under this kind's key."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.specs.axes import WorkloadKind
from gpuscope.workloads.case import Case
from gpuscope.workloads.notes import not_ok

BENCHES = ("matmul", "memory", "transfer")
MODES = ("quick", "sweep")


@dataclass(frozen=True, kw_only=True)
class MicroCase(Case):
    KIND = WorkloadKind.MICRO
    ALWAYS = ("mode", "device", "bench")

    mode: str
    device: str
    bench: str
    dtype: str | None = None
    op: str | None = None
    pinned: bool | None = None

    def __post_init__(self):
        if self.bench not in BENCHES:
            raise UserError(f"micro bench '{self.bench}' is not one of {', '.join(BENCHES)}.")
        if self.mode not in MODES:
            raise UserError(f"micro mode '{self.mode}' is not one of {', '.join(MODES)}.")

    @property
    def name(self) -> str:
        if self.bench == "matmul":
            return f"micro/matmul/{self.dtype}/{self.mode}" + ("-shapes" if self.extra.get("shapes_given") else "")
        if self.bench == "memory":
            return f"micro/memory/{self.op}/{self.mode}"
        return f"micro/transfer/{self.op}-{'pinned' if self.pinned else 'pageable'}/{self.mode}"


CASE = MicroCase


estimate = None  # a ceiling is what the planner is calibrated with, not what it predicts


def run(case: MicroCase, runner=None) -> dict:
    """One microbenchmark on its device; ``runner`` (measure/micro/bench.Runner) shares the L2 flush buffer."""
    if runner is None:
        from gpuscope.measure.device.device import Device
        from gpuscope.measure.micro.bench import Runner

        runner = Runner(Device(case.device))
    return runner.run(case.to_dict())


def headline(r: dict) -> str:
    bad = not_ok(r)
    if bad is not None:
        return bad
    if r.get("bench") == "matmul":
        m, n, k = r["best_shape"]
        fast = (f"; mean {r['tflops_best_mean']:.4g}, fastest iteration {r['tflops_best_iteration']:.4g}"
                if r.get("tflops_best_iteration") and r.get("tflops_best_mean") else "")
        ach = ""
        if r.get("tflops_achievable"):
            am, an, ak = r["achievable_shape"]
            clk = r.get("achievable_sm_clock_mhz_min")
            ach = (f"; achievable {r['tflops_achievable']:.4g} at {am}x{an}x{ak} (mamf-finder's MAMF: median of "
                   f"the 5 fastest burst iterations{f', SM clock >= {clk:.0f} MHz' if clk else ''})")
        return (f"{r['tflops']:.4g} {r.get('unit', 'TFLOPS')} sustained (best median of {len(r['shapes'])} "
                f"shapes, at {m}x{n}x{k}{fast}){ach}")
    return f"{r['gbs']:.4g} GB/s (median of {r['iters']}, spread {r.get('rel_iqr') or 0:.1%})"
