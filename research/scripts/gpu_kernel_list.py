"""The device kernels one decoder layer adds to a training step's forward and backward, by name: the profiler's
kernel list at 2 and 3 layers, differenced (tiny GPT-2 and Llama, amp-bf16). What the planner's kernel counts
(estimate/ops.py, estimate/train.py) are checked against, op by op.
Usage (GPU machine): PYTHONPATH=src python3 research/scripts/gpu_kernel_list.py --out $OUT/kernel_list.json
"""

from __future__ import annotations

import argparse
import collections
import json

import torch
from torch.profiler import DeviceType, ProfilerActivity, profile

from gpuscope.measure.device.device import Device, pick_device
from gpuscope.measure.models.hf_model import build_model
from gpuscope.measure.models.tiny import TINY, layers_key
from gpuscope.measure.models.train_step import PRECISIONS, step_functions


def kernels(dev: Device, family: str, n: int) -> dict[str, collections.Counter]:
    base = dict(TINY[family])
    param_dtype, ac_dtype = PRECISIONS["amp-bf16"]
    torch.manual_seed(0)
    model, cfg = build_model(dict(base, **{layers_key(base): n}), dev, param_dtype, use_cache=False)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    batch = torch.randint(0, cfg.vocab_size, (2, 64), device=dev.torch_device)
    fwd, bwd, opt_step = step_functions(model, opt, None, ac_dtype, dev, iter(lambda: batch, None), {}, ["k"])
    for _ in range(2):
        loss = fwd()
        bwd(loss)
        opt_step()
    out = {}
    for phase in ("forward", "backward"):
        dev.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            if phase == "forward":
                loss = fwd()
            else:
                bwd(loss)
            dev.synchronize()
        out[phase] = collections.Counter(e.name[:160] for e in prof.events() if e.device_type == DeviceType.CUDA)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dev = Device(pick_device(None))
    res = {}
    for fam in ("gpt2", "llama"):
        a, b = kernels(dev, fam, 2), kernels(dev, fam, 3)
        res[fam] = {ph: {"per_layer": {k: b[ph][k] - a[ph][k] for k in set(a[ph]) | set(b[ph]) if b[ph][k] != a[ph][k]},
                         "at_2_layers": dict(a[ph])} for ph in a}
        print(fam, {ph: sum(v["per_layer"].values()) for ph, v in res[fam].items()}, flush=True)
    json.dump(res, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
