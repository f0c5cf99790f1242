"""Test-session settings for tests/ and research/tests/.

One intra-op thread for PyTorch (``OMP_NUM_THREADS=1``, inherited by every gpuscope process a test starts, unless
the caller set it): the tests' models are tiny, and on a loaded 2-core machine two OpenMP threads spin against the
other processes (a tiny forward read 0.15 s and 2.45 s minutes apart); tests/test_measure_cpu.py -k train took
133 s with two threads and 52 s with one, under the same load. It is also why test_infer_cpu[fp32] read TPOT None
under load: each parallel op waits at its barrier for a thread the scheduler took away, so a call's time swung 30x
with what the other processes did (tiny-llama TTFT 14-551 ms, E2E 0.38-8.6 s, one run's E2E median 397 ms against
a TTFT median of 383 ms); TTFT and E2E are timed in separate windows, and an E2E median not above the TTFT median
leaves TPOT unresolved. With one thread, in the same load, six runs read TTFT 9-38 ms and E2E 124-352 ms, TPOT
5.7-13.3 ms each time. No test reads the thread count; the figures the tests print are the single-threaded host's.
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:  # imported before this file (a plugin): set it there too
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# A gpuscope home of the session's own (unless the caller set one): a bench run on the CPU keeps this host's
# measured ceilings there (pipeline/host_ceilings.py), never in the user's ~/.local/share/gpuscope. Each xdist
# worker makes its own (the workers inherit the controller's environment): two workers never write one home, and
# each sees what one serial session would.
_MADE = "GPUSCOPE_TEST_HOME_MADE"  # the home this file made, so that a worker tells it from one the caller set
if "GPUSCOPE_HOME" not in os.environ or (os.environ.get("PYTEST_XDIST_WORKER")
                                         and os.environ.get(_MADE) == os.environ["GPUSCOPE_HOME"]):
    import atexit
    import shutil
    import tempfile

    os.environ["GPUSCOPE_HOME"] = os.environ[_MADE] = tempfile.mkdtemp(prefix="gpuscope-test-home-")
    atexit.register(shutil.rmtree, os.environ["GPUSCOPE_HOME"], True)

