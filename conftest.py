"""Test-session settings for tests/ and research/tests/.

One intra-op thread for PyTorch (``OMP_NUM_THREADS=1``, inherited by every gpuscope process a test starts, unless
the caller set it): the tests' models are tiny, and on a loaded 2-core machine two OpenMP threads spin against the
other processes (a tiny forward read 0.15 s and 2.45 s minutes apart); tests/test_measure_cpu.py -k train took
133 s with two threads and 52 s with one, under the same load. No test reads the thread count; the figures the
tests print are the single-threaded host's.
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:  # imported before this file (a plugin): set it there too
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
