"""Print how many layouts per second `gpuscope plan train --search` estimates (target: >= 100,000 on 2 cores).

Usage: python scripts/bench_search.py
"""

import time

from gpuscope.estimate.search import search_layouts
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

CASES = [("megatron-145.6b", "a100-80gb", 1536, 2304, 2048), ("llama-3.1-70b", "h100", 512, 1024, 8192),
         ("megatron-1t", "a100-80gb", 3072, 3072, 2048)]

for name, gpu, n, batch, seq in CASES:
    m, hw = load_model(name), load_hardware(gpu)
    t0 = time.perf_counter()
    res = search_layouts(m, hw, n, batch, seq=seq)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = search_layouts(m, hw, n, batch, seq=seq)  # caches warm, as for a second query in one session
    warm = time.perf_counter() - t0
    best = res.ranked[0] if res.ranked else None
    print(f"{name} on {n} x {gpu}: {res.considered:,} layouts; cold {res.considered / cold:,.0f} layouts/s, "
          f"warm {res.considered / warm:,.0f} layouts/s; best {best.layout if best else None}")
