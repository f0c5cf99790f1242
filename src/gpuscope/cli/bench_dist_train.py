"""`gpuscope bench train-dist` and `gpuscope bench compression`: DDP / FSDP2 training and DDP gradient-compression
hooks, each run as one torchrun job (pipeline/dist.py), stored like every bench result.

- train-dist: on ``--nproc`` processes (one per GPU; gloo on CPU). With ``--baseline`` the same case also runs on
  one GPU alone inside the same job, giving ``scaling_efficiency``; the planner's estimate beside it.
- compression: a reference run then one run per hook, same seed and data.
- Rows: kind ``train-dist`` / ``compression`` (workloads/); an OOM on any rank is stored as status ``oom``; a
  failed job as ``error`` (exit code 1). Bad input exits 2 before anything starts.
"""

from __future__ import annotations

import json

import typer

from gpuscope.cli import options
from gpuscope.cli.bench_run import Session, guarded, json_out
from gpuscope.errors import UserError
from gpuscope.specs.axes import MEASURED_PRECISIONS, MEASURED_RECOMPUTE, MEASURED_STRATEGIES, Strategy

HOOKS_DEFAULT = "none,fp16,bf16,powersgd1,powersgd2,powersgd4,sign"
CONFIG_HELP = "Inline HF config JSON (or a path to one) instead of --model."
NPROC_HELP = "Processes per node (one per GPU)."
DEVICE_HELP = "cuda or cpu (default: cuda when available; cpu runs gloo)."


def _model_case(model: str | None, config: str | None) -> dict:
    if bool(model) == bool(config):
        raise UserError("give exactly one of --model and --config.")
    if model:
        options.load_model_spec(model)
        return {"model": model}
    text = config.strip()
    try:
        if text.startswith("{"):
            cfg = json.loads(text)
        else:
            with open(text) as f:
                cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"--config: not a readable JSON config ({e}).") from None
    return {"config": cfg}


def _device(device: str | None) -> dict:
    device = options.device_exists(device)
    return {"device": device.split(":")[0]} if device else {}


def _run(case: dict, db: str | None, as_json: bool, gpu: str | None, node_rank: int, rdzv: str | None) -> None:
    """One torchrun job of a train-dist or compression case dict (checked by its kind first), stored and printed."""
    from gpuscope import workloads
    from gpuscope.pipeline.dist import run_job

    typed = workloads.from_dict(case)
    options.known_gpu(gpu)
    s = Session(db, f"bench {typed.KIND.value}", False, as_json)
    guarded(s, lambda: _print(s, run_job(s, typed, gpu, node_rank, rdzv)))


def _print(s: Session, entry: dict) -> None:
    from gpuscope.report.bench_view import compression_table, train_table

    if s.as_json or entry["status"] != "ok":
        return
    table = train_table if entry["result"].get("kind") == "train-dist" else compression_table
    s.reporter.log.print(table(entry["name"], entry["result"]))


def train_dist(
    nproc: int = typer.Option(2, "--nproc", help=NPROC_HELP),
    strategy: str = options.axis_option(Strategy, Strategy.DDP, "strategy", among=MEASURED_STRATEGIES,
                                        help="ddp | fsdp (FSDP2 fully_shard)."),
    model: str = options.model(required=False), config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Sequences per GPU per step."),
    seq: int = typer.Option(2048, "--seq"),
    precision: str = options.precision(among=MEASURED_PRECISIONS, help="amp-bf16|amp-fp16 (ddp only)|bf16|fp32."),
    recompute: str = options.recompute(among=MEASURED_RECOMPUTE),
    steps: int = typer.Option(6, "--steps", help="Timed optimizer steps (median per rank)."),
    warmup: int = typer.Option(2, "--warmup", help="Untimed steps first."),
    baseline: bool = typer.Option(False, "--baseline", help="Also run the same case on one GPU alone (same job) "
                                  "and report scaling efficiency."),
    bucket_cap_mb: float = typer.Option(25.0, "--bucket-cap-mb", help="DDP bucket size (torch default 25)."),
    grad_bucket_view: bool = typer.Option(False, "--gradient-as-bucket-view", help="DDP: gradients are views "
                                          "into the buckets (saves one gradient copy)."),
    nnodes: int = typer.Option(1, "--nnodes"), node_rank: int = typer.Option(0, "--node-rank"),
    rdzv: str = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of the first node (several nodes)."),
    timeout: float = typer.Option(1800, "--timeout", help="Seconds before the job is stopped."),
    db: str = options.db(), as_json: bool = json_out(), device: str = options.device(help=DEVICE_HELP),
    gpu: str = options.gpu(required=False, help=options.BENCH_GPU_HELP + " (default: the device that ran, if in "
                           "the catalog)."),
) -> None:
    """Data-parallel training step (DDP or FSDP2, random weights): per-rank step time, tokens/s, memory per
    phase, scaling efficiency against one GPU; the planner's estimate beside it."""
    options.require_torch()
    case = {"kind": "train-dist", "strategy": strategy, **_model_case(model, config), "micro_batch": micro_batch,
            "seq": seq, "precision": precision, "recompute": recompute, "steps": steps, "warmup": warmup,
            "baseline": baseline, "nproc": nproc, "nnodes": nnodes, "timeout_s": timeout}
    if strategy == "ddp":
        case.update(bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=grad_bucket_view)
    _run({**case, **_device(device)}, db, as_json, gpu, node_rank, rdzv)


def compression(
    nproc: int = typer.Option(2, "--nproc", help=NPROC_HELP),
    model: str = options.model(required=False), config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    micro_batch: int = typer.Option(1, "--micro-batch"),
    seq: int = typer.Option(1024, "--seq"),
    precision: str = options.precision("fp32", among=MEASURED_PRECISIONS, help="amp-bf16|amp-fp16|bf16|fp32 "
                                       "(gradients are fp32 except with bf16)."),
    steps: int = typer.Option(12, "--steps", help="Optimizer steps per variant."),
    warmup: int = typer.Option(3, "--warmup", help="Steps not timed (>= --start-powersgd-iter)."),
    hooks: str = typer.Option(HOOKS_DEFAULT, "--hooks", help="Comma-separated: none, fp16, bf16, powersgdR "
                              "(R = rank), sign."),
    lr: float = typer.Option(1e-3, "--lr"),
    start_powersgd_iter: int = typer.Option(2, "--start-powersgd-iter"),
    nnodes: int = typer.Option(1, "--nnodes"), node_rank: int = typer.Option(0, "--node-rank"),
    rdzv: str = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of the first node (several nodes)."),
    timeout: float = typer.Option(1800, "--timeout", help="Seconds before the job is stopped."),
    db: str = options.db(), as_json: bool = json_out(), device: str = options.device(help=DEVICE_HELP),
) -> None:
    """DDP gradient compression: step time, bytes sent per step and loss deviation from the uncompressed run,
    per communication hook (same seed, same data, same steps)."""
    options.require_torch()  # before the hooks' module, which imports torch
    from gpuscope.measure.distributed.compression import parse_hooks

    try:
        hook_list = parse_hooks(hooks)
    except ValueError as e:
        raise UserError(f"--{e}.") from None
    case = {"kind": "compression", **_model_case(model, config), "micro_batch": micro_batch, "seq": seq,
            "precision": precision, "steps": steps, "warmup": warmup, "hooks": hook_list, "lr": lr,
            "start_powersgd_iter": start_powersgd_iter, "nproc": nproc, "nnodes": nnodes, "timeout_s": timeout}
    _run({**case, **_device(device)}, db, as_json, None, node_rank, rdzv)


def register_dist_train(bench: typer.Typer) -> None:
    bench.command("train-dist")(train_dist)
    bench.command("compression")(compression)
