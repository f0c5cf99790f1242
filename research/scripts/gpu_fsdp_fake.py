"""Issue 26 item 1 on ONE GPU: FSDP2 at world size 2 through PyTorch's fake process group (per-rank memory of the
issue's 7B/8B two-GPU foreach cases).

torch.testing._internal.distributed.fake_pg registers backend "fake": ``init_process_group("fake",
store=FakeStore(), rank=0, world_size=2)`` gives a world of two whose collectives return at once without moving
data. FSDP2 (``fully_shard`` on the default 1-D mesh of that world) shards every parameter in half and allocates its
all-gather and reduce-scatter buffers exactly as rank 0 of two ranks would; the gathered halves of rank 1 are
whatever the buffer held (numbers garbage, the loss may be NaN), memory and compute time are real, communication
time is absent (step_s = rank 0's compute plus FSDP2's copies; no NCCL kernels run).

The worker is gpuscope.measure.distributed.train itself (train.main -> worker.run_worker -> train._body), not a copy:
- the process group is initialised here first; worker.init_dist binds cuda:LOCAL_RANK and skips its own
  init_process_group when ``dist.is_initialized()``. RANK=0, WORLD_SIZE=2, LOCAL_RANK=0 are set so that
  worker.env_ranks (and so the result's world_size) read the fake world.
- ``train.gather`` (all_gather_object of every rank's numbers) is replaced by ``[mine]``: the fake all-gather
  returns no bytes to unpickle. ``ranks`` in the result therefore holds rank 0 only (rank 1 is not simulated; with
  even shards, every dimension of these models being even, its memory is rank 0's).
- ``train.wrap`` is wrapped to add ``fake_pg`` facts after the real wrap: the world size FSDP2 sharded over (the
  parameters' DeviceMesh) and this rank's sharded parameter bytes against the full ones.

Cases (``--one`` runs one in this process; the driver runs each in its own subprocess with its own timeout, one
JSON line each to fsdp_fake.jsonl): strategy fsdp, precision amp-bf16 (= MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32), fp32 sharded master weights and AdamW states; the worker's docstring), ``"foreach": true``
(AdamW(foreach=True); measure/distributed/optim.py), random weights built from the catalogue config (preset name ->
specs/data/models/*.json; hf_model.build_model: built on the device, no per-module init, no download):
(a) llama-2-7b mb2 x 2048, (b) llama-3.1-8b mb1 x 2048, (c) llama-3.1-8b mb1 x 4096. Warm-up 1, 3 timed steps.
Everything goes into ONE file $OUT/gpu_fsdp_fake/gpu_fsdp_fake.tgz (repacked after every case).

usage (repo root, GPU machine): PYTHONPATH=src python3 research/scripts/gpu_fsdp_fake.py
CPU check: OUT=/tmp/o PYTHONPATH=src python3 research/scripts/gpu_fsdp_fake.py --tiny
Budget: 150 s: the driver stops everything by 145 s (BUDGET_S); each case has its own timeout, min(its cap 60/55/60 s,
what is left less 30 s for each case after it), so (c) runs only in what (a) and (b) left.
Compare: python3 research/scripts/fsdp_fake_compare.py <dir>/fsdp_fake.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

WORLD = 2
BASE = {"kind": "train-dist", "strategy": "fsdp", "precision": "amp-bf16", "foreach": True, "steps": 3, "warmup": 1}
BUDGET_S = 145  # the whole script's wall (150 s given; 5 s for nvidia-smi and packing)
CASES = [  # (name, at most s, case): a case gets min(its cap, what is left less the floors of the cases after it)
    ("l2_7b_mb2_s2048", 60, {**BASE, "model": "llama-2-7b", "micro_batch": 2, "seq": 2048}),
    ("l31_8b_mb1_s2048", 55, {**BASE, "model": "llama-3.1-8b", "micro_batch": 1, "seq": 2048}),
    ("l31_8b_mb1_s4096", 60, {**BASE, "model": "llama-3.1-8b", "micro_batch": 1, "seq": 4096}),
]
FLOOR_S = 30  # kept for each later case (start-up + an 8B build + 5 steps is expected at ~25-35 s)
TINY = [("tiny_fake2", 300, {**BASE, "model": "research/scripts/llama_small_cpu.json", "device": "cpu",
                               "micro_batch": 1, "seq": 128, "steps": 2})]


def _fake_world(device: str | None) -> None:
    """Rank 0 of a fake world of WORLD ranks, set up before the worker's init_dist (which then only binds the
    device)."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers backend "fake"

    os.environ.update(RANK="0", WORLD_SIZE=str(WORLD), LOCAL_RANK="0", LOCAL_WORLD_SIZE=str(WORLD))
    kind = (device or ("cuda" if torch.cuda.is_available() else "cpu")).split(":")[0]
    if kind == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)


def _patch_worker(train) -> None:
    """The two hooks of the module docstring, on the worker module's own names."""
    import torch.distributed as dist

    real_wrap = train.wrap

    def wrap(model, case, dev):
        full = sum(p.numel() * p.element_size() for p in model.parameters())
        wrapped, ac_dtype, facts = real_wrap(model, case, dev)
        local, meshes = 0, set()
        for p in wrapped.parameters():
            if hasattr(p, "to_local"):
                meshes.add(p.device_mesh.size())
                t = p.to_local()
            else:
                t = p
            local += t.numel() * t.element_size()
        facts["fake_pg"] = {"backend": dist.get_backend(), "dist_world_size": dist.get_world_size(),
                            "fsdp_mesh_sizes": sorted(meshes), "local_param_bytes": local,
                            "full_param_bytes": full, "local_share": local / full if full else None,
                            "ranks_measured": [0]}
        return wrapped, ac_dtype, facts

    train.wrap = wrap
    train.gather = lambda obj: [obj]  # the fake all_gather_object carries no bytes back


def run_one(case: dict, out: str) -> int:
    _fake_world(case.get("device"))
    from gpuscope.measure.distributed import train

    _patch_worker(train)
    return train.main(["--case", json.dumps(case), "--out", out])


def driver(tiny: bool) -> int:
    out_root = Path(os.environ["OUT"]) / "gpu_fsdp_fake"
    out_root.mkdir(parents=True, exist_ok=True)
    w = Path(tempfile.mkdtemp())
    jsonl = w / "fsdp_fake.jsonl"

    def pack() -> None:
        with tarfile.open(out_root / "gpu_fsdp_fake.tgz", "w:gz") as tf:
            tf.add(w, arcname="gpu_fsdp_fake")

    t_all = time.perf_counter()
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit", "--format=csv"],
                             capture_output=True, text=True, timeout=20)
        (w / "nvidia-smi.csv").write_text(smi.stdout + smi.stderr)
    except (OSError, subprocess.TimeoutExpired):
        pass
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    todo = TINY if tiny else CASES
    for i, (name, cap, case) in enumerate(todo):
        left = (300 * len(todo) if tiny else BUDGET_S) - (time.perf_counter() - t_all)
        limit = max(1.0, min(cap, left - FLOOR_S * (len(todo) - 1 - i)))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--one", json.dumps(case), "--out", str(jsonl)]
        (w / f"{name}.cmd").write_text(" ".join(cmd) + "\n")
        t0 = time.perf_counter()
        with open(w / f"{name}.out", "w") as fo, open(w / f"{name}.err", "w") as fe:
            try:
                rc = subprocess.run(cmd, stdout=fo, stderr=fe, env=env, timeout=limit).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        with open(w / "steps.txt", "a") as f:
            f.write(f"{name} rc={rc} {time.perf_counter() - t0:.1f} s (limit {limit:.0f} s)\n")
        pack()
    with open(w / "steps.txt", "a") as f:
        f.write(f"all {time.perf_counter() - t_all:.1f} s\n")
    pack()
    print((w / "steps.txt").read_text(), end="")
    print(f"packed {out_root / 'gpu_fsdp_fake.tgz'} (work dir {w})")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="CPU check: the tiny Llama config, fake world of 2 on CPU")
    p.add_argument("--one", help="(internal) run this case JSON in this process")
    p.add_argument("--out", help="(with --one) JSONL to append to")
    a = p.parse_args(argv)
    if a.one:
        return run_one(json.loads(a.one), a.out)
    return driver(a.tiny)


if __name__ == "__main__":
    sys.exit(main())
