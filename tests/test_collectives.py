"""`gpuscope bench collectives` on CPU: 2 gloo processes through the real torchrun path; the hang timeout; the
torchrun launcher; `gpuscope slurm` script content and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from gpuscope.estimate.comm import bus_factor  # noqa: E402
from gpuscope.measure.collectives import worker as coll  # noqa: E402
from gpuscope.measure.distributed.launch import DistributedRunError, run_torchrun, torchrun_command  # noqa: E402
from gpuscope.store.db import Store  # noqa: E402

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def gpuscope(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    db = tmp_path_factory.mktemp("coll") / "r.sqlite"
    t0 = time.perf_counter()
    r = gpuscope("bench", "collectives", "--backend", "gloo", "--nproc", "2", "--min-bytes", "16", "--max-bytes",
                 "64", "--dtype", "fp32", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), db, time.perf_counter() - t0


@pytest.mark.slow
def test_every_op_and_size_correct_with_nccl_tests_bandwidths(bench_run):
    doc, _, _ = bench_run
    ms = doc["measurements"]
    got = {(m["result"]["op"], m["result"]["nbytes"]) for m in ms}
    assert got == {(op, s) for op in OPS for s in (16, 32, 64)}  # one line per (op, size), none missing
    assert len(ms) == 15
    for m in ms:
        r = m["result"]
        assert m["status"] == "ok" and r["correct"] is True and r["check_mismatches"] == 0, r
        assert r["world_size"] == 2 and r["backend"] == "gloo" and r["device"] == "cpu"
        assert r["bus_factor"] == bus_factor(r["op"], 2)
        assert r["algbw_gbs"] == r["nbytes"] / r["time_s"] / 1e9
        assert r["busbw_gbs"] == r["algbw_gbs"] * r["bus_factor"]  # exactly, nccl-tests' definition
        assert r["time_min_s"] <= r["time_s"] <= r["time_max_s"] and r["samples"] >= 5
        assert r["predicted_time_s"] is None and r["estimate"].startswith("no estimate")
    ag = next(m["result"] for m in ms if m["result"]["op"] == "all_gather" and m["result"]["nbytes"] == 64)
    assert (ag["count_in"], ag["count_out"]) == (8, 16)  # S = the full output, each rank sends S/n
    rs = next(m["result"] for m in ms if m["result"]["op"] == "reduce_scatter" and m["result"]["nbytes"] == 64)
    assert (rs["count_in"], rs["count_out"]) == (16, 8)  # S = the full input


@pytest.mark.slow
def test_stored_in_results_db_with_provenance(bench_run):
    doc, db, _ = bench_run
    with Store.open(db) as st:
        rows = st.all(kind="collective")
    assert len(rows) == 15 and {r["status"] for r in rows} == {"ok"}
    r = next(r for r in rows if r["config"]["op"] == "all_reduce" and r["config"]["nbytes"] == 32)
    assert r["name"] == "collective/all_reduce/fp32/32B/gloo/1x2"
    assert r["provenance"]["distributed"]["world_size"] == 2
    assert r["provenance"]["distributed"]["gpu_topology"] == "unavailable"
    assert r["provenance"]["distributed"]["nccl_env"].get("NCCL_NVLS_ENABLE") == "0"
    assert r["provenance"]["benchmark_version"] and r["result"]["busbw_gbs"] > 0
    assert {m["id"] for m in doc["measurements"]} == {row["id"] for row in rows}


@pytest.mark.slow
def test_hung_collective_ends_with_clear_message_within_timeout(tmp_path):
    with pytest.raises(DistributedRunError) as ei:
        run_torchrun("gpuscope.measure.collectives.worker",
                     ["--backend", "gloo", "--ops", "all_reduce", "--max-bytes", "16", "--timeout", "3",
                      "--simulate-hang-rank", "1"], nproc=2, timeout_s=120)
    msg = str(ei.value)
    # ended by the 3 s collective timeout (this message), not by the 120 s wall clock ("... was killed")
    assert "collective all_reduce of 8 bytes did not finish within 3 s" in msg, msg
    assert "was killed" not in msg and ei.value.records == []


def test_wall_clock_timeout_kills_the_job():
    # killed at its 2 s wall clock (this message), not ended by the worker's own 60 s collective timeout
    with pytest.raises(DistributedRunError, match="did not finish within 2 s and was killed"):
        run_torchrun("gpuscope.measure.collectives.worker", ["--backend", "gloo", "--ops", "all_reduce", "--timeout", "60",
                                                      "--simulate-hang-rank", "1"], nproc=2, timeout_s=2)


def test_torchrun_command_lines():
    one = torchrun_command("m.x", ["--a", "1"], nproc=4)
    assert one[1:3] == ["-m", "torch.distributed.run"] and "--standalone" in one
    assert one[-4:] == ["-m", "m.x", "--a", "1"] and one[one.index("--nproc-per-node") + 1] == "4"
    multi = torchrun_command("m.x", [], nproc=8, nnodes=2, node_rank=1, rdzv_endpoint="node0", rdzv_id="j7")
    assert "--standalone" not in multi
    for k, v in (("--nnodes", "2"), ("--node-rank", "1"), ("--rdzv-backend", "c10d"),
                 ("--rdzv-endpoint", "node0:29500"), ("--rdzv-id", "j7")):
        assert multi[multi.index(k) + 1] == v
    with pytest.raises(ValueError):
        torchrun_command("m.x", [], nproc=8, nnodes=2)  # no endpoint
    with pytest.raises(ValueError):
        torchrun_command("m.x", [], nproc=0)


def test_pure_helpers():
    assert coll.parse_size("8") == 8 and coll.parse_size("64K") == 65536 and coll.parse_size("8GiB") == 8 << 30
    assert coll.size_sweep(8, 64) == [8, 16, 32, 64] and coll.size_sweep(8, 8 << 30)[-1] == 8 << 30
    assert coll.element_counts("all_gather", 8, 4, 4) is None  # 2 elements cannot be split over 4 ranks
    assert coll.element_counts("all_to_all", 40, 4, 4) == (8, 8)  # rounded down to a multiple of n
    topo = ("\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
            "GPU0\t X \tNV18\tPIX\t0-47\t0\t\tN/A\n"
            "GPU1\tNV18\t X \tSYS\t0-47\t0\t\tN/A\n"
            "NIC0\tPIX\tSYS\t X \n\nLegend:\n\n  X    = Self\n")
    assert coll.parse_topo_matrix(topo) == {"GPU0-GPU1": "NV18", "GPU0-NIC0": "PIX", "GPU1-NIC0": "SYS"}
    assert coll.parse_topo_matrix("No devices were found") == {}


@pytest.mark.parametrize("args, needle", [
    (["--ops", "all_reduce,gossip"], "--ops 'gossip'"),
    (["--min-bytes", "8Q"], "--min-bytes '8Q'"),
    (["--nnodes", "2"], "--rdzv-endpoint"),
    (["--min-bytes", "1M", "--max-bytes", "8"], "--max-bytes"),
    (["--dtype", "fp64"], "--dtype 'fp64'"),
])
def test_bench_collectives_bad_input_exit_2(args, needle):
    r = gpuscope("bench", "collectives", "--backend", "gloo", *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


# --- slurm ----------------------------------------------------------------------------------------------------------
def _slurm(*args: str):
    from typer.testing import CliRunner

    import gpuscope.cli as cli

    cli._register()
    return CliRunner().invoke(cli.app, ["slurm", *args])


def test_slurm_script(tmp_path):
    out = tmp_path / "job.sbatch"
    r = _slurm("--nodes", "2", "--gpus-per-node", "8", "--partition", "gpu", "--account", "proj", "--time",
               "01:00:00", "--out", str(out), "--", "--ops", "all_reduce", "--dtype", "bf16")
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert text.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --cpus-per-task=64", "#SBATCH --time=01:00:00", "#SBATCH --partition=gpu",
                 "#SBATCH --account=proj", "export NCCL_NVLS_ENABLE=0",
                 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'):
        assert line in text.splitlines(), line
    flat = " ".join(text.replace("\\\n", " ").split())
    assert ('srun --ntasks-per-node=1 --kill-on-bad-exit=1 python -m torch.distributed.run --nnodes "$SLURM_NNODES" '
            '--nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" '
            '--rdzv-id "$SLURM_JOB_ID"') in flat
    assert "-m gpuscope.measure.collectives.worker --ops all_reduce --dtype bf16" in flat
    assert "MASTER_PORT=29500" in text and "# NVLink SHARP" in text
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0  # valid shell


def test_slurm_stdout_and_bad_input():
    r = _slurm("-N", "1", "-G", "2")
    assert r.exit_code == 0 and "#SBATCH --nodes=1" in r.output and "--nproc-per-node 2" in r.output
    for args, needle in ((["--nodes", "0"], "--nodes must be a positive integer"),
                         (["--nodes", "-3"], "--nodes must be a positive integer"),
                         (["-N", "2", "--gpus-per-node", "0"], "--gpus-per-node"),
                         (["-N", "2", "--time", "1h"], "--time '1h'"),
                         (["-N", "2", "--partition", "gpu; rm -rf /"], "--partition")):
        p = gpuscope("slurm", *args, timeout=30)
        assert p.returncode == 2 and needle in p.stderr and p.stderr.count("\n") == 1, (args, p.stderr)


def test_estimate_path_for_a_catalog_gpu():
    """The CUDA-only estimate code, run without a GPU: H200 x2 on NVLink, prediction beside a fake measurement."""
    import argparse

    b = object.__new__(coll.Bench)
    b.a, b.world, b.local_world = argparse.Namespace(gpu=None), 2, 2
    b._load_estimate("NVIDIA H200")
    est = b.estimate("all_reduce", 8 << 30, 0.025)
    assert est["estimate"]["hardware"] == "nvidia_h200_sxm" and 300 < est["predicted_busbw_gbs"] < 450
    assert est["error"] == (est["predicted_time_s"] - 0.025) / 0.025
    b._load_estimate("Quadro Imaginary 9000")
    assert b._hw is None and b._no_estimate.startswith("no estimate: device 'Quadro Imaginary 9000'")
    assert b.estimate("all_reduce", 1024, 1e-5)["predicted_time_s"] is None
