"""Host time of each training-step phase, per family and precision, every round taken to one training-probe speed
(measure/host/probe.RoundProbe, calibrate.TRAIN_PROBE_UNIT_S), so cases timed at different moments compare: what
the calibration's Llama amp-bf16 fits predict for other families and precisions (GPT-2 fp32 full recompute, the
`bench all` case the planner reads low). Kernels per phase counted with the profiler at each depth.
Usage (GPU machine): PYTHONPATH=src python3 research/scripts/gpu_train_phases.py --out $OUT/train_phases.json --sweeps 2
"""

from __future__ import annotations

import argparse
import json

from gpuscope.measure.host.costs import TRAIN_PROBE_UNIT_S
from gpuscope.measure.device.device import Device, pick_device
from gpuscope.measure.host.overhead import measure_train_family
from gpuscope.measure.host.probe import RoundProbe, release

CASES = [("llama", "amp-bf16", "none"), ("llama", "amp-bf16", "full"), ("gpt2", "fp32", "full"),
         ("gpt2", "fp32", "none"), ("llama", "fp32", "none"), ("llama", "fp32", "full"),
         ("gpt2", "amp-bf16", "none"), ("gpt2", "amp-bf16", "full")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--sweeps", type=int, default=2)
    args = ap.parse_args()
    dev = Device(pick_device(args.device))
    out = {"device_name": dev.device_name(), "probe_unit_s": TRAIN_PROBE_UNIT_S, "runs": []}
    for sweep in range(args.sweeps):
        for fam, prec, rc in (CASES if sweep % 2 == 0 else CASES[::-1]):
            probe = RoundProbe(dev, "train", to=TRAIN_PROBE_UNIT_S)
            r = measure_train_family(fam, dev, precision=prec, recompute=rc, steps=args.steps,
                                     count_kernels=sweep == 0, probe=probe)
            release()
            r.update(sweep=sweep, train_probe_median_s=probe.median(), train_probe_rounds_s=probe.samples)
            out["runs"].append(r)
            print(sweep, fam, prec, rc, {k: round(v * 1e6, 1) for k, v in r.items()
                                         if k.endswith(("fixed_s", "layer_s", "tensor_s"))},
                  "probe", round(probe.median() * 1e3, 2), flush=True)
            json.dump(out, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
