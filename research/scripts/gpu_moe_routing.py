"""Why Mixtral's eager prefill runs its grouped expert GEMMs at ~500 TFLOP/s in the workload (doctor profile) when
torch._grouped_mm reached ~657 TFLOP/s in isolation with every expert given the same number of rows
(research/results/2026-11-29-h200-b/moe_attn.json). Hypothesis: the random-weight router sends tokens unevenly, and a
grouped GEMM over uneven groups is slower for the same FLOPs.

Builds the random-weight model the benchmarks build (gpuscope's build_model), runs one prefill forward of `--prompt`
random tokens, records every MoE layer's routed rows per expert (measure/llm/moe_routing.RoutingCounter), then times
torch._grouped_mm for the gate_up and down shapes with (a) equal groups and (b) each layer's measured groups.
Usage (GPU machine): PYTHONPATH=src python3 research/scripts/gpu_moe_routing.py --out $OUT/moe_routing.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from gpuscope.measure.device.device import Device
from gpuscope.measure.models.hf_model import build_model, case_config
from gpuscope.measure.micro.timing import Settings, time_queued
from gpuscope.measure.llm.moe_routing import RoutingCounter


def _time(dev: Device, fn, rep: int = 20) -> float:
    """Median seconds of ``fn()`` over ``rep`` queued iterations after 3 untimed ones (micro_timing.time_queued)."""
    st = Settings(warmup=3, min_iters=rep, min_time_s=0.0, max_time_s=float("inf"))
    return statistics.median(time_queued(dev, lambda i: fn(), st))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="mixtral-8x7b")
    ap.add_argument("--prompt", type=int, default=1024)
    args = ap.parse_args()
    dev = Device("cuda")
    model, cfg = build_model(case_config({"model": args.model}), dev, torch.bfloat16)
    model.eval()
    n_exp = cfg.num_local_experts
    ids = torch.randint(0, cfg.vocab_size, (1, args.prompt), device=dev.torch_device)
    with RoutingCounter(model) as rc, torch.no_grad():
        model(input_ids=ids, logits_to_keep=1)
    routing = rc.summary()
    counts = routing["rows_per_expert"]
    del model
    torch.cuda.empty_cache()

    rows = args.prompt * cfg.num_experts_per_tok
    h, w = cfg.hidden_size, cfg.intermediate_size
    out = {"model": args.model, "prompt": args.prompt, "experts": n_exp, "routed_rows": rows,
           "layers": len(counts), "rows_per_expert": counts,
           "imbalance_max_over_mean": routing["imbalance"], "grouped_mm": []}
    x = {k: torch.randn(rows, k, device="cuda", dtype=torch.bfloat16) for k in (h, w)}
    weights = {"gate_up": torch.randn(n_exp, 2 * w, h, device="cuda", dtype=torch.bfloat16).transpose(1, 2),
               "down": torch.randn(n_exp, h, w, device="cuda", dtype=torch.bfloat16).transpose(1, 2)}
    equal = [rows // n_exp] * n_exp
    for name, k, n in (("gate_up", h, 2 * w), ("down", w, h)):
        per_layer = []
        for c in [equal] + counts:
            offs = torch.tensor(c, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
            s = _time(dev, lambda: torch._grouped_mm(x[k], weights[name], offs=offs))
            per_layer.append(s)
        flops = 2 * rows * k * n
        out["grouped_mm"].append({
            "name": name, "equal_s": per_layer[0], "equal_tflops": flops / per_layer[0] / 1e12,
            "routed_s": per_layer[1:], "routed_s_sum": sum(per_layer[1:]),
            "routed_tflops_mean": flops * len(counts) / sum(per_layer[1:]) / 1e12})
    json.dump(out, open(args.out, "w"), indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "rows_per_expert"})[:3000])


if __name__ == "__main__":
    main()
