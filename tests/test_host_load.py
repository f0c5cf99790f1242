"""The host's load during a timed phase (measure/host/load.py) and the bench headline that reports steal."""

from __future__ import annotations

import time

import pytest

from gpuscope.workloads import headline
from gpuscope.measure.host import load as host_load
from gpuscope.measure.host.load import HostLoad


def test_host_load_counts_this_process_and_the_cpus():
    with HostLoad() as h:
        t0 = time.process_time()
        # busy until this process has had 0.3 s of CPU (not 0.3 s of wall time: a loaded host gives it less)
        while time.process_time() - t0 < 0.3:
            sum(range(1000))
    s = h.summary()
    assert s["wall_s"] > 0
    if s["process_cpu_s"] is not None:  # POSIX
        assert s["process_cpu_s"] >= 0.29 and s["involuntary_switches"] >= 0  # rusage ticks: 0.3 s to within 10 ms
        assert s["process_cpu_s"] <= s["wall_s"] * 4
    if host_load._proc_stat() is not None:  # Linux
        assert 0.0 <= s["steal_fraction"] <= 1.0 and 0.0 < s["busy_fraction"] <= 1.0


def test_steal_and_busy_fractions_from_proc_stat(monkeypatch):
    """Deltas of /proc/stat's cpu line: 100 jiffies in all, 10 of them stolen, 30 idle, 10 iowait."""
    base = dict.fromkeys(host_load.FIELDS, 1000)
    after = dict(base, user=base["user"] + 40, system=base["system"] + 10, idle=base["idle"] + 30,
                 iowait=base["iowait"] + 10, steal=base["steal"] + 10)
    seq = iter([base, after])
    monkeypatch.setattr(host_load, "_proc_stat", lambda: next(seq))
    with HostLoad() as h:
        pass
    s = h.summary()
    assert s["steal_fraction"] == pytest.approx(0.10) and s["busy_fraction"] == pytest.approx(0.60)


def test_headline_says_when_the_hypervisor_took_the_cpus():
    r = {"status": "ok", "kind": "train", "step_s": 0.05, "tokens_per_s": 1000.0,
         "host_load_steps": {"steal_fraction": 0.06}}
    assert "hypervisor took 6%" in headline(r)
    assert "hypervisor" not in headline(dict(r, host_load_steps={"steal_fraction": 0.01}))
    assert "hypervisor" not in headline(dict(r, host_load_steps=None))


def test_host_steal_finding():
    from gpuscope.explain import findings as F

    found = F.diagnose({"host_load": {"steal_fraction": 0.12, "busy_fraction": 0.9}})
    (f,) = [x for x in found if x.code == "host_steal"]
    assert f.severity == "info" and f.evidence["steal_fraction"] == 0.12 and "quiet" in f.fix
    for quiet in ({"host_load": {"steal_fraction": 0.01}}, {"host_load": {"steal_fraction": None}}, {}):
        assert not [x for x in F.diagnose(quiet) if x.code == "host_steal"]
