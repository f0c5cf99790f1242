"""A training script with a deliberately slow data loader, for `gpuscope doctor` (issue 6's acceptance case).

Each sample costs `--sample-ms` of CPU work in `Dataset.__getitem__` (standing in for decoding and tokenising raw
text). With the defaults (`--workers 0`, no pinned memory) the GPU waits for every batch; the fix the doctor names
(`--workers 8 --pin-memory --prefetch 4`) moves that work into worker processes, off the training loop.

    gpuscope doctor -- python examples/train_slow_loader.py                  # the stall, diagnosed
    gpuscope doctor -- python examples/train_slow_loader.py --workers 8 --pin-memory --prefetch 4   # the fix
    python examples/train_slow_loader.py --workers 8 --pin-memory           # without the profiler

The model is a small Llama (random weights, no download; `--hidden/--layers` choose its size) trained with AMP
bf16 and fused AdamW on CUDA (fp32 on CPU). The last line printed is JSON: tokens/s and the median step time over
the steps after `--warmup`, measured from the loop's own wall clock (the batch fetch included, as a user sees it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset


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
    p.add_argument("--sample-ms", type=float, default=10.0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--device", default=None)
    a = p.parse_args(argv)

    from transformers import LlamaConfig, LlamaForCausalLM

    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
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
