"""`gpuscope doctor`: profile a run, compare it with the planner, and list findings with fixes.

    gpuscope doctor infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 64 [--gpu h200]
    gpuscope doctor train --model M --micro-batch 4 --seq 2048 --precision amp-bf16 [--plan-only --gpu h100]
    gpuscope doctor [--json|--markdown] -- python train.py --lr 3e-4

A workload runs in this process under torch.profiler (gpuscope.measure.profile.workload); a script runs
in a child Python under it (measure/profile/script.py). Training that runs out of memory (or that the planner says
cannot fit, or with --plan-only) gets the article's OOM tiers computed by the planner for the same configuration
(explain/doctor_report.py builds the report, report/doctor_view.py renders it).
On a CPU: bench's CPU sizes where none are given, each timed phase to bench's phase budget (the bare generate or
steps end there, the profile covers what ran: measure/profile/token_clock.py), the estimate on this host's kept
ceilings, and a progress line on a terminal (cli/doctor_progress.py).
"""

from __future__ import annotations

import typer

from gpuscope.cli import options as o
from gpuscope.errors import UserError
from gpuscope.explain.doctor_report import build_report  # noqa: F401  (imported from here by callers)

ARGS_HELP = "infer | train, or after `--` a Python command: -- python train.py [args]"
GPU_HELP = "Hardware for the planner's estimate (default: the device that ran, if in the catalog)."
PLAN_ONLY_HELP = "train: no run; the planner's verdict and OOM tiers for --gpu."
BARE_RUN_HELP = ("Script: run it once without the profiler first (a step timed at each optimizer step) so the "
                 "profiler's own cost is measured, not estimated: truer launch-bound and data-wait shares, twice the "
                 "run time (and the script's side effects twice).")
DEFER_HELP = "infer, HF engines: generate reads its stop flag one token late (as bench infer)."
NEEDS_TARGET = "doctor needs a workload (infer or train) or a command after `--` (gpuscope doctor -- python train.py)."
INFER_SIZES = {"prompt": 512, "gen": 64, "dtype": "bf16"}
# bench's CPU sizes (cli/bench_cpu.py: fp32, 32 + 8 tokens); on a CPU each timed phase also ends at bench's phase
# budget (measure/profile/token_clock.py), so sizes given by hand finish too
CPU_INFER_SIZES = {"prompt": 32, "gen": 8, "dtype": "fp32"}
TRAIN_SIZES = {"seq": 2048, "precision": "amp-bf16"}
CPU_TRAIN_SIZES = {"seq": 128, "precision": "fp32"}
BARE_RUN_WORKLOAD = ("--bare-run is for a script (doctor -- python train.py); doctor infer/train always time their "
                     "workload bare before profiling it.")


def register(app: typer.Typer) -> None:
    app.command("doctor", context_settings={"allow_interspersed_args": True})(doctor)


def doctor(
    args: list[str] = typer.Argument(None, help=ARGS_HELP),
    model: str = o.model(required=False),
    config: str = o.config(help="A Hugging Face config.json (instead of --model)."),
    batch: int = typer.Option(1, "--batch", help="infer: batch."),
    prompt: int = typer.Option(None, "--prompt", help=f"infer: prompt tokens (default {INFER_SIZES['prompt']}, "
                               f"{CPU_INFER_SIZES['prompt']} on a CPU)."),
    gen: int = typer.Option(None, "--gen", help=f"infer: generated tokens (default {INFER_SIZES['gen']}, "
                            f"{CPU_INFER_SIZES['gen']} on a CPU)."),
    dtype: str = o.dtype(None, help="infer: bf16|fp16|fp32 (default bf16, fp32 on a CPU)."),
    engine: str = typer.Option("hf-eager", "--engine", help="infer: hf-eager | hf-graph | gs-graph | gs-compile."),
    attn: str = typer.Option("sdpa", "--attn", help="infer: sdpa | eager | gs-gqa (as bench infer)."),
    fuse_proj: bool = typer.Option(False, "--fuse-proj", help="infer: one GEMM for q|k|v and gate|up."),
    defer_stop: bool = typer.Option(False, "--defer-stop", help=DEFER_HELP),
    micro_batch: int = typer.Option(1, "--micro-batch", help="train: micro-batch."),
    seq: int = typer.Option(None, "--seq", help=f"train: tokens per sequence (default {TRAIN_SIZES['seq']}, "
                            f"{CPU_TRAIN_SIZES['seq']} on a CPU)."),
    precision: str = o.precision(None, help="train: amp-bf16|amp-fp16|bf16|fp32 (default amp-bf16, fp32 on a CPU)."),
    recompute: str = o.recompute(help="train: none|full."),
    steps: int = typer.Option(3, "--steps", help="train: profiled steps."),
    lora_r: int = typer.Option(None, "--lora-r", help="train --plan-only: LoRA fine-tuning, adapters of this rank "
                               "(OOM tiers: checkpointing, rank/targets, 8-bit/paged optimizer, QLoRA, offload)."),
    lora_targets: str = typer.Option(None, "--lora-targets", help="train --plan-only, with --lora-r: module names."),
    qlora: bool = typer.Option(False, "--qlora", help="train --plan-only, with --lora-r: the base in 4-bit NF4."),
    gpu: str = o.gpu(required=False, help=GPU_HELP),
    plan_only: bool = typer.Option(False, "--plan-only", help=PLAN_ONLY_HELP),
    timeout: float = typer.Option(None, "--timeout", help="Script: seconds before it is stopped."),
    bare_run: bool = typer.Option(False, "--bare-run", help=BARE_RUN_HELP),
    device: str = o.device(),
    markdown: bool = o.markdown(),
    as_json: bool = o.json_out("gpuscope.doctor/1"),
) -> None:
    """Profile a run (a gpuscope workload or your script) and diagnose it: findings, evidence, fixes."""
    args = list(args or [])
    if not args:
        raise UserError(NEEDS_TARGET)
    if timeout is not None:
        o.positive(timeout=timeout)
    if len(args) == 1 and args[0] in ("infer", "train"):
        if bare_run:
            raise UserError(BARE_RUN_WORKLOAD)
        o.positive(batch=batch, micro_batch=micro_batch, steps=steps,
                   **{k: v for k, v in (("prompt", prompt), ("gen", gen), ("seq", seq)) if v is not None})
        name, extra = o.case_model(model, config)
        if args[0] == "infer":
            prompt, gen, dtype, note = _infer_sizes(prompt, gen, dtype, device, plan_only)
            case = _infer_case(name, extra, batch, prompt, gen, dtype, engine, attn, fuse_proj, defer_stop, device)
            if note:  # after the checks: bad input stays one sentence
                typer.echo(note, err=True)
        else:
            lora = {k: v for k, v in (("lora_r", lora_r), ("lora_targets", lora_targets), ("qlora", qlora or None))
                    if v is not None}
            case = _train_target(name, extra, lora, micro_batch, seq, precision, recompute, steps, device, plan_only)
        report = _workload_report(args[0], name, case, gpu, plan_only, device)
    else:
        report = _script_report(args, gpu, device, timeout, bare_run)
    _emit(report, as_json, markdown)
    _exit_for(report, as_json)


def _sizes(kind: str, given: dict, device, plan_only: bool) -> tuple[dict, str | None]:
    """``given`` (flag -> value, None where not given) with the defaults, CPU-sized where the run is on a CPU
    (bf16 matmuls run about 70x slower than fp32 on a CPU without AMX, and a 1B model's 64 tokens or a 2048-token
    training step take minutes there), and the note that says so (None where nothing was chosen for a CPU)."""
    on_cpu = False
    if not plan_only and None in given.values():
        o.require_torch()
        from gpuscope.measure.device.device import pick_device

        try:
            on_cpu = pick_device(o.check_device(device)).startswith("cpu")
        except RuntimeError:  # a device that is not there: said once, where the workload opens it
            on_cpu = False
    sizes = (CPU_INFER_SIZES if on_cpu else INFER_SIZES) if kind == "infer" else (
        CPU_TRAIN_SIZES if on_cpu else TRAIN_SIZES)
    chosen = [k for k, v in given.items() if v is None]
    note = (f"doctor {kind} on a CPU: " + ", ".join(f"--{k} {sizes[k]}" for k in chosen)
            + " (CPU-sized defaults, so it finishes in a minute or two; pass them to change)") if on_cpu and chosen \
        else None
    return {k: sizes[k] if v is None else v for k, v in given.items()}, note


def _infer_sizes(prompt, gen, dtype, device, plan_only: bool) -> tuple[int, int, str, str | None]:
    """(--prompt, --gen, --dtype, the CPU note): _sizes of infer."""
    v, note = _sizes("infer", {"prompt": prompt, "gen": gen, "dtype": dtype}, device, plan_only)
    return v["prompt"], v["gen"], v["dtype"], note


def _infer_case(name, extra, batch, prompt, gen, dtype, engine, attn, fuse_proj, defer_stop, device) -> dict:
    from gpuscope.specs.axes import Attention, Engine, InferDtype
    from gpuscope.workloads.sets import infer_case

    o.axis(InferDtype, dtype, "dtype")
    o.axis(Engine, engine, "engine")
    if o.axis(Attention, attn, "attn") is not Attention.SDPA:
        extra["attn"] = attn
    if fuse_proj:
        extra["fuse_proj"] = True
    if defer_stop:
        from gpuscope.cli.bench import defer_stop_ok

        o.require_torch()
        extra["defer_stop"] = defer_stop_ok(engine, device)
    return infer_case(name, batch, prompt, gen, dtype=dtype, repeats=1, engine=engine, **extra)


def _train_target(name, extra, lora: dict, micro_batch, seq, precision, recompute, steps, device, plan_only) -> dict:
    """The train case: LoRA only with --plan-only, CPU-sized --seq/--precision where not given (said once checked)."""
    if lora and not plan_only:
        raise UserError("--lora-r, --lora-targets and --qlora need --plan-only here (the profiled run is full "
                        "training); measure LoRA with `gpuscope bench train --lora-r`.")
    v, note = _sizes("train", {"seq": seq, "precision": precision}, device, plan_only)
    case = _train_case(name, dict(extra, **lora), micro_batch, v["seq"], v["precision"], recompute, steps)
    if note:
        typer.echo(note, err=True)
    return case


def _train_case(name, extra, micro_batch, seq, precision, recompute, steps) -> dict:
    from gpuscope.specs.axes import MEASURED_PRECISIONS, MEASURED_RECOMPUTE, Precision, Recompute
    from gpuscope.workloads.sets import train_case

    o.axis(Precision, precision, "precision", among=MEASURED_PRECISIONS)
    o.axis(Recompute, recompute, "recompute", among=MEASURED_RECOMPUTE)
    return train_case(name, micro_batch, seq, precision, recompute, steps=steps, warmup=1, **extra)


def _workload_report(kind: str, name: str, case: dict, gpu, plan_only: bool, device) -> dict:
    target = {"kind": kind, "name": f"{kind} {name}", "case": case}
    if plan_only:
        if kind != "train" or not gpu:
            raise UserError("--plan-only needs the train workload and --gpu.")
        return build_report(target, None, case, gpu, True)
    o.require_torch()
    o.check_device(device)
    from gpuscope.cli.bench_cpu import fits_host
    from gpuscope.cli.doctor_progress import progress_line
    from gpuscope.measure.profile.workload import profile_workload

    fits_host(case, device)

    try:
        with progress_line() as on_progress:
            summary = profile_workload(case, device, on_progress, _cpu_budget(device))
    except RuntimeError as e:
        if "not available" in str(e):
            raise UserError(f"--device: {e}.") from None
        raise
    for rec in (summary.get("tokens"), summary.get("train_steps")):
        if rec and rec.get("stopped_why"):
            typer.echo(f"doctor {kind}: {rec['stopped_why']} (GPUSCOPE_PHASE_BUDGET_S=SECONDS to change).",
                       err=True)
    target["case"] = summary.get("case", case)
    report = build_report(target, summary, target["case"], gpu, False)
    if (report.get("estimate") or {}).get("source"):
        typer.echo(f"doctor {kind}: the estimate is planned on {report['estimate']['source']}.", err=True)
    return report


def _cpu_budget(device) -> float | None:
    """The timed phases' budget: the environment's (GPUSCOPE_PHASE_BUDGET_S), else on a CPU bench's
    (cli/bench_cpu.PHASE_BUDGET_S): the bare generate (or training steps) end there, and the profiled run covers as
    many. None: no budget (an accelerator)."""
    from gpuscope.cli.bench_cpu import PHASE_BUDGET_S, on_cpu
    from gpuscope.measure.runner.progress import budget_s

    return budget_s() or (PHASE_BUDGET_S if on_cpu(device) else None)


def _script_report(args: list[str], gpu, device, timeout, bare_run: bool) -> dict:
    o.require_torch()
    o.check_device(device)
    from gpuscope.measure.profile.script import profile_script

    try:
        summary = profile_script(args, device, timeout, bare_run=bare_run)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(f"doctor: {e}." if isinstance(e, ValueError)
                        else f"doctor: script '{e}' does not exist.") from None
    return build_report({"kind": "script", "name": " ".join(args)}, summary, None, gpu, False)


def _exit_for(report: dict, as_json: bool) -> None:
    """A script that failed: exit 1, the count on the last line of stderr (with --json its last lines before it,
    which the table and Markdown show); stopped: exit 130."""
    from gpuscope.report.doctor_view import failure_lines, script_failed

    if not script_failed(report):
        return
    if report["status"] == "interrupted":
        typer.echo("interrupted: the profile up to the stop is reported above.", err=True)
        raise typer.Exit(130)
    for line in failure_lines(report) if as_json else []:
        typer.echo(line, err=True)
    typer.echo("1 of 1 profiled runs failed (the script's own error above).", err=True)
    raise typer.Exit(1)


def _emit(report: dict, as_json: bool, markdown: bool) -> None:
    from gpuscope.report.doctor_view import doctor_markdown, render_doctor, to_json_text

    o.emit(report, as_json, markdown, to_json_text, doctor_markdown, render_doctor)
