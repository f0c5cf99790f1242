"""Run ONE measurement case in this process and print exactly one JSON line on stdout.

    python -m gpuscope.measure.runner.run_case '<case json>'      (or '@file.json', or '-' for stdin)

The line is ``{"schema", "case_id", "case", "result", "provenance", "wall_s"}``. ``result.status`` is ``ok``,
``oom`` (out of memory is a result) or ``error`` (with a short message and the end of the traceback). Anything
the libraries print goes to stderr, so stdout carries only the JSON line. Exit code 0 for ok/oom, 3 for error.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
import traceback

SCHEMA = "gpuscope.measurement/1"


def run_case(case: dict) -> dict:
    """Measure a case of any kind in this process (workloads.run_case: the kind's module, which imports torch)."""
    from gpuscope.workloads import run_case as run

    return run(case)


def clean(obj):
    """JSON-safe: non-finite floats become None (the key says what it measured; NaN is not JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def error_result(exc: BaseException) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {"status": "error", "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
            "traceback_tail": "".join(tb)[-1500:]}


def measure(case: dict) -> dict:
    """Run a case and return the full line (case, result, provenance) as a dict."""
    from gpuscope.workloads import case_id
    from gpuscope.measure.device.provenance import nvml_sample, provenance

    t0 = time.perf_counter()
    nvml_before = nvml_sample()
    try:
        result = run_case(case)
    except Exception as e:  # one case's failure is a result, not a crash
        result = error_result(e)
    dev = None
    try:
        from gpuscope.measure.device.device import Device, pick_device

        dev = Device(pick_device(case.get("device")))
        prov = provenance(dev)
    except Exception as e:
        prov = provenance(None, with_torch=False)
        prov["provenance_error"] = str(e)[:200]
    prov["nvml_before"] = nvml_before
    return clean({"schema": SCHEMA, "case_id": case_id(case, strict=False), "case": case, "result": result,
                  "provenance": prov, "wall_s": time.perf_counter() - t0})


def _read_case(arg: str) -> dict:
    if arg == "-":
        return json.loads(sys.stdin.read())
    if arg.startswith("@"):
        with open(arg[1:]) as f:
            return json.load(f)
    return json.loads(arg)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m gpuscope.measure.runner.run_case '<case json>' | @file.json | -", file=sys.stderr)
        return 2
    try:
        case = _read_case(argv[0])
    except (OSError, ValueError) as e:
        print(f"case: not valid JSON ({e}).", file=sys.stderr)
        return 2
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        line = measure(case)
    stdout.write(json.dumps(line) + "\n")
    stdout.flush()
    return 3 if line["result"].get("status") == "error" else 0


if __name__ == "__main__":
    from gpuscope.measure.runner.lifeline import arm_from_env

    arm_from_env()  # started by suite.run_one: die with it
    sys.exit(main())
