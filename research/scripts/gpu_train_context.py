"""Does the process a training fit runs in change what it reads? The calibration fits training inside `bench all`'s
own process, after its micro benchmarks and decode passes; `bench train` times each case in a fresh subprocess.
Session 9 read the checkpoint's forward cost 0.55-0.68 ms a layer in two calibrations and 0.32-0.42 ms in a fresh
process (research/results/2026-11-30-h200-i). This times the same Llama amp-bf16 fits (none and full recompute, every round
at one training-probe speed) in a fresh subprocess, then in this process after the decode passes, then after
gc.collect(); gc.freeze(), then in a fresh subprocess again, with the collector's pauses counted.
Usage (GPU machine): PYTHONPATH=src python3 research/scripts/gpu_train_context.py --out $OUT/train_context.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def fits(device: str | None, steps: int) -> dict:
    from gpuscope.measure.host.costs import TRAIN_PROBE_UNIT_S
    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.host.gc_pauses import GCPauses
    from gpuscope.measure.host.overhead import measure_train_family
    from gpuscope.measure.host.probe import RoundProbe, release

    dev = Device(pick_device(device))
    probe = RoundProbe(dev, "train", to=TRAIN_PROBE_UNIT_S)
    out = {}
    with GCPauses() as gcp:
        for rc in ("none", "full"):
            r = measure_train_family("llama", dev, precision="amp-bf16", recompute=rc, steps=steps, probe=probe)
            out[rc] = {k: v for k, v in r.items() if k.endswith(("_s", "layers"))}
    release()
    out["gc"] = gcp.summary()
    out["train_probe_median_s"] = probe.median()
    n, f = out["none"], out["full"]
    out["ckpt_layer_s"] = f["forward_layer_s"] - n["forward_layer_s"]
    out["refwd_layer_s"] = f["backward_layer_s"] - n["backward_layer_s"]
    return out


def fresh(device: str | None, steps: int) -> dict:
    code = (f"import json, sys; sys.path.insert(0, 'research/scripts'); from gpu_train_context import fits; "
            f"print(json.dumps(fits({device!r}, {steps})))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    out = {"runs": []}

    def keep(name, r):
        r["context"] = name
        out["runs"].append(r)
        print(name, {k: round(r[k] * 1e6) for k in ("ckpt_layer_s", "refwd_layer_s")},
              "fwd/bwd layer", round(r["none"]["forward_layer_s"] * 1e6), round(r["none"]["backward_layer_s"] * 1e6),
              "gc", r["gc"]["gc_collections_by_generation"], round(r["gc"]["gc_pause_s"] * 1e3, 2), "ms", flush=True)
        json.dump(out, open(args.out, "w"), indent=1)

    keep("fresh_1", fresh(args.device, args.steps))
    from gpuscope.measure.host.costs import host_costs
    from gpuscope.measure.host.gc_pauses import freeze

    host_costs(args.device)
    keep("after_decode_passes", fits(args.device, args.steps))
    out["frozen_objects"] = freeze()
    keep("after_gc_freeze", fits(args.device, args.steps))
    keep("fresh_2", fresh(args.device, args.steps))


if __name__ == "__main__":
    main()
