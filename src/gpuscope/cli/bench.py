"""`gpuscope bench micro|infer|train|all` (and, from their own modules, collectives, train-dist, compression):
measure, store every result (SQLite), print the planner's estimate beside it.

- micro runs in this process (torch imported lazily); infer/train cases run each in their own subprocess while
  this process samples NVML (pipeline/bench.py).
- Every finished measurement is committed at once; Ctrl-C keeps them (exit 130); ``--resume`` skips keys already
  measured on this host with a final status (ok, oom, unsupported). Some cases failed: exit 1.
- Workloads: the estimate for the same case on ``--gpu`` (catalog name or a calibrated TOML), else (bench all on a
  GPU) on the run's own calibration, else on the catalog entry of the device that ran it, with
  error = (estimated - measured) / measured.

Each command checks its options, builds its cases (workloads/ validates them) and hands them to pipeline/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpuscope.cli import bench_cpu, options
from gpuscope.cli.bench_run import Session, bench_gpu, guarded, json_out, timeout
from gpuscope.errors import UserError
from gpuscope.report.html.option import html_option
from gpuscope.specs.axes import MEASURED_RECOMPUTE, TRAIN_PRECISIONS, Attention, Engine, Precision

bench = typer.Typer(name="bench", help="Measure: microbenchmarks and LLM workloads, stored with provenance.",
                    no_args_is_help=True)

HELP = {
    "min_time": "Repeat each timed phase until this many seconds have passed (at least the count asked): a median "
                "over a few seconds of a host-bound workload is not one moment of a host whose speed moves.",
    "engine": "hf-eager | hf-graph (static cache, compiled) | gs-graph (static cache, one CUDA graph per step) | "
              "gs-compile (gs-graph with the step compiled by torch.compile first).",
    "attn": "sdpa (transformers' default) | eager | gs-gqa (gpuscope's GQA-folding SDPA: no per-head K/V copy under "
            "a mask; slower than sdpa under gs-compile on an H200).",
    "fuse_proj": "One GEMM for q|k|v and one for gate|up (Llama, Mistral, Qwen2; as gpt-fast and vLLM load them).",
    "defer_stop": "HF engines on cuda/xpu/mps: generate reads its stop flag one token late (transformers' "
                  "DeferredStopCheck, which it enables on MPS only) instead of waiting for the GPU every token.",
    "gc_freeze": "gc.collect(); gc.freeze() after warm-up: Python's collector no longer walks the model's and a "
                 "compile's objects (as vLLM does after capture). Every run reports its GC pauses "
                 "(gc_pause_s_per_token).",
    "weights": "Load the checkpoint's own weights (--model DIR holding config.json and safetensors) with "
               "from_pretrained, instead of random weights.",
    "device_map": "With --weights: auto | balanced | balanced_low_0 | sequential (accelerate: layers over the GPUs, "
                  "then CPU memory, then disk).",
    "max_memory": "With --device-map: per-device caps, e.g. '0=14GiB,cpu=64GiB' (offload what does not fit).",
    "cases": "Workload set: smoke, gpu, single-gpu, families (default with --quick: gpu on an accelerator, smoke on "
             "a CPU; single-gpu with --thorough).",
    "calibrate": "Plan the workloads on this run's own calibration (its micro ceilings and, with --host, this host's "
                 "costs, written as a hardware TOML beside the results database), or on the catalog entry. "
                 "Default: calibrate on a GPU (the planner models accelerators, not a CPU as the device).",
    "host": "With --calibrate: also measure this host's costs per kernel (as `hardware calibrate --host`: three "
            "passes, tens of seconds).",
}


def _dtypes(dtype: list[str] | None):
    from gpuscope.measure.micro.matmul import MATMUL_DTYPES

    return [x for d in dtype for x in options.choices("dtype", d, MATMUL_DTYPES)] if dtype else None


def defer_stop_ok(engine: str, device: str | None) -> bool:
    """--defer-stop's checks (one sentence, exit 2): an HF generate engine on a device with events
    (measure/llm/defer_stop.problem, which the workload applies again to a case from any source)."""
    from gpuscope.measure.llm.defer_stop import problem

    why = problem(engine, options.pick_device(device).split(":")[0])
    if why:
        raise UserError(f"--defer-stop {why}.")
    return True


def _max_memory(text: str) -> dict:
    caps = {}
    for part in text.split(","):
        key, sep, val = part.partition("=")
        if not sep or not key.strip() or not val.strip():
            raise UserError(f"--max-memory '{text}' is not DEVICE=SIZE[,DEVICE=SIZE] (e.g. 0=14GiB,cpu=64GiB).")
        caps[key.strip()] = val.strip()
    return caps


def _checkpoint(model: str, weights: bool, device_map: str | None, max_memory: str | None) -> tuple[str, dict]:
    """(the case's model, its checkpoint keys) of `bench infer --weights [--device-map ...] [--max-memory ...]`;
    the directory is checked here, the keys' relations by the case (workloads/infer.py)."""
    keys: dict = {k: v for k, v in (("device_map", device_map),
                                    ("max_memory", _max_memory(max_memory) if max_memory else None)) if v}
    if not weights:
        return model, keys
    d = Path(model).expanduser()
    if not d.is_dir() or not (d / "config.json").is_file():
        raise UserError(f"--weights needs --model to be a checkpoint directory holding config.json; '{model}' is not.")
    if not any(d.glob("*.safetensors")) and not any(d.glob("*.bin")):
        raise UserError(f"--weights: '{model}' holds no *.safetensors or *.bin weights.")
    return str(d.resolve()), {"weights": True, **keys}  # from_pretrained reads the directory itself


def _run_one(case: dict, db, resume, as_json, gpu, timeout_s, command: str, html: str | None = None,
             phase_budget_s: float | None = None) -> None:
    from gpuscope.pipeline.bench import run_workloads

    options.known_gpu(gpu)  # an unknown --gpu is said before the case runs, not beside its result
    s = Session(db, command, resume, as_json)
    guarded(s, lambda: run_workloads(s, [case], gpu, timeout_s, phase_budget_s), html=html)


@bench.command("micro")
def micro(
    quick: bool = typer.Option(True, "--quick/--thorough", help="A few shapes (default) or the full sweep."),
    dtype: list[str] = typer.Option(None, "--dtype", help="Matmul dtypes (repeat or comma-separate): "
                                    "fp32, tf32, bf16, fp16, fp8, int8 (default: all; fp32 on a CPU)."),
    shapes: str = typer.Option(None, "--shapes", help="Matmul only, at these MxNxK shapes (comma-separated, "
                               "e.g. 2048x2048x13312,1024x15360x4096: the public MAMF table's best)."),
    iters: int = typer.Option(None, "--iters", help="At least this many timed iterations per shape "
                              "(mamf-finder's table: 100)."),
    warmup: int = typer.Option(None, "--warmup", help="Untimed iterations per shape first (mamf-finder: 50)."),
    db: str = options.db(), resume: bool = options.resume(), as_json: bool = json_out(),
    device: str = options.device(),
) -> None:
    """Matmul per dtype, device memory copy/read/write, host<->device copies (pinned and pageable)."""
    options.require_torch()  # before the matmul module, which imports torch
    from gpuscope.measure.micro.matmul import parse_shapes
    from gpuscope.pipeline.micro import run_micro

    device = options.device_exists(device)
    given, note = bench_cpu.defaults("bench micro", device, micro_dtype=_dtypes(dtype))
    dts = given["micro_dtype"]
    if iters is not None:
        options.positive(iters=iters)
    options.non_negative(warmup=warmup)
    try:
        shape_list = parse_shapes(shapes) if shapes is not None else None
    except ValueError as e:
        raise UserError(f"--shapes: {e}.") from None
    benches = ("matmul",) if shape_list else ("matmul", "memory", "transfer")
    bench_cpu.say(note)
    s = Session(db, "bench micro", resume, as_json)
    guarded(s, lambda: run_micro(s, device, "quick" if quick else "sweep", dts, benches, shapes=shape_list,
                                 iters=iters, warmup=warmup))


def _infer_keys(engine, attn, fuse_proj, defer_stop, gc_freeze, device, min_time) -> dict:
    """The optional keys of an infer case, each only when it is not the default (so keys stay those stored)."""
    keys = {"engine": engine if engine != Engine.HF_EAGER else None, "device": device,
            "attn": attn if attn != Attention.SDPA else None, "fuse_proj": fuse_proj or None,
            "defer_stop": defer_stop_ok(engine, device) if defer_stop else None, "gc_freeze": gc_freeze or None,
            "min_time_s": min_time or None}
    return {k: v for k, v in keys.items() if v is not None}


@bench.command("infer")
def infer(
    model: str = options.model(),
    batch: int = typer.Option(1, "--batch"),
    prompt: int = typer.Option(None, "--prompt", help=f"Prompt tokens per sequence ({bench_cpu.help_for('prompt')})."),
    gen: int = typer.Option(None, "--gen", help="Generated tokens per sequence (EOS disabled; "
                            f"{bench_cpu.help_for('gen')})."),
    dtype: str = options.dtype(None, help=f"bf16|fp16|fp32 ({bench_cpu.help_for('dtype')})."),
    engine: str = options.axis_option(Engine, Engine.HF_EAGER, "engine", help=HELP["engine"]),
    repeats: int = typer.Option(3, "--repeats", help="Timed generate calls (median)."),
    min_time: float = typer.Option(0.0, "--min-time", help=HELP["min_time"]),
    attn: str = options.axis_option(Attention, Attention.SDPA, "attn", help=HELP["attn"]),
    fuse_proj: bool = typer.Option(False, "--fuse-proj", help=HELP["fuse_proj"]),
    defer_stop: bool = typer.Option(False, "--defer-stop", help=HELP["defer_stop"]),
    gc_freeze: bool = typer.Option(False, "--gc-freeze", help=HELP["gc_freeze"]),
    weights: bool = typer.Option(False, "--weights", help=HELP["weights"]),
    device_map: str = typer.Option(None, "--device-map", help=HELP["device_map"]),
    max_memory: str = typer.Option(None, "--max-memory", help=HELP["max_memory"]),
    gpu: str = bench_gpu(), timeout_s: float = timeout(),
    db: str = options.db(), resume: bool = options.resume(), as_json: bool = json_out(),
    device: str = options.device(),
    html: str = html_option(),
) -> None:
    """LLM inference (random weights, or a local checkpoint's with --weights): TTFT, TPOT, tokens/s, peak
    memory; estimate beside it."""
    from gpuscope.workloads.sets import infer_case

    options.require_torch()
    device = options.device_exists(device)
    engine = options.axis(Engine, engine, "engine")
    extra = _infer_keys(engine, attn, fuse_proj, defer_stop, gc_freeze, device, min_time)
    given, note = bench_cpu.defaults("bench infer", device, prompt=prompt, gen=gen, dtype=dtype)
    extra.update(bench_cpu.case_keys("infer", device))
    model, ckpt = _checkpoint(model, weights, device_map, max_memory)
    if not weights:
        model, inline = options.case_model(model)
        extra.update(inline)
    case = infer_case(model, batch, **given, repeats=repeats, **ckpt, **extra)
    bench_cpu.ready(case, device, note, gpu)
    _run_one(case, db, resume, as_json, gpu, timeout_s, "bench infer", html, bench_cpu.phase_budget(device))


@bench.command("train")
def train(
    model: str = options.model(),
    micro_batch: int = typer.Option(1, "--micro-batch"),
    seq: int = typer.Option(None, "--seq", help=f"Tokens per sequence ({bench_cpu.help_for('seq')})."),
    precision: str = options.precision(None, among=TRAIN_PRECISIONS,
                                       help=f"{options.choice_help(Precision, TRAIN_PRECISIONS)} "
                                       f"({bench_cpu.help_for('precision')})."),
    recompute: str = options.recompute(among=MEASURED_RECOMPUTE),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches (forward + backward) per optimizer step."),
    steps: int = typer.Option(None, "--steps", help=f"Timed optimizer steps (median; {bench_cpu.help_for('steps')})."),
    min_time: float = typer.Option(0.0, "--min-time", help=HELP["min_time"]),
    warmup: int = typer.Option(None, "--warmup", help=f"Untimed steps first ({bench_cpu.help_for('warmup')})."),
    gpu: str = bench_gpu(), timeout_s: float = timeout(),
    db: str = options.db(), resume: bool = options.resume(), as_json: bool = json_out(),
    device: str = options.device(),
    html: str = html_option(),
    lora_r: int = typer.Option(None, "--lora-r", help="LoRA (peft) on the frozen base: the adapters' rank."),
    lora_alpha: float = typer.Option(None, "--lora-alpha", help="LoRA alpha (default: the rank)."),
    lora_targets: str = typer.Option(None, "--lora-targets", help="all-linear (default) or module names."),
    lora_dropout: float = typer.Option(None, "--lora-dropout", help="Dropout on the adapters' input."),
    qlora: bool = typer.Option(False, "--qlora", help="QLoRA: the base's Linear layers in bitsandbytes NF4."),
) -> None:
    """LLM training step (random weights, AdamW): step time, tokens/s, memory per phase; estimate beside it.
    With --lora-r: LoRA fine-tuning through peft (base frozen in the compute dtype, fp32 adapters)."""
    from gpuscope.workloads.sets import train_case

    options.require_torch()
    device = options.device_exists(device)
    given, note = bench_cpu.defaults("bench train", device, seq=seq, precision=precision, steps=steps, warmup=warmup)
    model, inline = options.case_model(model)
    keys = {"device": device, "grad_accum": grad_accum if grad_accum != 1 else None, "min_time_s": min_time or None,
            "lora_r": lora_r, "lora_alpha": lora_alpha, "lora_targets": lora_targets, "lora_dropout": lora_dropout,
            "qlora": qlora or None}
    extra = {k: v for k, v in keys.items() if v is not None}  # only when set: ids of earlier cases stay the same
    case = train_case(model, micro_batch, given["seq"], given["precision"], recompute, steps=given["steps"],
                      warmup=given["warmup"], **inline, **extra)
    bench_cpu.ready(case, device, note, gpu)
    _run_one(case, db, resume, as_json, gpu, timeout_s, "bench train", html, bench_cpu.phase_budget(device))


def _on_accelerator(device: str | None) -> bool:
    return options.pick_device(device).split(":")[0] != "cpu"


def _workload_set(cases: str | None, quick: bool, accel: bool) -> str:
    from gpuscope.workloads.sets import CASE_SETS

    name = options.choice("cases", cases or (("gpu" if accel else "smoke") if quick else "single-gpu"),
                          tuple(CASE_SETS))
    if name == "gpu" and not accel:
        raise UserError("--cases gpu: the GPU-sized set needs an accelerator (this run's device is the CPU); use "
                        "--cases smoke.")
    return name


@bench.command("all")
def all_cmd(
    quick: bool = typer.Option(True, "--quick/--thorough",
                               help="Quick micro set + the quick workloads (default), or the sweep + --cases."),
    cases: str = typer.Option(None, "--cases", help=HELP["cases"]),
    gpu: str = bench_gpu(" Given, the workloads are planned on it instead of this run's own calibration."),
    calibrate: Optional[bool] = typer.Option(None, "--calibrate/--catalog", help=HELP["calibrate"]),
    host: bool = typer.Option(True, "--host/--no-host", help=HELP["host"]),
    timeout_s: float = timeout(help="Seconds before one case is stopped."),
    db: str = options.db(), resume: bool = options.resume(), as_json: bool = json_out(),
    device: str = options.device(),
    html: str = html_option(),
) -> None:
    """Every microbenchmark, then a set of inference and training workloads, each planned beside it on this run's
    own calibration (default) or the catalog."""
    from gpuscope.pipeline.bench import bench_all
    from gpuscope.workloads.sets import CASE_SETS

    options.require_torch()
    device = options.device_exists(device)
    accel = _on_accelerator(device)
    name = _workload_set(cases, quick, accel)
    options.known_gpu(gpu)
    work = [dict(c, device=device) if device else c for c in CASE_SETS[name]()]
    s = Session(db, "bench all", resume, as_json)
    guarded(s, lambda: bench_all(s, work, device, "quick" if quick else "sweep", gpu,
                                 calibrate or (calibrate is None and accel), host, timeout_s, name == "gpu", name),
            html=html)


def register(app: typer.Typer) -> None:
    from gpuscope.cli.bench_dist import register_collectives
    from gpuscope.cli.bench_dist_train import register_dist_train

    if not any(c.name == "collectives" for c in bench.registered_commands):
        register_collectives(bench)
        register_dist_train(bench)
        __import__("gpuscope.cli.bench_serve", fromlist=["register_serve"]).register_serve(bench)
        __import__("gpuscope.cli.bench_diffusion", fromlist=["register_diffusion"]).register_diffusion(bench)
    app.add_typer(bench)
