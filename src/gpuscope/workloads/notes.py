"""The host notes a headline carries (shared by the infer and train kinds): the host's speed moving during a run,
the hypervisor taking CPU time, and the energy per token."""

from __future__ import annotations

# The host probes before and after a timed phase differ by more than this fraction of their mean: the headline says
# the host's speed moved. Probes ~0.1 s apart differed by 3-4% at the median and 24-33% at the 90th percentile
# (research/results/2026-11-30-h200-g/README.md), so this flags the worst tenth of moments.
HOST_MOVED = 0.25
STEAL_NOTE = 0.02  # a hypervisor taking more of the CPUs than this during a timed phase is said in the headline


def host_moved(r: dict, key: str) -> str:
    a, b = r.get(f"{key}_before_s"), r.get(f"{key}_after_s")
    if not a or not b:
        return ""
    moved = abs(b - a) / ((a + b) / 2)
    return (f"; the host's speed moved {moved:.0%} during the run (host probe {'slower' if b > a else 'faster'} "
            "after than before: host-bound timings are uncertain by about that much)" if moved > HOST_MOVED else "")


def stolen(load: dict | None) -> str:
    steal = (load or {}).get("steal_fraction")
    return (f"; the hypervisor took {steal:.0%} of the CPUs' time meanwhile (host-bound timings read slow)"
            if steal is not None and steal > STEAL_NOTE else "")


def joules(r: dict) -> str:
    return f", {r['j_per_token']:.3g} J/token" if r.get("j_per_token") else ""


def not_ok(r: dict) -> str | None:
    """The headline of a result that is not ok (its status and why), or None for an ok one."""
    st = r.get("status")
    if st == "ok":
        return None
    if st == "timeout" and r.get("timeout_s") is not None and not r.get("error"):
        return f"timeout after {r['timeout_s']:.0f}s"
    return f"{st} {r.get('reason') or r.get('error') or r.get('phase') or ''}".strip()
