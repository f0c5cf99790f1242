"""Training host time per phase at tiny and real widths, with the device kernels of each phase counted: whether the
planner's training host model (estimate/roofline.TrainHost x estimate/train.layer_kernels) holds for GPT-2 and
Llama at their real widths, or only for the tiny models it was fitted on.
Usage (GPU machine): PYTHONPATH=src python3 research/scripts/gpu_train_width.py --out $OUT/train_width.json
"""

from __future__ import annotations

import argparse
import json

from gpuscope.measure.device.device import Device, pick_device
from gpuscope.measure.host.overhead import TINY, measure_train_family
from gpuscope.specs.models import preset_config

# (name, family, config, seq, layers)
CASES = [("gpt2-tiny", "gpt2", TINY["gpt2"], 64, (2, 4, 8)),
         ("gpt2-real", "gpt2", preset_config("gpt2"), 128, (2, 4, 8, 12)),
         ("llama-tiny", "llama", TINY["llama"], 64, (2, 4, 8)),
         ("llama-1b-width", "llama", preset_config("llama-3.2-1b"), 128, (2, 4, 8))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--recompute", default="none,full")
    args = ap.parse_args()
    dev = Device(pick_device(args.device))
    out = {"device_name": dev.device_name(), "cases": []}
    for name, fam, cfg, seq, layers in CASES:
        for rc in args.recompute.split(","):
            r = measure_train_family(fam, dev, layers=layers, precision="amp-bf16", recompute=rc,
                                     steps=args.steps, seq=seq, config=cfg, count_kernels=True)
            r["name"] = name
            out["cases"].append(r)
            print(name, rc, {k: round(v * 1e6, 1) for k, v in r.items() if k.endswith(("fixed_s", "layer_s"))},
                  r.get("kernels"), flush=True)
            json.dump(out, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
