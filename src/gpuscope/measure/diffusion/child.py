"""The process that measures the points of one build (measure/diffusion/spawn.py starts it):

    python -m gpuscope.measure.diffusion.child -        (a JSON list of diffusion case dicts on stdin)

It builds the modules once and prints one JSON line per point as soon as it is measured: ``{"schema", "case_id",
"case", "result", "provenance", "wall_s"}`` as measure/runner/run_case.py writes them. An out-of-memory point is
``status: oom``; any other failure of a point is ``status: error`` with the end of its traceback, and the next
point runs. Everything the libraries print goes to stderr.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

SCHEMA = "gpuscope.measurement/1"


def main() -> int:
    from gpuscope.measure.runner.run_case import clean, error_result

    cases = json.loads(sys.stdin.read())
    stdout = sys.stdout
    failed = 0
    with contextlib.redirect_stdout(sys.stderr):
        from gpuscope.measure.device.device import Device, pick_device
        from gpuscope.measure.device.provenance import provenance
        from gpuscope.workloads import case_id
        from gpuscope.measure.diffusion.components import folder_of, pipeline_spec

        t0 = time.perf_counter()
        prov: dict = {}

        def emit(case: dict, result: dict) -> None:
            nonlocal t0, prov, failed
            if not prov:
                prov = provenance(Device(pick_device(case.get("device"))))
            failed += result.get("status") == "error"
            line = {"schema": SCHEMA, "case_id": case_id(case, strict=False), "case": case, "result": result,
                    "provenance": prov, "wall_s": time.perf_counter() - t0}
            stdout.write(json.dumps(clean(line)) + "\n")
            stdout.flush()
            t0 = time.perf_counter()

        try:
            from gpuscope.measure.diffusion.run import run_points

            run_points(cases, folder_of(pipeline_spec(cases[0]["model"])), emit, on_error=error_result)
        except Exception as e:  # the build failed: every point gets the error
            for c in cases:
                emit(c, {"kind": "diffusion", "component": c.get("component"), **error_result(e)})
    return 3 if failed else 0


if __name__ == "__main__":
    from gpuscope.measure.runner.lifeline import arm_from_env

    arm_from_env()  # dies with bench's process
    sys.exit(main())
