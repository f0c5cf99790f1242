"""Checks of the numbers a config.json, a hardware TOML or the command line gives: finite, of the right type
(a count is an int, and bool is not one), inside its range; a bad one is one sentence naming the field (UserError).

Bounds, and why:
- counts (widths, heads, vocabulary, experts, context, batch, tokens) below 2**31, the int32 that torch kernels
  index with and the config classes of transformers assume; a product of up to nine such counts (FLOPs, bytes)
  stays far below the float64 overflow at 2**1024, so no estimate becomes inf;
- layers at most MAX_LAYERS: planning is linear in depth (100,000 layers plan in about 1.4 s) and the largest
  published models have under 200;
- hardware numbers (GB, GB/s, TFLOPS, W, s) in [MIN_RATE, MAX_RATE]: times are bytes or FLOPs over a rate, and
  outside that range they overflow or underflow float64.
"""

from __future__ import annotations

import json
import math

from gpuscope.errors import UserError

MAX_COUNT = 2**31 - 1
MAX_LAYERS = 100_000
MIN_RATE, MAX_RATE = 1e-12, 1e15


def count(value, field: str, *, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """An integer in [minimum, maximum]; a float that is a whole number (64.0) counts as one."""
    ok = not isinstance(value, bool) and (isinstance(value, int) or (isinstance(value, float) and
                                                                     math.isfinite(value) and value.is_integer()))
    if not ok or not minimum <= value <= maximum:
        what = (f"a positive integer (at most {maximum:,})" if minimum == 1 else
                f"an integer from {minimum} to {maximum:,}")
        raise UserError(f"{field} must be {what}, not {_show(value)}.")
    return int(value)


def number(value, field: str, *, allow_zero: bool = False, minimum: float = MIN_RATE,
           maximum: float = MAX_RATE) -> float:
    """A finite real in [minimum, maximum] (or 0 where allowed)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{field} must be a number, not {_show(value)}.")
    if allow_zero and value == 0:
        return 0.0
    if not (isinstance(value, int) or math.isfinite(value)) or not minimum <= value <= maximum:
        allowed = "zero or" if allow_zero else "a finite number"
        raise UserError(f"{field} must be {allowed} between {minimum:g} and {maximum:g}, not {_show(value)}.")
    return float(value)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:20] + "..." + f" ({len(text)} characters)"


def loads(text: str, where: str):
    """json.loads that refuses what a config cannot mean: nesting too deep to read, integers too long to convert,
    and the NaN/Infinity constants (named by the field that holds one)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise UserError(f"{where} is nested too deeply to read as JSON.") from None
    except ValueError as exc:  # JSONDecodeError, and an integer past Python's digit limit
        raise UserError(f"{where} is not valid JSON ({exc.__class__.__name__}: {_short(exc)}).") from None
    _finite(data, where)
    return data


def _short(exc) -> str:
    text = str(exc)
    return text if len(text) <= 120 else text[:117] + "..."


def _finite(data, where: str) -> None:
    """Every float in ``data`` finite; walked with a stack, not recursion (the nesting may be deep)."""
    stack = [("", data)]
    while stack:
        path, x = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            raise UserError(f"{where}: field '{path.lstrip('.')}' is {x!r}; JSON numbers must be finite.")
        if isinstance(x, dict):
            stack.extend((f"{path}.{k}", v) for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(x))


def read_json_object(path, what: str = "") -> dict:
    """A --model JSON file (a config.json, a model_index.json) read with ``loads``: one sentence when it is not
    UTF-8 JSON or does not hold an object. ``what`` names the file in the sentence."""
    try:
        data = loads(path.read_text(), f"--model: '{path}'")
    except UnicodeDecodeError as exc:
        raise UserError(f"--model: '{path}' is not valid JSON ({exc.__class__.__name__}: {exc}).") from None
    if not isinstance(data, dict):
        named = f"{what} " if what else ""
        raise UserError(f"--model: {named}'{path}' must hold a JSON object, not {type(data).__name__}.")
    return data

