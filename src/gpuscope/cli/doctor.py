"""`gpuscope doctor`: profile a run, compare it with the planner, and list findings with fixes.

    gpuscope doctor infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 64 [--gpu h200]
    gpuscope doctor train --model M --micro-batch 4 --seq 2048 --precision amp-bf16 [--plan-only --gpu h100]
    gpuscope doctor [--json|--markdown] -- python train.py --lr 3e-4

A workload runs in this process under torch.profiler (gpuscope.measure.profile.workload); a script runs
in a child Python under it (measure/profile/script.py). Training that runs out of memory (or that the planner says
cannot fit, or with --plan-only) gets the article's OOM tiers computed by the planner for the same configuration.
"""

from __future__ import annotations

import typer

from gpuscope.errors import UserError

DEVICE_HELP = "cpu, cuda, cuda:N, xpu, mps (default: the first available accelerator, else cpu)."


def _console():
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=max(c.width, 140))


def _hardware(gpu: str | None, device_name: str | None):
    """(HardwareSpec | None, why-not)."""
    from gpuscope.specs.hardware import load_hardware

    if gpu:
        return load_hardware(gpu), None
    if not device_name:
        return None, "pass --gpu NAME for the planner's estimate"
    from gpuscope.specs.hardware import catalog_key_for_device as catalog_key_for

    key = catalog_key_for(device_name)
    if key is None:
        return None, f"device '{device_name}' is not in the hardware catalog; pass --gpu NAME for the estimate"
    return load_hardware(key), None


def _model_spec(case: dict):
    from gpuscope.specs.hf_config import spec_from_config
    from gpuscope.specs.models import load_model

    if isinstance(case.get("config"), dict):
        return spec_from_config(case["config"], name=case.get("model") or "inline")
    return load_model(case["model"])


def _oom(case: dict, hw) -> dict:
    from gpuscope.explain.oom_tiers import oom_tiers

    return oom_tiers(_model_spec(case), hw, micro_batch=case["micro_batch"], seq=case["seq"],
                     precision=case.get("precision", "amp-bf16"), optimizer=case.get("optimizer", "adamw"),
                     recompute=case.get("recompute", "none"))


def build_report(target: dict, summary: dict | None, case: dict | None, gpu: str | None, plan_only: bool) -> dict:
    from gpuscope.workloads import estimate_for
    from gpuscope.explain.findings import compare_estimate, diagnose
    from gpuscope.report.doctor_view import DOCTOR_SCHEMA

    summary = summary or {}
    report = {"schema": DOCTOR_SCHEMA, "target": target, "profile": summary, "estimate": None, "findings": [],
              "oom": None}
    status = "planned" if plan_only else summary.get("status") or summary.get("script_status") or "ok"
    report["status"] = status
    hw, why = (None, "no gpuscope workload (a script): the planner needs the model and configuration") \
        if case is None else _hardware(gpu, summary.get("device_name"))
    est = None
    if hw is not None:
        try:
            est = estimate_for(case, hw)
            report["estimate"] = compare_estimate(est, summary) if summary.get("wall_s") else {
                "hardware": est.hardware, "rows": [], "fits": est.fits, "verdict": est.verdict}
            if summary.get("wall_s"):
                summary["estimate"] = report["estimate"]
        except UserError as e:
            report["estimate"] = {"unavailable": str(e)}
    else:
        report["estimate"] = {"unavailable": why}
    if summary.get("wall_s"):
        report["findings"] = diagnose(summary)
        summary.pop("estimate", None)
    if case is not None and case.get("kind") == "train" and hw is not None and (
            status == "oom" or plan_only or (est is not None and not est.fits)):
        report["oom"] = _oom(case, hw)
    return report


def _emit(report: dict, as_json: bool, markdown: bool) -> None:
    from gpuscope.report.doctor_view import doctor_markdown, render_doctor, to_json_text

    if as_json:
        typer.echo(to_json_text(report))
    elif markdown:
        typer.echo(doctor_markdown(report))
    else:
        render_doctor(report, _console())


def register(app: typer.Typer) -> None:
    @app.command("doctor", context_settings={"allow_interspersed_args": True})
    def doctor(
        args: list[str] = typer.Argument(None, help="infer | train, or after `--` a Python command: "
                                         "-- python train.py [args]"),
        model: str = typer.Option(None, "--model", help="Preset name, config.json, or a directory holding one."),
        config: str = typer.Option(None, "--config", help="A Hugging Face config.json (instead of --model)."),
        batch: int = typer.Option(1, "--batch", help="infer: batch."),
        prompt: int = typer.Option(512, "--prompt", help="infer: prompt tokens."),
        gen: int = typer.Option(64, "--gen", help="infer: generated tokens."),
        dtype: str = typer.Option("bf16", "--dtype", help="infer: bf16|fp16|fp32."),
        engine: str = typer.Option("hf-eager", "--engine", help="infer: hf-eager | hf-graph | gs-graph | gs-compile."),
        attn: str = typer.Option("sdpa", "--attn", help="infer: sdpa | eager | gs-gqa (as bench infer)."),
        fuse_proj: bool = typer.Option(False, "--fuse-proj", help="infer: one GEMM for q|k|v and gate|up."),
        defer_stop: bool = typer.Option(False, "--defer-stop", help="infer, HF engines: generate reads its stop "
                                        "flag one token late (as bench infer)."),
        micro_batch: int = typer.Option(1, "--micro-batch", help="train: micro-batch."),
        seq: int = typer.Option(2048, "--seq", help="train: tokens per sequence."),
        precision: str = typer.Option("amp-bf16", "--precision", help="train: amp-bf16|amp-fp16|bf16|fp32."),
        recompute: str = typer.Option("none", "--recompute", help="train: none|full."),
        steps: int = typer.Option(3, "--steps", help="train: profiled steps."),
        gpu: str = typer.Option(None, "--gpu", help="Hardware for the planner's estimate (default: the device "
                                "that ran, if in the catalog)."),
        plan_only: bool = typer.Option(False, "--plan-only", help="train: no run; the planner's verdict and OOM "
                                       "tiers for --gpu."),
        timeout: float = typer.Option(None, "--timeout", help="Script: seconds before it is stopped."),
        bare_run: bool = typer.Option(False, "--bare-run", help="Script: run it once without the profiler first "
                                      "(a step timed at each optimizer step) so the profiler's own cost is measured, "
                                      "not estimated: truer launch-bound and data-wait shares, twice the run time "
                                      "(and the script's side effects twice)."),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
        markdown: bool = typer.Option(False, "--markdown", help="Print Markdown."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON (schema gpuscope.doctor/1)."),
    ) -> None:
        """Profile a run (a gpuscope workload or your script) and diagnose it: findings, evidence, fixes."""
        args = list(args or [])
        if not args:
            raise UserError("doctor needs a workload (infer or train) or a command after `--` "
                            "(gpuscope doctor -- python train.py).")
        if len(args) == 1 and args[0] in ("infer", "train"):
            kind = args[0]
            if bare_run:
                raise UserError("--bare-run is for a script (doctor -- python train.py); doctor infer/train always "
                                "time their workload bare before profiling it.")
            from gpuscope.cli.tune import case_model

            for name, v in (("batch", batch), ("prompt", prompt), ("gen", gen), ("micro-batch", micro_batch),
                            ("seq", seq), ("steps", steps)):
                if v <= 0:
                    raise UserError(f"--{name} must be a positive integer, not {v}.")
            name, extra = case_model(model, config)
            if kind == "infer":
                if dtype not in ("bf16", "fp16", "fp32"):
                    raise UserError(f"--dtype '{dtype}' is not one of bf16, fp16, fp32.")
                if attn not in ("sdpa", "eager", "gs-gqa"):
                    raise UserError(f"--attn '{attn}' is not one of sdpa, eager, gs-gqa.")
                if attn != "sdpa":
                    extra["attn"] = attn
                if fuse_proj:
                    extra["fuse_proj"] = True
                if defer_stop:
                    from gpuscope.cli.bench import defer_stop_ok
                    from gpuscope.cli.options import require_torch

                    require_torch()
                    extra["defer_stop"] = defer_stop_ok(engine, device)
                from gpuscope.workloads.sets import infer_case

                case = infer_case(name, batch, prompt, gen, dtype=dtype, repeats=1, engine=engine, **extra)
            else:
                if precision not in ("amp-bf16", "amp-fp16", "bf16", "fp32"):
                    raise UserError(f"--precision '{precision}' is not one of amp-bf16, amp-fp16, bf16, fp32.")
                if recompute not in ("none", "full"):
                    raise UserError(f"--recompute '{recompute}' is not one of none, full.")
                from gpuscope.workloads.sets import train_case

                case = train_case(name, micro_batch, seq, precision, recompute, steps=steps, warmup=1, **extra)
            target = {"kind": kind, "name": f"{kind} {name}", "case": case}
            if plan_only:
                if kind != "train" or not gpu:
                    raise UserError("--plan-only needs the train workload and --gpu.")
                report = build_report(target, None, case, gpu, True)
            else:
                from gpuscope.cli.options import check_device, require_torch

                require_torch()
                check_device(device)
                from gpuscope.measure.profile.workload import profile_workload

                try:
                    summary = profile_workload(case, device)
                except RuntimeError as e:
                    if "not available" in str(e):
                        raise UserError(f"--device: {e}.") from None
                    raise
                report = build_report(target, summary, case, gpu, False)
        else:
            from gpuscope.cli.options import check_device, require_torch

            require_torch()
            check_device(device)
            from gpuscope.measure.profile.script import profile_script

            try:
                summary = profile_script(args, device, timeout, bare_run=bare_run)
            except (ValueError, FileNotFoundError) as e:
                raise UserError(f"doctor: {e}." if isinstance(e, ValueError)
                                else f"doctor: script '{e}' does not exist.") from None
            report = build_report({"kind": "script", "name": " ".join(args)}, summary, None, gpu, False)
        _emit(report, as_json, markdown)
