"""Model CPU offload's moves one by one on an H200 (a gVisor VM), research/results/2026-12-02-h200-d/call1/
gpu_offload_probe (research/scripts/gpu_offload_probe.py: SDXL at 1024x1024, 2 steps, three pipeline calls after
loading; each module move timed with its minor page faults, RSS and glibc's mallinfo2; the UNet moved in and out
three more times, then tensor by tensor per size class; 1 GiB filled untouched and resident).

What it settles (research/results/2026-12-02-h200-d/offload.md): a move out into host pages the process has not
touched takes one page fault each 4 KiB, 3.9 us each on top of the copy (estimate/diffusion/offload.FAULT_S); glibc
keeps the freed bytes, so the faults fall from call to call (3.6, 2.0, 0.2 GB): the planner prices the steady state
and states the first calls' cost. The steady state itself is still 22% above the plan (a known miss, bounded).
"""

from __future__ import annotations

import json
import statistics
from functools import lru_cache
from pathlib import Path

import pytest

from gpuscope.estimate.diffusion import DiffusionRequest, plan_diffusion
from gpuscope.estimate.diffusion.offload import FAULT_S, MODULE_D2H_FACTOR, PAGE_BYTES
from gpuscope.specs.hardware import load_hardware

RUN = Path(__file__).resolve().parents[1] / "results" / "2026-12-02-h200-d"
HOST = RUN / "h200-offload-host.toml"


@lru_cache(maxsize=None)
def probe() -> dict:
    return json.loads((RUN / "call1" / "gpu_offload_probe" / "offload_probe.json").read_text())["parent"]


def moves(part: str, target: str | None = None) -> list[dict]:
    return [r for r in probe()["log"] if r["part"] == part and r["what"] == "to" and target in (None, r["target"])]


def resident_gbs() -> float:
    """The UNet moved out as a module into resident host memory (unet_rounds: no fault)."""
    outs = moves("unet_rounds", "cpu")
    assert all(r["minflt"] == 0 for r in outs)
    return statistics.mean(r["bytes"] / r["s"] for r in outs) / 1e9


def sdxl_plan(hw: str):
    """The plan of the probes' and the bench's point: SDXL pipeline at 1024x1024, 2 steps, CFG, model offload."""
    return plan_diffusion(DiffusionRequest(model="sdxl", batch=1, height=1024, width=1024, steps=2, cfg=True,
                                           offload="model"), load_hardware(hw), limits=False)


def bench_host(tmp_path: Path, r: dict, name: str) -> str:
    """A host file of a bench point's own link probe (its UNet moved in and out as a module)."""
    host = tmp_path / f"{name}.toml"
    host.write_text(f'base = "nvidia_h200_sxm"\nname = "{name} bench link probe"\n[measured]\n'
                    f'h2d_pageable_gbs = {r["offload_h2d_gbs"]}\n'
                    f'd2h_pageable_gbs = {r["offload_d2h_gbs"] / MODULE_D2H_FACTOR}\nhost_launch_s = 21.5e-6\n')
    return str(host)


def test_first_touch_is_a_fault_a_page():
    """Every move out right after loading lands in untouched memory: one minor fault each 4 KiB, exactly."""
    for r in moves("load"):
        assert r["minflt"] * PAGE_BYTES / r["bytes"] == pytest.approx(1.0, abs=0.01), r["module"]
    fill = next(r for r in probe()["log"] if r["what"] == "fill_first")
    assert fill["minflt"] * PAGE_BYTES / fill["bytes"] == pytest.approx(1.0, abs=0.01)


def test_module_d2h_factor_and_the_host_file():
    """MODULE_D2H_FACTOR: the UNet out as a module / its three largest tensors out alone, both resident; the host
    file holds the probe's own link rates (not its pipeline phases)."""
    big = next(r for r in probe()["log"] if r["part"] == "class_rounds" and r["module"] == "unet[ge32m]"
               and r["target"] == "cpu")
    big_gbs = big["bytes"] / big["s"] / 1e9
    assert big_gbs == pytest.approx(12.75, rel=0.01)
    assert MODULE_D2H_FACTOR == pytest.approx(resident_gbs() / big_gbs, rel=0.01)
    hw = load_hardware(str(HOST))
    ins = [r["bytes"] / r["s"] / 1e9 for r in moves("unet_rounds", "cuda")]
    assert hw.measured["h2d_pageable_gbs"] == pytest.approx(statistics.mean(ins), rel=0.01)
    assert hw.measured["d2h_pageable_gbs"] == pytest.approx(big_gbs, rel=0.01)


def test_fault_cost_inside_a_move_out():
    """FAULT_S: (move time - bytes at the resident module rate) / faults, over every move out with 10k+ faults
    (the load and the three calls): 2.9-4.4 us, median 3.9; the moves with 100k+ faults 3.7-4.2."""
    rate = resident_gbs() * 1e9
    per = [(r["s"] - r["bytes"] / rate) / r["minflt"] for r in moves("load") + moves("pipeline", "cpu")
           if r["minflt"] > 10_000]
    assert len(per) >= 8
    assert statistics.median(per) == pytest.approx(FAULT_S, rel=0.03)
    assert 2.8e-6 < min(per) and max(per) < 4.4e-6
    big = [(r["s"] - r["bytes"] / rate) / r["minflt"] for r in moves("load") + moves("pipeline", "cpu")
           if r["minflt"] > 100_000]
    assert len(big) == 6 and 3.7e-6 < min(big) and max(big) < 4.2e-6


def _phases(call: int) -> dict:
    return {p["phase"]: p for p in probe()["phases"] if p["call"] == call}


def test_faults_fall_call_by_call_and_price_the_first_calls():
    """glibc keeps what the modules leave: 3.56, 2.05, 0.20 GB of fresh pages in calls 0, 1, 2; each call's time
    the second call's time over the third's is its extra faults at FAULT_S, within 8% (the first call also pays
    the process's first kernels and library set-up: 1.5 s of its text phase and 2.0 s of its denoising phase are
    outside its moves)."""
    fresh = [sum(p["minflt"] for p in _phases(c).values()) for c in range(3)]
    assert [round(f * PAGE_BYTES / 1e9, 2) for f in fresh] == [3.56, 2.05, 0.2]
    total = [sum(p["s"] for p in _phases(c).values()) for c in range(3)]
    assert (total[1] - total[2]) / ((fresh[1] - fresh[2]) * FAULT_S) - 1 == pytest.approx(-0.069, abs=0.01)
    assert _phases(0)["text"]["rest_s"] > 1.0 and _phases(1)["text"]["rest_s"] < 0.05


def test_steady_state_call_against_the_plan():
    """The third call (0.2 GB fresh) against the plan on the probe's link rates: every phase 21-24% short, a known
    miss (bound 25%): 0.20 s of it are faults of tensors glibc mmaps afresh on each move out (CLIP's token
    embeddings, 76 and 126 MB, over its 32 MiB mmap threshold), the UNet's move in ran 3.84 GB/s against the rounds'
    4.16, and each phase spends 0.03-0.19 s outside its copies and planned forwards (the denoising phase's two
    steps took 0.29 s against 0.10 planned: not found)."""
    plan = sdxl_plan(str(HOST)).times
    meas = {k: _phases(2)[k]["s"] for k in ("text", "denoise", "vae")}
    err = {k: plan[f"{k}_encode_s" if k == "text" else ("vae_decode_s" if k == "vae" else "denoise_s")] / v - 1
           for k, v in meas.items()}
    err["total"] = plan["total_s"] / sum(meas.values()) - 1
    assert all(-0.25 < e < -0.15 for e in err.values()), err  # outside the 15% target, inside the bound
    assert err["total"] == pytest.approx(-0.217, abs=0.01)


@lru_cache(maxsize=None)
def probe3() -> dict:
    return json.loads((RUN / "call3" / "gpu_offload_probe" / "offload_probe.json").read_text())


def _per_call(run: dict) -> dict[int, tuple[float, float]]:
    """call: (fresh bytes from faults, heap growth + bytes mmapped afresh by its moves out)."""
    out = {}
    for call in sorted({p["call"] for p in run["phases"]}):
        ph = [p for p in run["phases"] if p["call"] == call]
        mm = sum(max(0, r["mmapped"]) for r in run["log"] if r.get("call") == call and r["part"] == "pipeline"
                 and r["what"] == "to" and r["target"] == "cpu")
        out[call] = (sum(p["minflt"] for p in ph) * PAGE_BYTES, sum(p["heap"] for p in ph) + mm)
    return out


def test_fresh_pages_are_heap_growth_plus_fresh_mmaps():
    """Every call of both probes (call 1, call 3's parent and its MALLOC_* child): the faults' bytes are the heap's
    growth plus the tensors mmapped afresh, within 0.02 GB; the MALLOC_MMAP_THRESHOLD_/TRIM child met as many fresh
    pages as the parent (no fix)."""
    runs = [probe(), probe3()["parent"], probe3()["env_child"]]
    assert runs[2]["env"]["MALLOC_TRIM_THRESHOLD_"] == str(1 << 40)
    for run in runs:
        for fresh, growth in _per_call(run).values():
            assert abs(fresh - growth) < 0.02e9
    parent, child = _per_call(runs[1]), _per_call(runs[2])
    for call in (0, 1):
        assert child[call][0] / parent[call][0] == pytest.approx(1.0, abs=0.07)


def _bench(call: int) -> dict:
    out = RUN / f"call{call}" / "gpu_diffusion2" / "sdxl_offload_model.out"
    (m,) = json.loads(out.read_text())["measurements"]
    assert m["status"] == "ok"
    return m["result"]


def test_bench_after_two_warmups_still_meets_fresh_pages(tmp_path):
    """Calls 4/5: `bench diffusion --offload model --warmup 2` (1 and 3 timed calls). Call 5's median call met
    0.57 GB of fresh pages; against the plan on that bench's own link rates it is -31% (a known miss, bound 35%),
    -13% with those faults priced at FAULT_S; call 4's one timed call (4.11 s, its VAE phase 2.04 s) is slower still."""
    r4, r5 = _bench(4), _bench(5)
    assert r5["pipeline_repeats"] == 3 and r4["pipeline_repeats"] == 1
    assert r5["host_fault_bytes"] == pytest.approx(0.575e9, rel=0.01)
    plan = sdxl_plan(bench_host(tmp_path, r5, "call 5")).times["total_s"]
    assert plan / r5["total_s"] - 1 == pytest.approx(-0.31, abs=0.01)
    faults = r5["host_fault_bytes"] / PAGE_BYTES * FAULT_S
    assert (plan + faults) / r5["total_s"] - 1 == pytest.approx(-0.13, abs=0.01)
    assert r4["total_s"] > r5["total_s"] * 1.3 and r4["vae_decode_s"] > 2.0


def _catalog_plan() -> dict:
    return sdxl_plan("h200").to_json()


def test_the_doctor_flags_call5_not_call6():
    """doctor's offload_fresh_pages (with the catalog plan, as `bench diffusion` stores it): call 5 (two warm-ups,
    1.48x the plan, 0.57 GB of faults ~0.55 s) fires; call 6 (four warm-ups, 1.15x, 0.44 GB) stays quiet."""
    from gpuscope.explain.rules_offload import diffusion_offload_fresh_pages

    plan = _catalog_plan()
    r5, r6 = _bench(5), _bench(6)
    f = diffusion_offload_fresh_pages({"diffusion": {"result": r5, "plan": plan}})
    assert f is not None and f.evidence["fault_s"] / r5["total_s"] == pytest.approx(0.18, abs=0.01)
    assert diffusion_offload_fresh_pages({"diffusion": {"result": r6, "plan": plan}}) is None


def test_four_warmups_reach_the_plan(tmp_path):
    """Call 6: `--warmup 4 --repeats 3`: median call 2.40 s (3.09 after two warm-ups), the plan on that bench's own
    link probe 2.22 s: -7.6% (text -2.9%, denoise -8.1%, vae -8.0%), within the 15% target."""
    r6 = _bench(6)
    assert r6["pipeline_repeats"] == 3 and r6["total_s"] < 0.8 * _bench(5)["total_s"]
    t = sdxl_plan(bench_host(tmp_path, r6, "call 6")).times
    errs = {k: t[k] / r6[k] - 1 for k in ("text_encode_s", "denoise_s", "vae_decode_s", "total_s")}
    assert all(-0.15 < e < 0 for e in errs.values()), errs
    assert errs["total_s"] == pytest.approx(-0.076, abs=0.01)
