"""Print the planner's estimates beside measured results, with the error of each.

Usage: python research/scripts/compare_results.py RESULTS.jsonl [MORE.jsonl ...] [--ceilings results/.../gpu_facts.json]
[--gpu calibrated.toml]
With --ceilings, the hardware is calibrated with the measured bf16 matmul rate and copy bandwidth first.
"""

import argparse
import json

from gpuscope.explain.compare import compare_file
from gpuscope.pipeline.accuracy import by_metric
from gpuscope.report.bench_view import accuracy_lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+", help="measurements.jsonl files (their rows are pooled)")
    ap.add_argument("--ceilings")
    ap.add_argument("--gpu", help="hardware for every estimate: catalog name or a TOML (`gpuscope hardware calibrate`)")
    a = ap.parse_args()
    ceilings = None
    if a.ceilings:
        f = json.load(open(a.ceilings))
        ceilings = {"matmul_tflops": {"bf16": f["bf16_matmul_8192_tflops"], "fp16": f["bf16_matmul_8192_tflops"]},
                    "memory_bw_gbs": f["copy_gbs_read_plus_write"]}
    rows = [row for path in a.results for row in compare_file(path, ceilings, a.gpu)]
    print(f"{'case':58} {'metric':22} {'estimated':>12} {'measured':>12} {'error':>8}")
    for r in rows:
        scale, unit = (2**30, "GiB") if r.metric.endswith("bytes") else (1e-3, "ms")
        print(f"{r.case:58} {r.metric:22} {r.estimated / scale:10.2f}{unit:>2} {r.measured / scale:10.2f}{unit:>2}"
              f" {r.error:+8.1%}")
    for line in accuracy_lines(by_metric(rows)):
        print(line)


if __name__ == "__main__":
    main()
