"""`gpuscope slurm`: write a ready sbatch script that runs a gpuscope distributed benchmark over N nodes x G GPUs.

One Slurm task per node; each task runs torchrun (``python -m torch.distributed.run``) with the c10d rendezvous on
the job's first node (``scontrol show hostnames``), which starts G workers of the benchmark module. Rank 0 writes
the JSON lines (one per measured point) to ``--results``. NCCL_NVLS_ENABLE=0 is exported (see the comment in
the script). Pure text generation: no torch, nothing is submitted.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer

from gpuscope.errors import UserError

DEFAULT_MODULE = "gpuscope.measure.collectives.worker"
_TIME_RE = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")  # Slurm: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
_WORD_RE = re.compile(r"^[A-Za-z0-9_.,+@%=-]+$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

NVLS_COMMENT = """\
# NVLink SHARP (NVLS, NVSwitch multicast) stays off: the planner's collective model (gpuscope/estimate/comm.py)
# and the published ring figures it is checked against assume ring/tree algorithms (8x H200 all_reduce busbw:
# 366 GB/s ring only vs 473 GB/s with NVLS), and NVLS needs fabric-manager/IMEX multicast support that shared
# machines often lack (NCCL then fails or stalls at communicator creation). Results record NCCL_NVLS_ENABLE."""


def _positive(name: str, v) -> None:
    if v is None or isinstance(v, bool) or v < 1:
        raise UserError(f"--{name} must be a positive integer, not {v}.")


def _word(name: str, v: str | None) -> None:
    if v is not None and not _WORD_RE.match(v):
        raise UserError(f"--{name} '{v}' may hold only letters, digits and _ . , + @ % = - (no spaces or quotes).")


def _check(nodes, gpus_per_node, module, cpus_per_task, time_limit, partition, account, job_name, port, results,
           extra_sbatch) -> None:
    """sbatch_script's inputs, each checked (one sentence naming the flag)."""
    _positive("nodes", nodes)
    _positive("gpus-per-node", gpus_per_node)
    if cpus_per_task is not None:
        _positive("cpus-per-task", cpus_per_task)
    if not _TIME_RE.match(time_limit or ""):
        raise UserError(f"--time '{time_limit}' is not a Slurm time limit such as 30, 01:00:00 or 1-00:00:00.")
    for name, v in (("partition", partition), ("account", account), ("job-name", job_name)):
        _word(name, v)
    if not _MODULE_RE.match(module or ""):
        raise UserError(f"--module '{module}' is not a Python module name such as {DEFAULT_MODULE}.")
    if isinstance(port, bool) or not 1024 <= port <= 65535:
        raise UserError(f"--port must be from 1024 to 65535, not {port}.")
    if not re.match(r"^[A-Za-z0-9_./%+@,=~-]+$", results or ""):
        raise UserError(f"--results '{results}' must be a file path of letters, digits and _ . / % + @ , = - ~.")
    for line in extra_sbatch or []:
        if "\n" in line or not line.startswith("--"):
            raise UserError(f"--sbatch '{line}' must be one sbatch option starting with -- (e.g. --exclusive).")


def sbatch_script(nodes: int, gpus_per_node: int, module: str = DEFAULT_MODULE, worker_args: list[str] | None = None,
                  cpus_per_task: int | None = None, time_limit: str = "00:30:00", partition: str | None = None,
                  account: str | None = None, job_name: str = "gpuscope-bench", port: int = 29500,
                  python: str = "python", results: str = "gpuscope-%j.jsonl", extra_sbatch: list[str] | None = None,
                  ) -> str:
    """The sbatch script text. Raises UserError for bad inputs (one sentence naming the field)."""
    _check(nodes, gpus_per_node, module, cpus_per_task, time_limit, partition, account, job_name, port, results,
           extra_sbatch)
    cpus = cpus_per_task if cpus_per_task is not None else 8 * gpus_per_node
    sb = [f"--job-name={job_name}", f"--nodes={nodes}", "--ntasks-per-node=1", f"--gpus-per-node={gpus_per_node}",
          f"--cpus-per-task={cpus}", f"--time={time_limit}", "--output=%x-%j.out"]
    if partition:
        sb.append(f"--partition={partition}")
    if account:
        sb.append(f"--account={account}")
    sb += list(extra_sbatch or [])
    results_sh = results.replace("%j", "${SLURM_JOB_ID}")
    wargs = " ".join(shlex.quote(a) for a in (worker_args or []))
    torchrun = (f"{shlex.quote(python)} -m torch.distributed.run \\\n"
                f"    --nnodes \"$SLURM_NNODES\" --nproc-per-node {gpus_per_node} \\\n"
                f"    --rdzv-backend c10d --rdzv-endpoint \"$MASTER_ADDR:$MASTER_PORT\" "
                f"--rdzv-id \"$SLURM_JOB_ID\" \\\n"
                f"    --max-restarts 0 \\\n"
                f"    -m {module}{(' ' + wargs) if wargs else ''}")
    lines = [
        "#!/bin/bash",
        f"# gpuscope distributed benchmark: {nodes} node(s) x {gpus_per_node} GPU(s), module {module}.",
        "# Written by `gpuscope slurm`; submit with: sbatch <this file>",
        *[f"#SBATCH {o}" for o in sb],
        "",
        "set -euo pipefail",
        "",
        NVLS_COMMENT,
        "export NCCL_NVLS_ENABLE=0",
        "",
        "# Rendezvous on the first node of the allocation (torchrun's c10d backend).",
        "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
        f"MASTER_PORT={port}",
        "export MASTER_ADDR MASTER_PORT",
        f"RESULTS=\"{results_sh}\"",
        "export GPUSCOPE_DIST_OUT=\"$RESULTS\"  # rank 0 appends one JSON line per measured point (launch.emit)",
        "export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}",
        "",
        "echo \"gpuscope: $SLURM_NNODES nodes, rendezvous $MASTER_ADDR:$MASTER_PORT, results -> $RESULTS\"",
        "# One task per node; each runs torchrun, which starts the node's workers (rank 0 writes the results).",
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 {torchrun}",
        "",
    ]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("slurm", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def slurm(
        ctx: typer.Context,
        nodes: int = typer.Option(..., "--nodes", "-N", help="Nodes."),
        gpus_per_node: int = typer.Option(8, "--gpus-per-node", "-G", help="GPUs (and processes) per node."),
        cpus_per_task: int = typer.Option(None, "--cpus-per-task", help="CPUs per node task (default 8 per GPU)."),
        time_limit: str = typer.Option("00:30:00", "--time", help="Slurm time limit (30, 01:00:00, 1-00:00:00)."),
        partition: str = typer.Option(None, "--partition", "-p", help="Slurm partition."),
        account: str = typer.Option(None, "--account", "-A", help="Slurm account."),
        job_name: str = typer.Option("gpuscope-bench", "--job-name"),
        module: str = typer.Option(DEFAULT_MODULE, "--module", help="Benchmark worker module run by torchrun."),
        port: int = typer.Option(29500, "--port", help="Rendezvous port on the first node."),
        python: str = typer.Option("python", "--python", help="Python with gpuscope and torch on the nodes."),
        results: str = typer.Option("gpuscope-%j.jsonl", "--results", help="JSON lines written by rank 0 "
                                    "(%j = job id)."),
        sbatch: list[str] = typer.Option(None, "--sbatch", help="Extra #SBATCH option, repeatable "
                                         "(e.g. --sbatch=--exclusive)."),
        out: str = typer.Option(None, "--out", "-o", help="Write the script here (default: stdout)."),
    ) -> None:
        """Write an sbatch script for a distributed benchmark over N nodes x G GPUs (arguments after `--` go to
        the benchmark, e.g. `gpuscope slurm -N 2 -G 8 -- --ops all_reduce --dtype bf16`)."""
        text = sbatch_script(nodes, gpus_per_node, module, list(ctx.args), cpus_per_task, time_limit, partition,
                             account, job_name, port, python, results, sbatch)
        if out:
            p = Path(out)
            try:
                p.write_text(text)
                p.chmod(0o755)
            except OSError as exc:
                raise UserError(f"--out '{out}' cannot be written ({exc.strerror}).") from None
            typer.echo(f"wrote {p} ({nodes} node(s) x {gpus_per_node} GPU(s)); submit with: sbatch {p}", err=True)
        else:
            typer.echo(text, nl=False)
