"""What does HF generate add to the prompt's forward before its first token? Session 10's suite read the 8B
hf-graph TTFT 5-12 ms above the bare prefill forward (research/scripts/gpu_prefill_fused.py), where the planner adds
generate's setup and one step (2.7-3.3 ms, `hardware calibrate --host`'s host_setup_s + host_step_s, measured on
tiny models with a DynamicCache).

For a 2-layer tiny Llama (hidden 256), Llama-3.2-1B (16 layers) and Llama-3.1-8B (32 layers), one model at a time:
- forward: the bare prefill forward (no cache; logits of the last position only, as generate asks);
- ttft, per engine (hf-eager: DynamicCache; hf-graph: StaticCache; one new token, so nothing is compiled);
rounds alternate forward and ttft, medians of --reps each; the host probe before and after each model. Then one
cProfile of an 8B TTFT per engine (cumulative time, top functions).
Usage (GPU machine): PYTHONPATH=src python3 research/scripts/gpu_ttft_overhead.py --out $OUT/ttft_overhead.json
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import os
import statistics
import sys

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32000, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--models", default="tiny,llama-3.2-1b,llama-3.1-8b")
    args = ap.parse_args()

    import torch

    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.models.hf_model import build_model, case_config, silence_generation
    from gpuscope.measure.host.probe import HostProbe
    from gpuscope.measure.llm.infer import generate

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpu_prefill_fused import wall_ms  # the same clock as the fused-prefill experiment

    dev = Device(pick_device(None))
    out = {"prompt": args.prompt, "models": {}}

    def timed(fn) -> float:
        return wall_ms(dev, fn)

    for name in args.models.split(","):
        cfg = dict(TINY) if name == "tiny" else case_config({"model": name})
        m, config = build_model(cfg, dev, torch.bfloat16, "sdpa", use_cache=True)
        m.eval()
        silence_generation(m)
        ids = torch.randint(0, 1000, (1, args.prompt), device=dev.torch_device)
        mask = torch.ones_like(ids)
        fwd = lambda: m(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1)  # noqa: E731
        ttft = {e: (lambda e=e: generate(m, ids, mask, 1, e)) for e in ("hf-eager", "hf-graph")}
        r = {"layers": config.num_hidden_layers, "forward_ms": [], "ttft_ms": {e: [] for e in ttft}}
        with torch.no_grad():
            for _ in range(2):
                fwd()
                for f in ttft.values():
                    f()
            with HostProbe(dev) as probe:
                for _ in range(args.rounds):
                    r["forward_ms"].append(statistics.median(timed(fwd) for _ in range(args.reps)))
                    for e, f in ttft.items():
                        r["ttft_ms"][e].append(statistics.median(timed(f) for _ in range(args.reps)))
            r["host_probe_s"] = probe.summary()["host_probe_s"]
            if name == args.models.split(",")[-1]:
                r["profile"] = {}
                for e, f in ttft.items():
                    pr = cProfile.Profile()
                    pr.enable()
                    f()
                    dev.synchronize()
                    pr.disable()
                    s = io.StringIO()
                    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30)
                    r["profile"][e] = s.getvalue()[-6000:]
        fm = statistics.median(r["forward_ms"])
        r["excess_ms"] = {e: statistics.median(v) - fm for e, v in r["ttft_ms"].items()}
        print(name, "layers", r["layers"], "forward", [round(v, 2) for v in r["forward_ms"]],
              {e: [round(v, 2) for v in vs] for e, vs in r["ttft_ms"].items()},
              "excess", {e: round(v, 2) for e, v in r["excess_ms"].items()},
              "probe ms", round(r["host_probe_s"] * 1e3, 2), flush=True)
        out["models"][name] = r
        m = fwd = ttft = None  # release the model before the next one is built
        gc.collect()
        torch.cuda.empty_cache() if dev.type == "cuda" else None
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
