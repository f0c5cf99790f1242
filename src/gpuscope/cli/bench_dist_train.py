"""`gpuscope bench train-dist` and `gpuscope bench compression`: DDP / FSDP2 training and DDP gradient-compression
hooks, each run as one torchrun job (``gpuscope.measure.distributed.launch.run_torchrun``), stored like every bench result.

- train-dist: ``gpuscope.measure.distributed.train`` on ``--nproc`` processes (one per GPU; gloo on CPU). With
  ``--baseline`` the same case also runs on one GPU alone inside the same job, giving ``scaling_efficiency``.
- compression: ``gpuscope.measure.distributed.compression``: a reference run then one run per hook, same seed and data.
- Rows: kind ``train-dist`` / ``compression``; key = readable name + hash of the whole case. An OOM on any rank is
  stored as status ``oom``; a failed job as ``error`` (exit code 1). Bad input exits 2 before anything starts.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

import typer

from gpuscope.cli.bench import (DB_HELP, JSON_HELP, PRECISIONS, RECOMPUTE, _choice, _load_model_spec, _positive,
                                check_device, require_torch)
from gpuscope.cli.bench_run import Session, guarded
from gpuscope.errors import UserError

STRATEGIES = ("ddp", "fsdp")
HOOKS_DEFAULT = "none,fp16,bf16,powersgd1,powersgd2,powersgd4,sign"
MODEL_HELP = "Preset name, config.json, or a directory holding one."
CONFIG_HELP = "Inline HF config JSON (or a path to one) instead of --model."
NPROC_HELP = "Processes per node (one per GPU)."
DEVICE_HELP = "cuda or cpu (default: cuda when available; cpu runs gloo)."


def _model_case(model: str | None, config: str | None) -> dict:
    if bool(model) == bool(config):
        raise UserError("give exactly one of --model and --config.")
    if model:
        _load_model_spec(model)
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
    if not isinstance(cfg, dict) or not cfg.get("model_type"):
        raise UserError("--config: a Hugging Face config with a 'model_type' is needed.")
    return {"config": cfg}


def _device(device: str | None) -> str | None:
    device = check_device(device)
    if device is not None and device.split(":")[0] not in ("cuda", "cpu"):
        raise UserError(f"--device '{device}' is not supported for distributed runs (cuda or cpu).")
    return device.split(":")[0] if device else None


def _key(name: str, case: dict) -> str:
    return f"{name}#{hashlib.sha1(json.dumps(case, sort_keys=True).encode()).hexdigest()[:8]}"


def _launch(module: str, case: dict, nproc: int, nnodes: int, node_rank: int, rdzv: str | None,
            timeout: float) -> tuple[dict, dict, float]:
    """(result, provenance, wall_s) of one torchrun job; failures become results (oom, error)."""
    from gpuscope.measure.distributed.launch import DistributedRunError, run_torchrun

    t0 = time.perf_counter()
    try:
        recs = run_torchrun(module, ["--case", json.dumps(case)], nproc, nnodes=nnodes, node_rank=node_rank,
                            rdzv_endpoint=rdzv, timeout_s=timeout)
        err = None
    except DistributedRunError as e:
        recs, err = e.records, e
    except ValueError as e:
        raise UserError(str(e)) from None
    wall = time.perf_counter() - t0
    final = [r for r in recs if r.get("final")]
    if final and err is None:
        rec = final[0]
        prov = dict(rec.get("provenance") or {})
        prov.update(wall_s=wall, parent_argv=list(sys.argv))
        return rec["result"], prov, wall
    failed = [r for r in recs if not r.get("final") and isinstance(r.get("result"), dict)]
    oom = [r for r in failed if r["result"].get("status") == "oom"]
    pick = (oom or failed or [None])[0]
    if pick is not None:
        res = dict(pick["result"])
        prov = dict(pick.get("provenance") or {})
    elif final:  # rank 0 finished but the job still failed (e.g. another node)
        res, prov = dict(final[0]["result"]), dict(final[0].get("provenance") or {})
    else:
        res, prov = {"status": "error", "error": str(err) if err else "the job wrote no result"}, {}
    if err is not None:
        res.setdefault("job_error", str(err)[:500])
        res["job_returncode"] = err.returncode
        res["stderr_tail"] = (err.stderr_tail or "")[-1500:]
    from gpuscope.measure.device.provenance import provenance

    if not prov:
        prov = provenance(None, with_torch=False)
    prov.update(wall_s=wall, parent_argv=list(sys.argv))
    return res, prov, wall


def _mib(v) -> str:
    return f"{v / 2**20:.1f}" if isinstance(v, (int, float)) else "-"


def _ms(v) -> str:
    return f"{v * 1e3:.2f}" if isinstance(v, (int, float)) else "-"


def train_table(name: str, r: dict):
    from rich.table import Table

    t = Table(title=f"{name}: {r.get('strategy')} on {r.get('world_size')} x {r.get('device_name')}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    b = r.get("baseline") or {}
    rows = [
        ("step (ms, slowest rank)", _ms(r.get("step_s"))),
        ("step per rank (ms)", ", ".join(_ms(x) for x in r.get("rank_step_s") or [])),
        ("tokens/s (all ranks)", f"{r['tokens_per_s']:.0f}" if r.get("tokens_per_s") else "-"),
        ("tokens/s per GPU", f"{r['tokens_per_s_per_gpu']:.0f}" if r.get("tokens_per_s_per_gpu") else "-"),
        ("baseline step, 1 GPU (ms)", _ms(b.get("step_s")) if b else "not run (--baseline)"),
        ("scaling efficiency", f"{r['scaling_efficiency']:.1%}" if r.get("scaling_efficiency") else "-"),
        ("peak forward (MiB, max rank)", _mib(r.get("peak_forward_bytes"))),
        ("peak backward (MiB, max rank)", _mib(r.get("peak_backward_bytes"))),
        ("peak optimizer (MiB, max rank)", _mib(r.get("peak_optimizer_bytes"))),
        ("peak timed steps (MiB, max rank)", _mib(r.get("peak_bytes"))),
        ("optimizer state per rank (MiB)", _mib(r.get("optimizer_state_bytes"))),
    ]
    for k, v in rows:
        t.add_row(k, v)
    return t


def compression_table(name: str, r: dict):
    from rich.table import Table

    t = Table(title=f"{name}: DDP comm hooks on {r.get('world_size')} x {r.get('device_name')}, "
                    f"{r.get('steps')} steps (reference: no hook)")
    for c in ("hook", "step ms", "bytes/step", "ratio", "loss final", "|dev| final", "|dev| max"):
        t.add_column(c, justify="left" if c == "hook" else "right")
    ref = r["reference"]
    t.add_row("reference", _ms(ref.get("step_s")), f"{ref.get('bytes_per_step') or 0:,}", "1.0",
              f"{ref['losses'][-1]:.4f}", "-", "-")
    for v in r["variants"]:
        ratio = f"{v['compression_ratio']:.1f}" if v.get("compression_ratio") else "-"
        t.add_row(v["hook"], _ms(v.get("step_s")), f"{v.get('bytes_per_step') or 0:,}", ratio,
                  f"{v['loss_final']:.4f}", f"{v['loss_dev_final']:.2e}", f"{v['loss_dev_max']:.2e}")
    return t


def dist_estimate(case: dict, res: dict, gpu: str | None) -> dict:
    """The planner's DDP/FSDP estimate beside a measured train-dist case (bench.estimate_beside: memory per phase,
    step, MFU, scaling efficiency when the baseline ran) or {"unavailable": why}."""
    from gpuscope.cli.bench_report import estimate_beside

    return estimate_beside({"case": case, "result": res}, gpu)


def _record(s: Session, kind: str, name: str, case: dict, res: dict, prov: dict, wall: float, table,
            estimate: dict | None = None) -> None:
    key = _key(name, case)
    mid = s.store.put(s.run_id, key, kind, name, case, res, prov)
    entry = {"id": mid, "key": key, "name": name, "skipped": False, "status": res.get("status"), "result": res}
    if estimate is not None:
        entry["estimate"] = estimate
    s.out.append(entry)
    if res.get("status") == "ok":
        s.note(f"[{mid}] {name}: ok ({wall:.1f}s)")
        if not s.as_json:
            s.log.print(table(name, res))
            if estimate and "rows" in estimate:
                from gpuscope.cli.bench_report import estimate_table

                s.log.print(estimate_table(name, estimate))
            elif estimate:
                s.log.print(f"  no estimate: {estimate['unavailable']}", highlight=False)
    else:
        s.note(f"[{mid}] {name}: {res.get('status')} {res.get('phase') or ''} {res.get('error') or ''}".rstrip())


def _exit_on_error(s: Session) -> None:
    if any(m["status"] == "error" for m in s.out):
        raise typer.Exit(1)


def _run_job(kind: str, module: str, case: dict, name: str, device: str | None, launch: tuple, db: str | None,
             as_json: bool, table, estimate=None) -> None:
    """One torchrun job of ``module`` for ``case`` (``launch``: nproc, nnodes, node_rank, rdzv, timeout), stored
    under ``name`` and printed with ``table``; ``estimate(result)`` gives the planner's rows beside it."""
    if device:
        case["device"] = device
    s = Session(db, f"bench {kind}", False, as_json)

    def go():
        res, prov, wall = _launch(module, case, *launch)
        _record(s, kind, name, case, res, prov, wall, table, estimate(res) if estimate else None)

    guarded(s, go)
    _exit_on_error(s)


def register_dist_train(bench: typer.Typer) -> None:
    @bench.command("train-dist")
    def train_dist(
        nproc: int = typer.Option(2, "--nproc", help=NPROC_HELP),
        strategy: str = typer.Option("ddp", "--strategy", help="ddp | fsdp (FSDP2 fully_shard)."),
        model: str = typer.Option(None, "--model", help=MODEL_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
        micro_batch: int = typer.Option(1, "--micro-batch", help="Sequences per GPU per step."),
        seq: int = typer.Option(2048, "--seq"),
        precision: str = typer.Option("amp-bf16", "--precision", help="amp-bf16|amp-fp16 (ddp only)|bf16|fp32."),
        recompute: str = typer.Option("none", "--recompute", help="none|full."),
        steps: int = typer.Option(6, "--steps", help="Timed optimizer steps (median per rank)."),
        warmup: int = typer.Option(2, "--warmup", help="Untimed steps first."),
        baseline: bool = typer.Option(False, "--baseline", help="Also run the same case on one GPU alone "
                                      "(same job) and report scaling efficiency."),
        bucket_cap_mb: float = typer.Option(25.0, "--bucket-cap-mb", help="DDP bucket size (torch default 25)."),
        grad_bucket_view: bool = typer.Option(False, "--gradient-as-bucket-view", help="DDP: gradients are "
                                              "views into the buckets (saves one gradient copy)."),
        nnodes: int = typer.Option(1, "--nnodes"),
        node_rank: int = typer.Option(0, "--node-rank"),
        rdzv: str = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of the first node (several nodes)."),
        timeout: float = typer.Option(1800, "--timeout", help="Seconds before the job is stopped."),
        db: str = typer.Option(None, "--db", help=DB_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
        gpu: str = typer.Option(None, "--gpu", help="Hardware for the estimate beside the measurement: catalog "
                                "name or a (calibrated) TOML (default: the device that ran, if in the catalog)."),
    ) -> None:
        """Data-parallel training step (DDP or FSDP2, random weights): per-rank step time, tokens/s, memory per
        phase, scaling efficiency against one GPU; the planner's estimate beside it."""
        require_torch()
        _positive(nproc=nproc, micro_batch=micro_batch, seq=seq, steps=steps, warmup=warmup + 1, nnodes=nnodes,
                  timeout=timeout)
        _choice("strategy", strategy, STRATEGIES)
        _choice("precision", precision, PRECISIONS)
        _choice("recompute", recompute, RECOMPUTE)
        if strategy == "fsdp" and precision == "amp-fp16":
            raise UserError("--precision 'amp-fp16' is not supported with --strategy fsdp; use amp-bf16, bf16 or fp32.")
        if bucket_cap_mb <= 0:
            raise UserError(f"--bucket-cap-mb must be positive, not {bucket_cap_mb}.")
        device = _device(device)
        case = {"kind": "train-dist", "strategy": strategy, **_model_case(model, config), "micro_batch": micro_batch,
                "seq": seq, "precision": precision, "recompute": recompute, "steps": steps, "warmup": warmup,
                "baseline": baseline, "nproc": nproc, "nnodes": nnodes, "timeout_s": timeout}
        if strategy == "ddp":
            case.update(bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=grad_bucket_view)
        m = model or case["config"]["model_type"]
        name = f"train-dist/{m}/{strategy}-{nnodes * nproc}p-mb{micro_batch}-s{seq}-{precision}-rc_{recompute}"
        _run_job("train-dist", "gpuscope.measure.distributed.train", case, name, device, (nproc, nnodes, node_rank, rdzv,
                 timeout), db, as_json, train_table, lambda res: dist_estimate(case, res, gpu))

    @bench.command("compression")
    def compression(
        nproc: int = typer.Option(2, "--nproc", help=NPROC_HELP),
        model: str = typer.Option(None, "--model", help=MODEL_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
        micro_batch: int = typer.Option(1, "--micro-batch"),
        seq: int = typer.Option(1024, "--seq"),
        precision: str = typer.Option("fp32", "--precision", help="amp-bf16|amp-fp16|bf16|fp32 (gradients are "
                                      "fp32 except with bf16)."),
        steps: int = typer.Option(12, "--steps", help="Optimizer steps per variant."),
        warmup: int = typer.Option(3, "--warmup", help="Steps not timed (>= --start-powersgd-iter)."),
        hooks: str = typer.Option(HOOKS_DEFAULT, "--hooks", help="Comma-separated: none, fp16, bf16, powersgdR "
                                  "(R = rank), sign."),
        lr: float = typer.Option(1e-3, "--lr"),
        start_powersgd_iter: int = typer.Option(2, "--start-powersgd-iter"),
        nnodes: int = typer.Option(1, "--nnodes"),
        node_rank: int = typer.Option(0, "--node-rank"),
        rdzv: str = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of the first node (several nodes)."),
        timeout: float = typer.Option(1800, "--timeout", help="Seconds before the job is stopped."),
        db: str = typer.Option(None, "--db", help=DB_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
    ) -> None:
        """DDP gradient compression: step time, bytes sent per step and loss deviation from the uncompressed run,
        per communication hook (same seed, same data, same steps)."""
        require_torch()
        from gpuscope.measure.distributed.compression import parse_hooks

        _positive(nproc=nproc, micro_batch=micro_batch, seq=seq, steps=steps, nnodes=nnodes, timeout=timeout)
        _choice("precision", precision, PRECISIONS)
        try:
            hook_list = parse_hooks(hooks)
        except ValueError as e:
            raise UserError(f"--{e}.") from None
        if start_powersgd_iter < 2:
            raise UserError(f"--start-powersgd-iter must be >= 2 (PowerSGD's rule), not {start_powersgd_iter}.")
        if not 0 <= warmup < steps:
            raise UserError(f"--warmup must be >= 0 and below --steps ({steps}), not {warmup}.")
        if not lr > 0:
            raise UserError(f"--lr must be positive, not {lr}.")
        device = _device(device)
        case = {"kind": "compression", **_model_case(model, config), "micro_batch": micro_batch, "seq": seq,
                "precision": precision, "steps": steps, "warmup": warmup, "hooks": hook_list, "lr": lr,
                "start_powersgd_iter": start_powersgd_iter, "nproc": nproc, "nnodes": nnodes, "timeout_s": timeout}
        m = model or case["config"]["model_type"]
        name = f"compression/{m}/{nnodes * nproc}p-mb{micro_batch}-s{seq}-{precision}-{'+'.join(hook_list)}"
        _run_job("compression", "gpuscope.measure.distributed.compression", case, name, device, (nproc, nnodes, node_rank,
                 rdzv, timeout), db, as_json, compression_table)
