"""The options and checks every command shares: one definition of each flag's name, default and help, and of each
check's sentence (a bad value is one sentence naming the flag, exit 2: gpuscope.errors.UserError).

Options are factories, so that a command can change a default or a help without restating the rest::

    def infer(model: str = options.model(), db: str = options.db(), as_json: bool = options.json_out(SCHEMA)):

Checks raise UserError; none imports torch (``require_torch`` only looks for it).
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from gpuscope.errors import UserError

MODEL_HELP = "Preset name, config.json, or a directory holding one."
CONFIG_HELP = "A Hugging Face config.json to build the model from (instead of --model)."
GPU_HELP = "Catalog name or alias, or a hardware TOML."
BENCH_GPU_HELP = "Hardware for the estimate beside the measurement: catalog name or a (calibrated) TOML."
DB_HELP = "Results database (default: $GPUSCOPE_DB, else $XDG_DATA_HOME/gpuscope/results.sqlite)."
RESUME_HELP = "Skip what this host has already measured (same configuration) in the database."
DEVICE_HELP = "cpu, cuda, cuda:N, xpu, mps (default: the first available accelerator, else cpu)."
CALIBRATED_HELP = "Use the ceilings `gpuscope hardware calibrate --save` measured for this GPU."
MARKDOWN_HELP = "Print Markdown."


def model(required: bool = True, help: str = MODEL_HELP):
    """--model: a preset name, a config.json or a directory holding one."""
    return typer.Option(... if required else None, "--model", help=help)


def config(help: str = CONFIG_HELP):
    return typer.Option(None, "--config", help=help)


def gpu(required: bool = True, help: str = GPU_HELP):
    return typer.Option(... if required else None, "--gpu", help=help)


def db(help: str = DB_HELP):
    return typer.Option(None, "--db", help=help)


def resume(help: str = RESUME_HELP):
    return typer.Option(False, "--resume", help=help)


def json_out(schema: str | None = None, help: str | None = None):
    """--json; the help names the schema printed."""
    return typer.Option(False, "--json", help=help or (f"Print JSON (schema {schema})." if schema else
                                                       "Print JSON."))


def markdown(help: str = MARKDOWN_HELP):
    return typer.Option(False, "--markdown", help=help)


def device(help: str = DEVICE_HELP):
    return typer.Option(None, "--device", help=help)


def calibrated(help: str = CALIBRATED_HELP):
    return typer.Option(False, "--calibrated", help=help)


def choice_help(axis, among=None, sep: str = "|") -> str:
    """The allowed values of an axis (specs/axes.py) as a help: ``bf16|fp16|fp32``."""
    return sep.join(axis.values(among))


def axis_option(axis, default, flag: str, among=None, help: str | None = None):
    """An option whose values are an axis's (its help lists them, unless given)."""
    return typer.Option(str(default) if default is not None else None, f"--{flag}",
                        help=help or choice_help(axis, among))


def dtype(default: str = "bf16", help: str | None = None, among=None):
    from gpuscope.specs.axes import InferDtype

    return axis_option(InferDtype, default, "dtype", among=among, help=help)


def precision(default: str = "amp-bf16", among=None, help: str | None = None):
    from gpuscope.specs.axes import Precision

    return axis_option(Precision, default, "precision", among=among, help=help)


def recompute(default: str = "none", among=None, help: str | None = None):
    from gpuscope.specs.axes import Recompute

    return axis_option(Recompute, default, "recompute", among=among, help=help)


def optimizer(default: str = "adamw", help: str | None = None):
    from gpuscope.specs.axes import Optimizer

    return axis_option(Optimizer, default, "optimizer", help=help)


def offload(default: str = "none", help: str | None = None):
    from gpuscope.specs.axes import Offload

    return axis_option(Offload, default, "offload", help=help)


# ---- checks -------------------------------------------------------------------------------------------------------

def positive(**values) -> None:
    """Each keyword (the flag's name, ``_`` for ``-``) must be positive and finite: a count a positive integer
    below 2**31 (specs/numbers.py says why), a float a finite number above 0."""
    import math

    from gpuscope.specs.numbers import MAX_COUNT

    for name, v in values.items():
        flag = f"--{name.replace('_', '-')}"
        if isinstance(v, float):
            if not (math.isfinite(v) and v > 0):
                raise UserError(f"{flag} must be positive and finite, not {v}.")
        elif v is None or v <= 0:
            raise UserError(f"{flag} must be a positive integer, not {v}.")
        elif v > MAX_COUNT:
            raise UserError(f"{flag} must be a positive integer at most {MAX_COUNT:,}, not {v}.")


def non_negative(**values) -> None:
    """Each keyword must be 0 or more (and finite)."""
    import math

    from gpuscope.specs.numbers import MAX_COUNT

    for name, v in values.items():
        bad = v is not None and (v < 0 or (isinstance(v, float) and not math.isfinite(v)) or
                                 (isinstance(v, int) and v > MAX_COUNT))
        if bad:
            raise UserError(f"--{name.replace('_', '-')} must be 0 or more, finite and at most {MAX_COUNT:,}, "
                            f"not {v}.")


def choice(name: str, value: str, allowed) -> str:
    """``value`` must be one of ``allowed`` (a plain list of strings)."""
    if value not in allowed:
        raise UserError(f"--{name} '{value}' is not one of {', '.join(allowed)}.")
    return value


def axis(axis_cls, value, flag: str, among=None):
    """The member of an axis (specs/axes.py) named by ``value``; ``among`` narrows what is allowed."""
    return axis_cls.parse(value, flag=flag, among=among)


def choices(name: str, value: str, allowed) -> list[str]:
    """A comma-separated list, each item one of ``allowed`` (lower-cased, blanks dropped)."""
    out = [x.strip().lower() for x in value.split(",") if x.strip()]
    for x in out:
        if x not in allowed:
            raise UserError(f"--{name}: '{x}' is not one of {', '.join(allowed)}.")
    return out


DEVICE_RE = re.compile(r"(cpu|cuda|xpu|mps)(:\d+)?")


def check_device(device: str | None) -> str | None:
    """A device string's shape (whether the device exists is for ``pick_device``)."""
    if device is not None and not DEVICE_RE.fullmatch(device.strip()):
        raise UserError(f"--device '{device}' is not one of cpu, cuda, cuda:N, xpu, xpu:N, mps.")
    return device.strip() if device else None


def has_torch() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def require_torch(what: str = "this command") -> None:
    """One sentence (exit 2) where a measuring command finds no PyTorch; planner-only paths never call it."""
    if not has_torch():
        raise UserError(f"{what} needs PyTorch, which is not installed; install the `bench` extra "
                        "(pip install 'gpuscope[bench]') with a torch build for your device.")


def pick_device(device: str | None) -> str:
    """The device a measurement runs on (torch needed): checked, then resolved ("cuda" -> "cuda:0", none -> the
    first accelerator, else cpu)."""
    require_torch()
    device = check_device(device)
    from gpuscope.measure.device.device import pick_device as _pick

    try:
        return _pick(device)
    except RuntimeError as e:
        raise UserError(f"--device: {e}.") from None


def device_exists(device: str | None) -> str | None:
    """--device checked against this machine before anything is measured: an accelerator it names must be there
    (cuda:N or xpu:N below the device count). None (the case's process picks) and cpu need no torch here."""
    device = check_device(device)
    if device is None or device == "cpu":
        return device
    pick_device(device)
    kind, _, index = device.partition(":")
    if index and kind in ("cuda", "xpu"):
        import torch

        count = getattr(torch, kind).device_count()
        if int(index) >= count:
            raise UserError(f"--device '{device}': this machine has {count} {kind} device(s), numbered from 0.")
    return device


def writable(path: str | None, flag: str = "out") -> str | None:
    """A file the command will write at its end, checked before it measures (created and removed again when it
    did not exist, so nothing is left behind)."""
    if not path:
        return path
    p = Path(path).expanduser()
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
        if not existed:
            p.unlink()
    except OSError as exc:
        raise UserError(f"--{flag} '{path}' cannot be written ({exc.strerror}).") from None
    return path


def open_device(device: str | None):
    """A ``measure.device.device.Device`` for --device (torch needed)."""
    from gpuscope.measure.device.device import Device

    return Device(pick_device(device))


def stored_kind(value: str | None) -> str | None:
    """--kind of the results commands: none, or a kind the store holds (specs.axes.WorkloadKind)."""
    from gpuscope.specs.axes import WorkloadKind

    return None if value is None else WorkloadKind.parse(value, flag="kind").value


def kind(value: str, allowed=("infer", "train")) -> str:
    if value not in allowed:
        raise UserError(f"the workload must be one of {', '.join(allowed)}, got '{value}'.")
    return value


# ---- --model / --config -------------------------------------------------------------------------------------------

def resolve_config(model: str | None, config: str | None) -> tuple[dict, str]:
    """(HF config dict, display name) for --model/--config; bad input is a UserError."""
    if config:
        p = Path(config)
        if p.is_dir():
            p = p / "config.json"
        if not p.is_file():
            raise UserError(f"--config '{config}' does not exist.")
        from gpuscope.specs.numbers import loads

        try:
            cfg = loads(p.read_text(), f"--config '{config}'")
        except UnicodeDecodeError:
            raise UserError(f"--config '{config}' is not valid JSON.") from None
        if not isinstance(cfg, dict) or "model_type" not in cfg:
            raise UserError(f"--config '{config}' has no 'model_type'.")
        return cfg, p.stem if p.name != "config.json" else p.parent.name
    if not model:
        raise UserError("--model or --config is required.")
    if Path(model).expanduser().exists():  # a config.json or a directory holding one, named by the file
        return resolve_config(None, str(Path(model).expanduser()))
    from gpuscope.specs.models import load_model

    load_model(model)  # a missing file or unknown preset is a UserError here
    from gpuscope.specs.models import preset_config  # (torch-free: a planner-only command needs no torch)

    return preset_config(model), model


def case_model(model: str | None, config: str | None = None) -> tuple[str, dict]:
    """(the case's model name, extra case keys) for --model/--config: a preset stays a name; a config file
    (--config, or --model pointing at a config.json or a directory holding one) is stored inline as the case's
    ``config`` under the file's name, so the record is self-contained: it can be re-planned and re-run on another
    machine (a device path alone could not)."""
    cfg, name = resolve_config(model, config)
    inline = bool(config) or Path(str(model)).expanduser().exists()
    return name, ({"config": cfg} if inline else {})


def load_model_spec(model: str):
    """The planner's ModelSpec of --model: a missing file or unknown preset is a UserError here, before any
    process starts."""
    from gpuscope.specs.models import load_model

    return load_model(model)


def hardware(gpu: str, calibrated: bool = False):
    """The HardwareSpec of --gpu (with --calibrated: the ceilings `hardware calibrate --save` measured)."""
    if calibrated:
        from gpuscope.specs.calibration import load_calibrated

        return load_calibrated(gpu)
    from gpuscope.specs.hardware import load_hardware

    return load_hardware(gpu)


def known_gpu(gpu: str | None) -> None:
    """A measuring command's --gpu (the hardware its estimate is planned on) checked before anything runs."""
    if gpu:
        try:
            hardware(gpu)
        except UserError as e:
            raise UserError(str(e) if str(e).startswith("--gpu") else f"--gpu: {e}") from None


def emit(value, as_json: bool, as_markdown: bool, to_json_text, to_markdown, render, min_width: int = 140) -> None:
    """Print a result as --json asks (``to_json_text(value)``), as --markdown asks, or as a rich table
    (``render(value, console)``)."""
    if as_json:
        typer.echo(to_json_text(value))
    elif as_markdown:
        typer.echo(to_markdown(value))
    else:
        render(value, console(min_width))


def console(min_width: int = 140):
    """A rich console (imported here, only when printing): a pipe gets at least ``min_width`` columns."""
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=max(c.width, min_width))


# ---- option groups ------------------------------------------------------------------------------------------------

def option_group(name: str, params: dict, build):
    """A decorator that gives a command the options ``params`` (parameter name -> (annotation, typer.Option)) and
    passes it ``build(**their values)`` as its parameter ``name``: several commands share one list of options
    without restating it (e.g. the economics of `compare` and `advise`). The options come where the command's
    parameter ``name`` stands."""
    import functools
    import inspect

    def decorate(fn):
        sig = inspect.signature(fn)
        extra = [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann)
                 for p, (ann, opt) in params.items()]
        new = []
        for p in sig.parameters.values():
            new.extend(extra if p.name == name else [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)])

        @functools.wraps(fn)
        def command(**kw):
            kw[name] = build(**{p: kw.pop(p) for p in params})
            return fn(**kw)

        command.__signature__ = sig.replace(parameters=new)
        command.__annotations__ = {**{k: v for k, v in fn.__annotations__.items() if k != name},
                                   **{p: ann for p, (ann, _opt) in params.items()}}
        return command

    return decorate
