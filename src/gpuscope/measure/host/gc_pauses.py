"""Python's garbage collector inside a timed phase: how long it paused the host, and ``--gc-freeze``.

Why: a process that compiled a model (torch.compile, CUDA-graph trees) holds ~0.6-0.9 million tracked Python
objects (FX graphs, guards, generated code), and a full collection walks all of them; where the host is the
bottleneck a collector pause is a slower step. Measured rather than assumed: on an H200
(research/results/2026-11-30-h200-f/README.md) hf-graph runs of Llama-3.2-1B and Llama-3.1-8B paused ~1 us per token
and <0.05 ms per TTFT (generation-0 collections only), and --gc-freeze changed neither TPOT nor TTFT beyond the runs'
spread; a slow eager forward first blamed on the collector was a first-visit cost per KV length (measure/llm/infer.py,
phase d).

``GCPauses`` measures it directly, with ``gc.callbacks`` (called at the start and stop of every collection):
pause seconds and collections per generation over the block. ``freeze()`` (``gc.collect(); gc.freeze()``, as vLLM
does after its CUDA-graph capture) is the fix where pauses do show, done after warm-up.
"""

from __future__ import annotations

import gc
import time


class GCPauses:
    """``with GCPauses() as p: ...``; then ``p.summary()``: seconds paused and collections, per generation."""

    def __init__(self):
        self.pause_s = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._t0 = None

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            g = min(2, int(info.get("generation", 0)))
            self.pause_s[g] += time.perf_counter() - self._t0
            self.collections[g] += 1
            self._t0 = None

    def __enter__(self) -> "GCPauses":
        gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._cb)

    def summary(self) -> dict:
        return {"gc_pause_s": sum(self.pause_s), "gc_pause_s_by_generation": list(self.pause_s),
                "gc_collections_by_generation": list(self.collections)}


def freeze() -> int:
    """Collect once, then move every live object out of the collector's reach; returns how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
