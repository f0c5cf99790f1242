"""The ``host`` kind: a calibration's fits of this host's costs per kernel (decode and training, each over several
passes with their host probes; measure/host/costs.host_costs and train_host_costs), stored whole so that a
calibration's host figures can be traced after the run."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.specs.axes import WorkloadKind
from gpuscope.workloads.case import Case
from gpuscope.workloads.notes import not_ok

KEY = "host/costs"


@dataclass(frozen=True, kw_only=True)
class HostCase(Case):
    KIND = WorkloadKind.HOST
    ALWAYS = ("device",)

    device: str | None = None

    @property
    def name(self) -> str:
        return KEY

    @property
    def key(self) -> str:
        return KEY  # one calibration's fits a run: the newest is the machine's


CASE = HostCase


estimate = None


def run(case: HostCase) -> dict:
    """The decode-host fit, and the training-host fit in units of its tiny-model launch cost."""
    from gpuscope.measure.host.costs import host_costs, train_host_costs

    host = host_costs(case.device)
    detail = host.get("host_detail") or {}
    tiny = detail.get("launch_tiny_s") or host.get("host_launch_s")
    train = train_host_costs(tiny, case.device, train_probe_s=detail.get("train_probe_s")) if tiny else {}
    return {"status": "error" if host.get("host_invalid") else "ok", "host": host, "train": train}


def headline(r: dict) -> str:
    bad = not_ok(r)
    if bad is not None:
        return bad
    h = r.get("host") or {}
    if not h.get("host_launch_s"):
        return "ok"
    d = h.get("host_detail") or {}
    return (f"host {h['host_launch_s'] * 1e6:.1f} us a kernel at a {h.get('host_probe_s', 0) * 1e3:.2f} ms "
            f"probe; {d.get('valid_passes')} passes spread {d.get('launch_spread', 0):.0%} "
            f"({d.get('launch_spread_at_probe', 0):.0%} each at its probe)")
