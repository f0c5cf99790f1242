"""The forms of `gpuscope ui`: each is one gpuscope command (plan infer|train, compare infer|train, advise
infer|train) and its fields are that command's options. A submitted form becomes the command's argument list
(``argv``): the page asks, the command (the library behind it) checks the values and does the work, so the page
shows exactly what `gpuscope ... --json` prints for the same inputs, and the same one sentence for bad input.

Choices come from specs/axes.py where an axis defines them; a field left empty is an option not given (the
command's default)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.errors import UserError
from gpuscope.specs.axes import Optimizer, PlannerEngine, Precision, Recompute

WEIGHT_DTYPES = ("bf16", "fp16", "fp32", "fp8", "int8", "int4")  # estimate/dtypes.WEIGHT_DTYPES


@dataclass(frozen=True)
class Field:
    """One option: its flag, the label shown, its default (as the form shows it), and its choices (a select) or
    ``check`` (a checkbox: the flag given when ticked)."""

    flag: str
    label: str
    default: str = ""
    choices: tuple[str, ...] = ()
    check: bool = False
    number: bool = False

    @property
    def name(self) -> str:
        return self.flag.lstrip("-")


@dataclass(frozen=True)
class Form:
    id: str
    title: str
    command: tuple[str, ...]
    fields: tuple[Field, ...] = field(default_factory=tuple)


def _n(flag: str, label: str, default: str = "") -> Field:
    return Field(flag, label, default, number=True)


MODEL = Field("--model", "model (preset or config.json path)", "llama-3.1-8b")
INFER = (_n("--batch", "batch", "1"), _n("--prompt", "prompt tokens", "512"), _n("--gen", "generated tokens", "128"))
TRAIN = (_n("--micro-batch", "micro-batch", "1"), _n("--seq", "sequence", "2048"),
         Field("--precision", "precision", "amp-bf16", Precision.values()))
COMPARE_GPUS = Field("--gpu", "GPUs (comma-separated)", "h200,h100,a100-80gb,l40s,rtx-4090")
OBJECTIVE = (Field("--objective", "objective", "cost", ("cost", "speed", "efficiency")),
             Field("--pricing", "pricing", "own", ("own", "cloud")))

FORMS: tuple[Form, ...] = (
    Form("plan-infer", "Plan inference", ("plan", "infer"), (
        MODEL, Field("--gpu", "GPU", "h200"), *INFER, Field("--dtype", "weights dtype", "bf16", WEIGHT_DTYPES),
        Field("--kv-dtype", "KV-cache dtype", "", ("",) + WEIGHT_DTYPES[:5]),
        Field("--engine", "engine", "eager", PlannerEngine.values()), _n("--num-gpus", "GPUs", "1"),
        _n("--tp", "tensor parallel", "1"), Field("--ops", "per-operation breakdown", "1", check=True))),
    Form("plan-train", "Plan training", ("plan", "train"), (
        Field("--model", MODEL.label, "llama-3.2-1b"), Field("--gpu", "GPU", "h200"), *TRAIN,
        Field("--optimizer", "optimizer", "adamw", Optimizer.values()),
        Field("--recompute", "recompute", "none", Recompute.values()), _n("--grad-accum", "gradient accumulation", "1"),
        _n("--num-gpus", "GPUs", "1"), _n("--tp", "tensor parallel", "1"), _n("--pp", "pipeline parallel", "1"),
        Field("--zero", "ZeRO stage", "0", ("0", "1", "2", "3")), Field("--fsdp", "FSDP full shard", check=True),
        _n("--lora-r", "LoRA rank (empty: full training)"),
        Field("--ops", "per-operation breakdown", "1", check=True))),
    Form("plan-serve", "Plan serving", ("plan", "serve"), (
        MODEL, Field("--gpu", "GPU", "h200"), _n("--requests", "requests", "200"),
        _n("--prompt", "prompt tokens", "512"),
        _n("--gen", "generated tokens", "128"), _n("--rate", "rate (requests/s; empty: offline)"),
        _n("--concurrency", "concurrency (clients)"), Field("--engine", "engine", "transformers",
                                                             ("transformers", "vllm", "trtllm")),
        _n("--tp", "tensor parallel", "1"), Field("--curve", "latency-throughput curve", "1", check=True))),
    Form("compare-infer", "Compare hardware: inference", ("compare", "infer"), (
        MODEL, COMPARE_GPUS, *INFER, Field("--dtype", "dtype", "auto", ("auto",) + WEIGHT_DTYPES),
        Field("--engine", "engine", "graph", ("graph", "hf-graph", "eager")))),
    Form("compare-train", "Compare hardware: training", ("compare", "train"), (
        Field("--model", MODEL.label, "llama-3.2-1b"), COMPARE_GPUS, *TRAIN,
        Field("--tokens", "token budget", "1e9", number=True))),
    Form("advise-infer", "Advise hardware: inference", ("advise", "infer"), (
        MODEL, Field("--gpu", "candidates (empty: the catalog)"), *INFER, *OBJECTIVE,
        _n("--budget", "budget (USD)"), _n("--max-ttft-ms", "max TTFT (ms)"), _n("--max-tpot-ms", "max TPOT (ms)"))),
    Form("advise-train", "Advise hardware: training", ("advise", "train"), (
        Field("--model", MODEL.label, "llama-3.2-1b"), Field("--gpu", "candidates (empty: the catalog)"), *TRAIN,
        *OBJECTIVE, _n("--budget", "budget per card (USD)"))),
)
BY_ID = {f.id: f for f in FORMS}
MAX_VALUE = 4096  # characters of one value (a config path is the longest)


def to_argv(form_id: str, values: dict) -> list[str]:
    """The command line of a submitted form (without the program and --json): ``--flag=value`` for each field
    given (so a value that starts with '-' stays a value), the flag alone for a ticked box."""
    form = BY_ID.get(form_id)
    if form is None:
        raise UserError(f"unknown form '{form_id}'; the page offers {', '.join(BY_ID)}.")
    if not isinstance(values, dict):
        raise UserError("a form's values must be a JSON object.")
    argv = list(form.command)
    for f in form.fields:
        v = values.get(f.name)
        if f.check:
            if v in (True, "1", "on", "true"):
                argv.append(f.flag)
            continue
        v = "" if v is None else str(v).strip()
        if len(v) > MAX_VALUE or "\x00" in v:
            raise UserError(f"{f.flag}: the value is too long or holds a NUL character.")
        if v:
            argv.append(f"{f.flag}={v}")
    return argv
