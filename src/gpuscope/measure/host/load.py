"""How loaded and how disturbed the host was during a timed phase: CPU steal, other work, preemptions (Linux).

Why: the host-bound workloads are the noisiest ones gpuscope measures. On an H200 VM one calibration read the host 28%
slower than another four minutes later while the GPU's ceilings agreed within 0.3%
(research/results/2026-11-30-h200-f/README.md). A run that records what the host was doing can be told apart from a
run that met a busy or preempted host:

- ``steal_fraction``: CPU time the hypervisor gave to other guests, over all CPU time of the phase (``/proc/stat``'s
  steal column; 0 on bare metal);
- ``busy_fraction``: the share of all CPUs' time not idle (this process and everything else);
- ``involuntary_switches``: times this process was preempted (``getrusage``'s ru_nivcsw; every thread);
- ``process_cpu_s``: this process's user + system CPU seconds, beside ``wall_s``.

/proc/stat counts in 1/100 s per CPU, so over a phase shorter than about a second the fractions are coarse. Where
/proc/stat is missing (macOS, Windows) the /proc fields are None; getrusage needs a POSIX host.
"""

from __future__ import annotations

import time

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _proc_stat() -> dict | None:
    try:
        with open("/proc/stat") as f:
            head = f.readline().split()
    except OSError:
        return None
    if not head or head[0] != "cpu":
        return None
    return dict(zip(FIELDS, (int(x) for x in head[1:1 + len(FIELDS)])))


def _rusage():
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    return resource.getrusage(resource.RUSAGE_SELF)


class HostLoad:
    """``with HostLoad() as h: ...``; then ``h.summary()``."""

    def __enter__(self) -> "HostLoad":
        self._t0, self._s0, self._r0 = time.perf_counter(), _proc_stat(), _rusage()
        self._t1 = self._s1 = self._r1 = None
        return self

    def __exit__(self, *exc) -> None:
        self._t1, self._s1, self._r1 = time.perf_counter(), _proc_stat(), _rusage()

    def summary(self) -> dict:
        out = {"wall_s": (self._t1 or time.perf_counter()) - self._t0, "steal_fraction": None, "busy_fraction": None,
               "involuntary_switches": None, "voluntary_switches": None, "process_cpu_s": None}
        if self._s0 and self._s1:
            d = {k: self._s1[k] - self._s0[k] for k in FIELDS}
            total = sum(d.values())
            if total > 0:
                out["steal_fraction"] = d["steal"] / total
                out["busy_fraction"] = 1.0 - (d["idle"] + d["iowait"]) / total
        if self._r0 and self._r1:
            out["involuntary_switches"] = self._r1.ru_nivcsw - self._r0.ru_nivcsw
            out["voluntary_switches"] = self._r1.ru_nvcsw - self._r0.ru_nvcsw
            out["process_cpu_s"] = (self._r1.ru_utime + self._r1.ru_stime) - (self._r0.ru_utime + self._r0.ru_stime)
        return out
