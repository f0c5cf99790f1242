"""`gpuscope bench micro|infer|train|all`: measure, store every result (SQLite), print the planner's estimate beside it.

- micro runs in this process (torch imported here, lazily); infer/train cases run each in their own subprocess
  (``gpuscope.measure.suite.run_one``: an OOM, crash or hang ends only that case) while this process samples NVML.
- Every finished measurement is committed at once; Ctrl-C keeps them; ``--resume`` skips keys already measured on
  this host with a final status (ok, oom, unsupported).
- Workloads: the estimate for the same case on ``--gpu`` (catalog name or a calibrated TOML), else (bench all on a
  GPU) on the run's own calibration, else on the catalog entry of the device that ran it, with
  error = (estimated - measured) / measured.

This module holds the commands and their option checks; the run machinery (session, loops, output) is
cli/bench_run.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from gpuscope.cli.bench_run import (Session, _on_accelerator, fit_to_device, guarded, run_calibration, run_micro,
                                    run_workloads)
from gpuscope.errors import UserError
ENGINES = ("hf-eager", "hf-graph", "gs-graph", "gs-compile")
INFER_DTYPES = ("bf16", "fp16", "fp32")
PRECISIONS = ("amp-bf16", "amp-fp16", "bf16", "fp32")
RECOMPUTE = ("none", "full")

DB_HELP = "Results database (default: $GPUSCOPE_DB, else $XDG_DATA_HOME/gpuscope/results.sqlite)."
RESUME_HELP = "Skip what this host has already measured (same configuration) in the database."
JSON_HELP = "Print JSON (schema gpuscope.bench/1) instead of tables."
DEVICE_HELP = "cpu, cuda, cuda:N, xpu, mps (default: the first available accelerator, else cpu)."
GPU_HELP = "Hardware for the estimate beside the measurement: catalog name or a (calibrated) TOML."


def require_torch() -> None:
    import importlib.util

    try:
        missing = importlib.util.find_spec("torch") is None
    except (ImportError, ValueError):
        missing = True
    if missing:
        raise UserError("benchmarks need PyTorch, which is not installed; install the `bench` extra "
                        "(pip install 'gpuscope[bench]') with a torch build for your device.")


def check_device(device: str | None) -> str | None:
    if device is not None and not re.fullmatch(r"(cpu|cuda|xpu|mps)(:\d+)?", device.strip()):
        raise UserError(f"--device '{device}' is not one of cpu, cuda, cuda:N, xpu, xpu:N, mps.")
    return device.strip() if device else None


def _defer_stop_ok(engine: str, device: str | None) -> bool:
    """--defer-stop's checks (one sentence, exit 2): an HF generate engine on a device with events
    (measure/llm/defer_stop.problem, which the workload applies again to a case from any source)."""
    from gpuscope.measure.llm.defer_stop import problem
    from gpuscope.measure.device.device import pick_device

    try:
        kind = pick_device(device).split(":")[0]
    except RuntimeError as e:
        raise UserError(f"--device: {e}.") from None
    why = problem(engine, kind)
    if why:
        raise UserError(f"--defer-stop {why}.")
    return True


def _positive(**kw) -> None:
    for name, v in kw.items():
        if v is None or v <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be a positive integer, not {v}.")


MIN_TIME_HELP = ("Repeat each timed phase until this many seconds have passed (at least the count asked): a median "
                 "over a few seconds of a host-bound workload is not one moment of a host whose speed moves.")


def _min_time(seconds: float) -> dict:
    """The case key of --min-time (absent at 0, so that case ids stay those of earlier runs)."""
    if not (0 <= seconds <= 600):
        raise UserError(f"--min-time must be between 0 and 600 seconds, not {seconds}.")
    return {"min_time_s": seconds} if seconds else {}


def _checkpoint_options(model: str, weights: bool, device_map: str | None, max_memory: str | None) -> dict:
    """The case keys of `bench infer --weights [--device-map ...] [--max-memory ...]`, checked (one sentence, exit 2
    on bad input)."""
    if not weights:
        if device_map or max_memory:
            raise UserError("--device-map and --max-memory need --weights (a local checkpoint's own weights).")
        return {}
    d = Path(model).expanduser()
    if not d.is_dir() or not (d / "config.json").is_file():
        raise UserError(f"--weights needs --model to be a checkpoint directory holding config.json; '{model}' is not.")
    if not any(d.glob("*.safetensors")) and not any(d.glob("*.bin")):
        raise UserError(f"--weights: '{model}' holds no *.safetensors or *.bin weights.")
    out: dict = {"weights": True}
    if device_map:
        from gpuscope.measure.models.hf_model import DEVICE_MAPS

        _choice("device-map", device_map, DEVICE_MAPS)
        out["device_map"] = device_map
    if max_memory:
        if not device_map:
            raise UserError("--max-memory needs --device-map.")
        caps = {}
        for part in max_memory.split(","):
            key, sep, val = part.partition("=")
            if not sep or not key.strip() or not val.strip():
                raise UserError(f"--max-memory '{max_memory}' is not DEVICE=SIZE[,DEVICE=SIZE] "
                                "(e.g. 0=14GiB,cpu=64GiB).")
            caps[key.strip()] = val.strip()
        out["max_memory"] = caps
    return out


def _choice(name: str, value: str, allowed) -> None:
    if value not in allowed:
        raise UserError(f"--{name} '{value}' is not one of {', '.join(allowed)}.")


def _dtypes(dtype: list[str] | None):
    from gpuscope.measure.micro.matmul import MATMUL_DTYPES

    if not dtype:
        return None
    out = []
    for d in dtype:
        for x in d.split(","):
            x = x.strip().lower()
            if x:
                _choice("dtype", x, MATMUL_DTYPES)
                out.append(x)
    return out


def _load_model_spec(model: str) -> None:
    from gpuscope.specs.models import load_model

    load_model(model)  # a missing file or unknown preset is a UserError here, before any process starts


def register(app: typer.Typer) -> None:
    bench = typer.Typer(name="bench", help="Measure: microbenchmarks and LLM workloads, stored with provenance.",
                        no_args_is_help=True)

    @bench.command("micro")
    def micro(
        quick: bool = typer.Option(True, "--quick/--thorough", help="A few shapes (default) or the full sweep."),
        dtype: list[str] = typer.Option(None, "--dtype", help="Matmul dtypes (repeat or comma-separate): "
                                        "fp32, tf32, bf16, fp16, fp8, int8 (default: all)."),
        shapes: str = typer.Option(None, "--shapes", help="Matmul only, at these MxNxK shapes (comma-separated, "
                                   "e.g. 2048x2048x13312,1024x15360x4096: the public MAMF table's best)."),
        iters: int = typer.Option(None, "--iters", help="At least this many timed iterations per shape "
                                  "(mamf-finder's table: 100)."),
        warmup: int = typer.Option(None, "--warmup", help="Untimed iterations per shape first (mamf-finder: 50)."),
        db: str = typer.Option(None, "--db", help=DB_HELP),
        resume: bool = typer.Option(False, "--resume", help=RESUME_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
    ) -> None:
        """Matmul per dtype, device memory copy/read/write, host<->device copies (pinned and pageable)."""
        from gpuscope.measure.micro.matmul import parse_shapes

        require_torch()
        device = check_device(device)
        dts = _dtypes(dtype)
        if iters is not None:
            _positive(iters=iters)
        if warmup is not None and warmup < 0:
            raise UserError(f"--warmup must be 0 or more, not {warmup}.")
        try:
            shape_list = parse_shapes(shapes) if shapes is not None else None
        except ValueError as e:
            raise UserError(f"--shapes: {e}.") from None
        benches = ("matmul",) if shape_list else ("matmul", "memory", "transfer")
        s = Session(db, "bench micro", resume, as_json)
        guarded(s, lambda: run_micro(s, device, "quick" if quick else "sweep", dts, benches, shapes=shape_list,
                                     iters=iters, warmup=warmup))

    @bench.command("infer")
    def infer(
        model: str = typer.Option(..., "--model", help="Preset name, config.json, or a directory holding one."),
        batch: int = typer.Option(1, "--batch"),
        prompt: int = typer.Option(512, "--prompt", help="Prompt tokens per sequence."),
        gen: int = typer.Option(128, "--gen", help="Generated tokens per sequence (EOS disabled)."),
        dtype: str = typer.Option("bf16", "--dtype", help="bf16|fp16|fp32."),
        engine: str = typer.Option("hf-eager", "--engine", help="hf-eager | hf-graph (static cache, compiled) | "
                                   "gs-graph (static cache, one CUDA graph per step) | gs-compile (gs-graph with the "
                                   "step compiled by torch.compile first)."),
        repeats: int = typer.Option(3, "--repeats", help="Timed generate calls (median)."),
        min_time: float = typer.Option(0.0, "--min-time", help=MIN_TIME_HELP),
        attn: str = typer.Option("sdpa", "--attn", help="sdpa (transformers' default) | eager | gs-gqa (gpuscope's "
                                 "GQA-folding SDPA: no per-head K/V copy under a mask; slower than sdpa under "
                                 "gs-compile on an H200)."),
        fuse_proj: bool = typer.Option(False, "--fuse-proj", help="One GEMM for q|k|v and one for gate|up "
                                       "(Llama, Mistral, Qwen2; as gpt-fast and vLLM load them)."),
        defer_stop: bool = typer.Option(False, "--defer-stop", help="HF engines on cuda/xpu/mps: generate reads its "
                                        "stop flag one token late (transformers' DeferredStopCheck, which it enables "
                                        "on MPS only) instead of waiting for the GPU every token."),
        gc_freeze: bool = typer.Option(False, "--gc-freeze", help="gc.collect(); gc.freeze() after warm-up: Python's "
                                       "collector no longer walks the model's and a compile's objects (as vLLM does "
                                       "after capture). Every run reports its GC pauses (gc_pause_s_per_token)."),
        weights: bool = typer.Option(False, "--weights", help="Load the checkpoint's own weights (--model DIR holding "
                                     "config.json and safetensors) with from_pretrained, instead of random weights."),
        device_map: str = typer.Option(None, "--device-map", help="With --weights: auto | balanced | "
                                       "balanced_low_0 | sequential (accelerate: layers over the GPUs, then CPU "
                                       "memory, then disk)."),
        max_memory: str = typer.Option(None, "--max-memory", help="With --device-map: per-device caps, e.g. "
                                       "'0=14GiB,cpu=64GiB' (offload what does not fit)."),
        gpu: str = typer.Option(None, "--gpu", help=GPU_HELP),
        timeout: float = typer.Option(600, "--timeout", help="Seconds before the case is stopped."),
        db: str = typer.Option(None, "--db", help=DB_HELP),
        resume: bool = typer.Option(False, "--resume", help=RESUME_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
    ) -> None:
        """LLM inference (random weights, or a local checkpoint's with --weights): TTFT, TPOT, tokens/s, peak
        memory; estimate beside it."""
        from gpuscope.measure.cases import infer_case

        require_torch()
        _positive(batch=batch, prompt=prompt, gen=gen, repeats=repeats)
        _choice("dtype", dtype, INFER_DTYPES)
        _choice("engine", engine, ENGINES)
        device = check_device(device)
        _load_model_spec(model)
        extra = {"engine": engine} if engine != "hf-eager" else {}
        if device:
            extra["device"] = device
        _choice("attn", attn, ("sdpa", "eager", "gs-gqa"))
        if attn != "sdpa":
            extra["attn"] = attn
        if fuse_proj:
            if device_map:
                raise UserError("--fuse-proj cannot be combined with --device-map: accelerate's offload hooks hold "
                                "the separate q/k/v and gate/up weights it would replace.")
            extra["fuse_proj"] = True
        if defer_stop:
            extra["defer_stop"] = _defer_stop_ok(engine, device)
        if gc_freeze:
            extra["gc_freeze"] = True
        extra.update(_checkpoint_options(model, weights, device_map, max_memory))
        if weights:  # from_pretrained reads the directory itself
            model = str(Path(model).expanduser().resolve())
        else:
            from gpuscope.cli.tune import case_model

            model, inline = case_model(model)
            extra.update(inline)
        extra.update(_min_time(min_time))
        case = infer_case(model, batch, prompt, gen, dtype=dtype, repeats=repeats, **extra)
        s = Session(db, "bench infer", resume, as_json)
        guarded(s, lambda: run_workloads(s, [case], gpu, timeout))

    @bench.command("train")
    def train(
        model: str = typer.Option(..., "--model", help="Preset name, config.json, or a directory holding one."),
        micro_batch: int = typer.Option(1, "--micro-batch"),
        seq: int = typer.Option(2048, "--seq"),
        precision: str = typer.Option("amp-bf16", "--precision", help="amp-bf16|amp-fp16|bf16|fp32."),
        recompute: str = typer.Option("none", "--recompute", help="none|full."),
        grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches (forward + backward) per optimizer "
                                       "step."),
        steps: int = typer.Option(6, "--steps", help="Timed optimizer steps (median)."),
        min_time: float = typer.Option(0.0, "--min-time", help=MIN_TIME_HELP),
        warmup: int = typer.Option(2, "--warmup", help="Untimed steps first."),
        gpu: str = typer.Option(None, "--gpu", help=GPU_HELP),
        timeout: float = typer.Option(600, "--timeout", help="Seconds before the case is stopped."),
        db: str = typer.Option(None, "--db", help=DB_HELP),
        resume: bool = typer.Option(False, "--resume", help=RESUME_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
    ) -> None:
        """LLM training step (random weights, AdamW): step time, tokens/s, memory per phase; estimate beside it."""
        from gpuscope.measure.cases import train_case

        require_torch()
        _positive(micro_batch=micro_batch, seq=seq, steps=steps, warmup=warmup + 1, grad_accum=grad_accum)
        _choice("precision", precision, PRECISIONS)
        _choice("recompute", recompute, RECOMPUTE)
        device = check_device(device)
        _load_model_spec(model)
        extra = {"device": device} if device else {}
        if grad_accum > 1:  # only then in the case (ids of earlier single-micro-batch cases stay the same)
            extra["grad_accum"] = grad_accum
        from gpuscope.cli.tune import case_model

        model, inline = case_model(model)
        extra.update(inline)
        extra.update(_min_time(min_time))
        case = train_case(model, micro_batch, seq, precision, recompute, steps=steps, warmup=warmup, **extra)
        s = Session(db, "bench train", resume, as_json)
        guarded(s, lambda: run_workloads(s, [case], gpu, timeout))

    @bench.command("all")
    def all_cmd(
        quick: bool = typer.Option(True, "--quick/--thorough",
                                   help="Quick micro set + the quick workloads (default), or the sweep + --cases."),
        cases: str = typer.Option(None, "--cases", help="Workload set: smoke, gpu, h200, h200-b (default with "
                                  "--quick: gpu on an accelerator, smoke on a CPU; h200 with --thorough)."),
        gpu: str = typer.Option(None, "--gpu", help=GPU_HELP + " Given, the workloads are planned on it instead of "
                                "this run's own calibration."),
        calibrate: Optional[bool] = typer.Option(None, "--calibrate/--catalog", help="Plan the workloads on this "
                                                 "run's own calibration (its micro ceilings and, with --host, this "
                                                 "host's costs, written as a hardware TOML beside the results "
                                                 "database), or on the catalog entry. Default: calibrate on a GPU "
                                                 "(the planner models accelerators, not a CPU as the device)."),
        host: bool = typer.Option(True, "--host/--no-host", help="With --calibrate: also measure this host's costs "
                                  "per kernel (as `hardware calibrate --host`: three passes, tens of seconds)."),
        timeout: float = typer.Option(600, "--timeout", help="Seconds before one case is stopped."),
        db: str = typer.Option(None, "--db", help=DB_HELP),
        resume: bool = typer.Option(False, "--resume", help=RESUME_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        device: str = typer.Option(None, "--device", help=DEVICE_HELP),
    ) -> None:
        """Every microbenchmark, then a set of inference and training workloads, each planned beside it on this run's
        own calibration (default) or the catalog."""
        from gpuscope.measure.cases import CASE_SETS

        require_torch()
        device = check_device(device)
        accel = _on_accelerator(device)
        name = cases or (("gpu" if accel else "smoke") if quick else "h200")
        _choice("cases", name, tuple(CASE_SETS))
        if name == "gpu" and not accel:
            raise UserError("--cases gpu: the GPU-sized set needs an accelerator (this run's device is the CPU); use "
                            "--cases smoke.")
        work = [dict(c, device=device) if device else c for c in CASE_SETS[name]()]
        s = Session(db, "bench all", resume, as_json)

        def go():
            nonlocal work
            results = run_micro(s, device, "quick" if quick else "sweep", None)
            target = gpu
            if gpu is None and (calibrate or (calibrate is None and accel)):
                target = run_calibration(s, device, results, host, "quick" if quick else "sweep")
            if name == "gpu":
                work = fit_to_device(s, work, target, device)
            s.note(f"workloads: the {name} set, {len(work)} cases" + (
                " (GPU-sized; --cases smoke: the tiny host-bound models)" if name == "gpu" else ""))
            run_workloads(s, work, target, timeout)

        guarded(s, go)

    try:  # distributed benchmarks (collectives, DDP/FSDP training, gradient compression) live in their own modules
        from gpuscope.cli.bench_dist import register_distributed
    except ModuleNotFoundError as exc:
        if exc.name != "gpuscope.cli.bench_dist":
            raise
    else:
        register_distributed(bench)
    app.add_typer(bench)
