"""Print how long `gpuscope plan ...` takes from process start to exit: the median of 7 cold starts (a new
process each) per case, wall and CPU time (target: wall < 0.3 s on a 2-core machine; CPU time is what the
process itself spent, steadier than wall when other work shares the machine).

Python's bytecode caches are allowed for the measured processes (PYTHONDONTWRITEBYTECODE is dropped from their
environment), as in any installation: without them every start compiles each module from source again.

Usage: python scripts/bench_startup.py [repeats]
"""

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = [
    ["plan", "infer", "--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "8", "--prompt", "2048", "--json"],
    ["plan", "train", "--model", "qwen2.5-7b", "--gpu", "h100", "--micro-batch", "2", "--seq", "4096", "--json"],
    ["plan", "infer", "--model", "deepseek-v3", "--gpu", "b200", "--num-gpus", "8", "--tp", "8", "--json"],
    ["--help"],
]
TARGET_S = 0.3
# The command as a user types it: the `gpuscope` script installed beside this Python, else `python -m gpuscope`.
_SCRIPT = Path(sys.executable).with_name("gpuscope")
COMMAND = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "gpuscope"]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cold_start(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one `python -m gpuscope ARGS` in a new process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([*COMMAND, *args], capture_output=True, env=ENV)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr.decode()
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    torch_loaded = subprocess.run(
        [sys.executable, "-c", "import sys, gpuscope.cli, gpuscope.estimate.infer, gpuscope.estimate.train, "
         "gpuscope.specs.hardware, gpuscope.specs.models; print('torch' in sys.modules)"],
        capture_output=True, text=True).stdout.strip()
    print(f"command: {' '.join(COMMAND)}; torch imported by the planner: {torch_loaded}")
    for args in CASES:
        cold_start(args)  # the first run writes the bytecode caches: not a start a user repeats
        runs = [cold_start(args) for _ in range(n)]
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        wall = statistics.median(walls)
        label = " ".join(args[:2]) + (f" {args[3]}" if len(args) > 3 else "")
        print(f"{label}: median {wall:.3f} s wall (min {min(walls):.3f}, max {max(walls):.3f}, n={n}), "
              f"{statistics.median(cpus):.3f} s CPU; {'under' if wall < TARGET_S else 'OVER'} {TARGET_S} s")


if __name__ == "__main__":
    main()
