"""What torchrun starts on every rank of a ``run_torchrun`` job: ``python -m gpuscope.measure.distributed.rank
MODULE ARGS...`` makes this worker die with torchrun (runner/lifeline.py: SIGKILL when its parent goes, checked
against the launcher's pid), registers its pid in the job's run folder (so the launcher kills its session, which
torch elastic made its own), then runs ``python -m MODULE ARGS...`` in this process."""

from __future__ import annotations

import os
import runpy
import sys

from gpuscope.measure.runner import lifeline

LAUNCHER_ENV = "GPUSCOPE_DIST_LAUNCHER_PID"
RUN_DIR_ENV = "GPUSCOPE_DIST_RUN_DIR"


def main() -> None:
    lifeline.arm_from_env(LAUNCHER_ENV, grandparent=True)
    lifeline.register(os.environ.get(RUN_DIR_ENV))
    if len(sys.argv) < 2:
        sys.exit("usage: python -m gpuscope.measure.distributed.rank MODULE [ARGS...]")
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
