"""Print how long the planner takes as a model gets deeper (target: `plan train` of 100,000 layers under 5 s on 2
cores; the cost must grow linearly with depth, not with its square).

Usage: python scripts/bench_depth.py
"""

import time

from gpuscope.estimate.infer import estimate_infer
from gpuscope.estimate.train import estimate_train
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.hf_config import spec_from_config

hw = load_hardware("h200")
prev = None
for layers in (1_000, 10_000, 100_000):
    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": layers,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512}
    m = spec_from_config(cfg, name=f"deep-{layers}")
    t0 = time.perf_counter()
    estimate_train(m, hw, micro_batch=1, seq=128)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    estimate_infer(m, hw, batch=1, prompt=128, gen=16)
    infer_s = time.perf_counter() - t0
    growth = f"; x{train_s / prev:.1f} for 10x the layers" if prev else ""
    print(f"{layers:>7,} layers: plan train {train_s:.2f} s, plan infer {infer_s:.2f} s{growth}")
    prev = train_s
print("target: plan train of 100,000 layers under 5 s")
