"""Measured (research/scripts/gpu_fsdp_fake.py: FSDP2 at world size 2 through the fake process group, rank 0 on one
GPU) against `gpuscope plan train --fsdp --num-gpus 2` per phase.

usage (repo root): PYTHONPATH=src python3 research/scripts/fsdp_fake_compare.py PATH/fsdp_fake.jsonl [--gpu h200]

Each line's case is replanned with the CLI (`python -m gpuscope plan train --model M --gpu G --micro-batch B --seq S
--precision P --fsdp --num-gpus <the result's world_size> [--foreach] --json`). Memory: GB (1e9), max_memory_allocated
per phase against memory.phases_bytes; rest (before the forward) against weights_sharded + optimizer_states +
workspace; the local shard against breakdown weights_sharded. Time: the fake collectives move nothing, so the
measured step is compute + FSDP2's copies only; it is compared with the plan's step_s - exposed_comm_s (the
one-GPU step of the sharded model before data-parallel communication, estimate/train.py: step_s = st.step_s +
comm_s); phases against forward_s / backward_s / optimizer_s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def plan(case: dict, world: int, gpu: str) -> dict:
    cmd = [sys.executable, "-m", "gpuscope", "plan", "train", "--model", str(case["model"]), "--gpu", gpu,
           "--micro-batch", str(case["micro_batch"]), "--seq", str(case["seq"]),
           "--precision", case.get("precision", "amp-bf16"), "--fsdp", "--num-gpus", str(world), "--json"]
    if case.get("foreach"):
        cmd.append("--foreach")
    if case.get("recompute", "none") != "none":
        cmd += ["--recompute", case["recompute"]]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def _gb(x):
    return f"{x / 1e9:8.3f}" if isinstance(x, (int, float)) else "       -"


def _ms(x):
    return f"{x * 1e3:8.1f}" if isinstance(x, (int, float)) else "       -"


def _rel(plan_v, meas):
    if not isinstance(plan_v, (int, float)) or not isinstance(meas, (int, float)) or not meas:
        return "      -"
    return f"{(plan_v - meas) / meas * 100:+6.1f}%"


def compare(line: dict, gpu: str) -> list[str]:
    case, r = line["case"], line["result"]
    head = (f"{case['model']} mb{case['micro_batch']} x {case['seq']} ({case.get('precision')}, "
            f"foreach={case.get('foreach')}): status {r.get('status')}")
    if r.get("status") != "ok":
        return [head + f" phase {r.get('phase')}: {r.get('error') or r.get('message') or ''}"[:300]]
    world = int(r.get("world_size") or line.get("world_size") or 2)
    p = plan(case, world, gpu)
    fp = r.get("fake_pg") or {}
    r0 = (r.get("ranks") or [{}])[0]  # rank 0, the one rank a fake world runs
    m, t, bd = p["memory"]["phases_bytes"], p["time"], p["memory"]["breakdown_bytes"]
    rows = [head,
            f"  world_size {world}, FSDP mesh {fp.get('fsdp_mesh_sizes')}, backend {fp.get('backend')}, "
            f"optimizer_impl {r.get('optimizer_impl')} (plan {p['inputs'].get('adamw_impl')}), "
            f"param_types {r.get('param_types')}, loss_finite {r.get('loss_finite')}",
            f"  {'':22s} {'measured':>8s} {'plan':>8s} {'plan-meas':>8s}"]

    def row(name, meas, pv, fmt=_gb):
        rows.append(f"  {name:22s} {fmt(meas)} {fmt(pv)} {_rel(pv, meas)}")

    row("local shard (GB)", fp.get("local_param_bytes"), bd.get("weights_sharded"))
    row("after wrap (GB)", r.get("mem_after_wrap_bytes"), bd.get("weights_sharded"))
    row("optimizer states (GB)", r.get("optimizer_state_bytes"), bd.get("optimizer_states"))
    row("gradients (GB)", r.get("grad_bytes"), bd.get("weights_sharded"))
    rest = sum(bd.get(k, 0.0) for k in ("weights_sharded", "optimizer_states", "workspace"))
    row("rest (GB)", r.get("mem_rest_bytes"), rest)
    rows.append(f"  {'after fwd / bwd / step':22s} {_gb(r0.get('mem_after_forward_bytes'))} "
                f"{_gb(r0.get('mem_after_backward_bytes'))} {_gb(r0.get('mem_after_step_bytes'))} (GB, measured)")
    for ph in ("forward", "backward", "optimizer"):
        row(f"peak {ph} (GB)", r.get(f"peak_{ph}_bytes"), m.get(ph))
    meas_peak = max((r.get(f"peak_{ph}_bytes") or 0) for ph in ("forward", "backward", "optimizer")) or None
    row("peak of phases (GB)", meas_peak, p["memory"]["peak_bytes_per_gpu"])
    row("step compute (ms)", r.get("step_s"), t["step_s"] - t.get("exposed_comm_s", 0.0), _ms)
    ps = r.get("phase_s") or {}
    for ph, key in (("forward", "forward_s"), ("backward", "backward_s"), ("optimizer", "optimizer_s")):
        row(f"{ph} (ms)", ps.get(ph), t.get(key), _ms)
    rows.append(f"  plan step_s with comm {t['step_s'] * 1e3:.1f} ms (exposed_comm_s {t.get('exposed_comm_s', 0) * 1e3:.1f}"
                f" ms, not in the fake run); measured steps {[round(x * 1e3, 1) for x in r0.get('samples_s') or []]} ms")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jsonl")
    ap.add_argument("--gpu", default="h200")
    a = ap.parse_args(argv)
    with open(a.jsonl) as f:
        for text in f:
            if text.strip():
                print("\n".join(compare(json.loads(text), a.gpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
