"""Does the host probe (measure/host/probe.py) follow the host's speed at the timescale of a workload?

Round after round: the probe, a host-bound inference workload (tiny GPT-2 generate of 8 tokens, median of 5), the
probe again, a host-bound training step (GPT-2 at its real widths, mb 2, s128, amp-bf16, median of 3). The series
show how fast the host's speed moves and whether a probe next to a workload predicts its time.
Usage (GPU machine): PYTHONPATH=src python3 research/scripts/gpu_probe_track.py --out $OUT/probe_track.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from gpuscope.measure.device.device import Device, pick_device
from gpuscope.measure.models.hf_model import build_model
from gpuscope.measure.host.overhead import TINY, timed_phases
from gpuscope.measure.host.probe import host_probe, host_probe_train
from gpuscope.measure.models.train_step import PRECISIONS, step_functions
from gpuscope.specs.models import preset_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device")
    ap.add_argument("--rounds", type=int, default=120)
    ap.add_argument("--phases", action="store_true", help="also time one step's phases between backward probes")
    args = ap.parse_args()
    dev = Device(pick_device(args.device))
    gen_model, _ = build_model(dict(TINY["gpt2"], n_layer=2), dev, torch.bfloat16 if dev.type != "cpu" else torch.float32)
    gen_model.eval()
    ids = torch.randint(0, 256, (2, 32), device=dev.torch_device)

    @torch.no_grad()
    def infer() -> float:
        ts = []
        for _ in range(5):
            dev.synchronize()
            t0 = time.perf_counter()
            gen_model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                               min_new_tokens=8, do_sample=False)
            dev.synchronize()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    param_dtype, ac_dtype = PRECISIONS["amp-bf16"]
    train_model, cfg = build_model(preset_config("gpt2"), dev, param_dtype, use_cache=False)
    train_model.train()
    opt = torch.optim.AdamW(train_model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    batch = torch.randint(0, cfg.vocab_size, (2, 128), device=dev.torch_device)
    fwd, bwd, opt_step = step_functions(train_model, opt, None, ac_dtype, dev, iter(lambda: batch, None), {}, ["x"])

    def train() -> float:
        ts = []
        for _ in range(3):
            dev.synchronize()
            t0 = time.perf_counter()
            loss = fwd()
            bwd(loss)
            opt_step()
            dev.synchronize()
            ts.append(time.perf_counter() - t0)
            del loss
        return statistics.median(ts)

    def train_phases() -> dict:  # one step, a synchronize between its phases: which phase the probe follows
        return dict(zip(("forward", "backward", "optimizer"), timed_phases(dev, fwd, bwd, opt_step)))

    # a second probe that also runs backward (autograd's device thread): the training probe, on an fp32 copy of
    # the probe model, median of 20 (bench and calibrate run it on the bf16 one, median of 15)
    tiny, _ = build_model(dict(TINY["llama"], num_hidden_layers=2), dev, torch.float32, use_cache=False)

    def probe_bwd() -> float:
        return host_probe_train(dev, iters=20, model=tiny)

    for _ in range(3):  # warm-up
        host_probe(dev), infer(), train()
    rows = []
    t_start = time.perf_counter()
    for _ in range(args.rounds):
        row = {"t": time.perf_counter() - t_start, "probe_a": host_probe(dev), "infer": infer()}
        row["probe_b"] = host_probe(dev)
        row["train"] = train()
        if args.phases:
            row["probe_bwd_a"] = probe_bwd()
            row["phases"] = train_phases()
            row["probe_bwd_b"] = probe_bwd()
        rows.append(row)
    json.dump({"device_name": dev.device_name(), "rounds": rows}, open(args.out, "w"), indent=1)
    print(len(rows), "rounds in", round(time.perf_counter() - t_start, 1), "s")


if __name__ == "__main__":
    main()
