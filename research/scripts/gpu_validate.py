#!/usr/bin/env python3
"""Measure a named set of LLM inference and training cases, one subprocess per case, into a JSONL file.

    PYTHONPATH=src python3 research/scripts/gpu_validate.py --set single-gpu --out $OUT/single-gpu.jsonl [--timeout 300] [--budget 540]
    PYTHONPATH=src python3 research/scripts/gpu_validate.py --set smoke --out /tmp/smoke.jsonl

Cases already in --out (or in --resume-from, whose lines are copied into --out first) are skipped. Each line is
{"schema", "case_id", "case", "result", "provenance", "wall_s"}; result.status is ok | oom | error | timeout.
Exit code 0 when every case has a result line with status ok or oom, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

try:
    import gpuscope  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from gpuscope.workloads import case_id, case_name  # noqa: E402
from gpuscope.workloads.sets import CASE_SETS  # noqa: E402
from gpuscope.measure.runner.suite import read_results, run_suite  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", required=True, choices=sorted(CASE_SETS), help="which case list")
    ap.add_argument("--out", required=True, help="results JSONL (appended to; existing cases are skipped)")
    ap.add_argument("--timeout", type=float, default=300, help="per-case timeout in seconds (default 300)")
    ap.add_argument("--budget", type=float, default=540,
                    help="start no case after this many seconds (default 540; run again to resume)")
    ap.add_argument("--resume-from", help="an earlier results file whose cases are copied into --out and skipped")
    ap.add_argument("--only", action="append", default=[], help="run only cases whose name contains this (repeatable)")
    ap.add_argument("--skip", action="append", default=[], help="leave out cases whose name contains this (repeatable)")
    ap.add_argument("--retry-failed", action="store_true", help="run again cases recorded as error or timeout")
    ap.add_argument("--list", action="store_true", help="print the case ids and exit")
    a = ap.parse_args(argv)

    cases = CASE_SETS[a.set]()
    if a.only:
        cases = [c for c in cases if any(s in case_name(c) for s in a.only)]
    if a.skip:
        cases = [c for c in cases if not any(s in case_name(c) for s in a.skip)]
    if a.list:
        for c in cases:
            print(case_id(c), json.dumps(c) if a.set != "smoke" else "")
        return 0

    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if a.resume_from and Path(a.resume_from).exists() and Path(a.resume_from).resolve() != out.resolve():
        if out.exists():
            with open(out, "a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in read_results(a.resume_from)))
        else:
            shutil.copyfile(a.resume_from, out)

    t0 = time.perf_counter()
    print(f"gpu_validate: {len(cases)} cases ({a.set}) -> {out}", file=sys.stderr, flush=True)
    run_suite(cases, out, timeout_s=a.timeout, retry_failed=a.retry_failed, budget_s=a.budget)

    recs = {r["case_id"]: r for r in read_results(out)}
    counts: dict[str, int] = {}
    for c in cases:
        st = (recs.get(case_id(c)) or {}).get("result", {}).get("status", "missing")
        counts[st] = counts.get(st, 0) + 1
    print(f"gpu_validate: {counts} in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    return 0 if set(counts) <= {"ok", "oom"} else 1


if __name__ == "__main__":
    sys.exit(main())
