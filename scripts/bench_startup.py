"""Print how long `gpuscope plan ...` takes from process start to exit (target: < 0.5 s on a 2-core machine).

Usage: python scripts/bench_startup.py [repeats]
"""

import statistics
import subprocess
import sys
import time

CASES = [
    ["plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "8", "--prompt", "2048", "--json"],
    ["plan", "train", "--model", "qwen2.5-7b", "--gpu", "h100", "--micro-batch", "2", "--seq", "4096", "--json"],
    ["plan", "infer", "--model", "deepseek-v3", "--gpu", "b200", "--num-gpus", "8", "--tp", "8", "--json"],
]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for args in CASES:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True)
            times.append(time.perf_counter() - t0)
            assert r.returncode == 0, r.stderr.decode()
        torch_loaded = subprocess.run(
            [sys.executable, "-c", "import sys, gpuscope.estimate.infer, gpuscope.estimate.train, "
             "gpuscope.specs.hardware, gpuscope.specs.models; print('torch' in sys.modules)"],
            capture_output=True, text=True).stdout.strip()
        print(f"{' '.join(args[:2])} {args[3]}: median {statistics.median(times):.3f} s "
              f"(min {min(times):.3f}, max {max(times):.3f}, n={n}); torch imported: {torch_loaded}")


if __name__ == "__main__":
    main()
