"""Host time of each training-step phase on tiny models (measure/host/overhead.measure_train_family), for the
planner's training host model, plus the eager decode host costs (`hardware calibrate --host`'s fit).
Usage (GPU machine): PYTHONPATH=src python3 research/scripts/gpu_train_host.py --out $OUT/train_host.json
"""

from __future__ import annotations

import argparse
import json

from gpuscope.measure.device.device import Device, pick_device
from gpuscope.measure.host.overhead import measure_train_family

CASES = [("llama", "amp-bf16", "none"), ("llama", "amp-bf16", "full"), ("llama", "fp32", "none"),
         ("llama", "bf16", "none"), ("llama", "amp-fp16", "none"), ("gpt2", "fp32", "full"),
         ("gpt2", "amp-bf16", "none")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    dev = Device(pick_device(args.device))
    out = {"device_name": dev.device_name(), "train": []}
    for fam, prec, rc in CASES:
        r = measure_train_family(fam, dev, precision=prec, recompute=rc, steps=args.steps)
        out["train"].append(r)
        print(fam, prec, rc, {k: round(v * 1e6, 1) for k, v in r.items() if k.endswith(("fixed_s", "layer_s",
                                                                                          "tensor_s"))}, flush=True)
    from gpuscope.measure.host.costs import host_costs

    out["decode_host"] = host_costs(args.device)
    # TrainHost's units are per tiny-model launch (host_launch_s carries the real-size factor on top)
    out["decode_launch_tiny_s"] = (out["decode_host"].get("host_detail") or {}).get("launch_tiny_s")
    print({k: v for k, v in out["decode_host"].items() if k != "host_detail"})
    json.dump(out, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
