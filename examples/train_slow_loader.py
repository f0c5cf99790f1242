"""A training script with a deliberately slow data loader, for `gpuscope doctor` (issue 6's acceptance case).

Each sample costs `--sample-ms` of CPU work in `Dataset.__getitem__` (standing in for decoding and tokenising raw
text). With the defaults (`--workers 0`, no pinned memory) the GPU waits for every batch; the fix the doctor names
(`--workers 8 --pin-memory --prefetch 4`) moves that work into worker processes, off the training loop.

    gpuscope doctor -- python examples/train_slow_loader.py                  # the stall, diagnosed
    gpuscope doctor -- python examples/train_slow_loader.py --workers 8 --pin-memory --prefetch 4   # the fix
    python examples/train_slow_loader.py --workers 8 --pin-memory           # without the profiler

The model is a small Llama (random weights, no download; `--hidden/--layers` choose its size) trained with AMP
bf16 and fused AdamW on CUDA (fp32 on CPU). On a CPU the defaults are CPU-sized (`CPU_SIZES`: a 0.3M-parameter
model, 8 x 64 tokens, 16 steps, 25 ms per sample; about a minute and well under 2 GB under the doctor): the GPU sizes (`GPU_SIZES`, a
124M-parameter model at 8 x 1024 tokens) need about 10 GB of activations and minutes per step on a CPU. The last line printed is JSON: tokens/s and the median step time over
the steps after `--warmup`, measured from the loop's own wall clock (the batch fetch included, as a user sees it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


GPU_SIZES = {"batch": 8, "seq": 1024, "steps": 30, "warmup": 5, "hidden": 768, "layers": 12, "vocab": 32000,
             "sample_ms": 10.0}
# On a CPU the model's step is the CPU's own work too: a 1-layer model and 25 ms per sample keep the loader the
# bottleneck on a loaded 2-core host (a 2-layer model at 10 ms read 6% of the window in the loader with load 10).
CPU_SIZES = {"batch": 8, "seq": 64, "steps": 16, "warmup": 3, "hidden": 64, "layers": 1, "vocab": 2000,
             "sample_ms": 25.0}


class SlowTokens(Dataset):
    """Random token sequences; each costs `sample_ms` of busy CPU work first (a real computation, not a sleep, so
    worker processes parallelise it the way they parallelise a tokenizer)."""

    def __init__(self, n: int, seq: int, vocab: int, sample_ms: float):
        self.n, self.seq, self.vocab, self.sample_s = n, seq, vocab, sample_ms / 1e3

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        t0, h = time.perf_counter(), i
        while time.perf_counter() - t0 < self.sample_s:
            h = (h * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        g = torch.Generator().manual_seed(h & 0x7FFFFFFF)
        return torch.randint(0, self.vocab, (self.seq,), generator=g)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--prefetch", type=int, default=None, help="DataLoader prefetch_factor (needs --workers > 0).")
    for k in GPU_SIZES:
        p.add_argument(f"--{k.replace('_', '-')}", type=type(GPU_SIZES[k]), default=None,
                       help=f"default {GPU_SIZES[k]} on CUDA, {CPU_SIZES[k]} on CPU")
    p.add_argument("--device", default=None)
    a = p.parse_args(argv)

    from transformers import LlamaConfig, LlamaForCausalLM

    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sizes = GPU_SIZES if dev.type == "cuda" else CPU_SIZES
    for k, v in sizes.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if dev.type != "cuda" and sizes is CPU_SIZES:
        print(f"{dev.type}: CPU-sized defaults (hidden {a.hidden}, {a.layers} layer(s), batch {a.batch} x {a.seq} "
              f"tokens, {a.steps} steps, {a.sample_ms:g} ms per sample); --hidden/--layers/--seq/--batch/--sample-ms "
              "change them", file=sys.stderr)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=a.hidden, intermediate_size=a.hidden * 8 // 3 // 64 * 64, num_hidden_layers=a.layers,
                      num_attention_heads=max(1, a.hidden // 64), num_key_value_heads=max(1, a.hidden // 64),
                      vocab_size=a.vocab, max_position_embeddings=a.seq)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    ds = SlowTokens(a.batch * (a.steps + a.warmup), a.seq, a.vocab, a.sample_ms)
    kw = {"num_workers": a.workers, "pin_memory": a.pin_memory}
    if a.workers > 0:
        kw.update(persistent_workers=False, prefetch_factor=a.prefetch or 2)
    loader = DataLoader(ds, batch_size=a.batch, **kw)
    amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")

    marks = [time.perf_counter()]
    for x in loader:
        x = x.to(dev, non_blocking=a.pin_memory)
        with amp:
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        marks.append(time.perf_counter())
    steps = [b - a_ for a_, b in zip(marks, marks[1:])][a.warmup:]
    med = statistics.median(steps)
    out = {"workers": a.workers, "pin_memory": a.pin_memory, "prefetch": kw.get("prefetch_factor"),
           "sample_ms": a.sample_ms, "batch": a.batch, "seq": a.seq, "device": str(dev), "steps_timed": len(steps),
           "step_s_median": med, "tokens_per_s": a.batch * a.seq / med, "loss": loss.item()}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
