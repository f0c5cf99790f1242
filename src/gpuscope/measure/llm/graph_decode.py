"""gpuscope's graph engine ("gs-graph"): greedy decoding over a static KV cache with the decode step captured
once in a CUDA graph and replayed per token (the approach of gpt-fast; no torch.compile, so no compile time).

Why: plain `generate` is host-bound at small batch (research/results/2026-11-29-h200: ~17 us of host time per kernel, a
Llama-3.1-8B decode step spends ~24 ms on the host against ~5 ms of GPU work). A replayed graph launches the whole
step at once, so the step costs its GPU time.

How:
- a transformers StaticCache of prompt + gen tokens; the prefill runs eagerly and fills it;
- the decode step (model forward on one token per sequence at `cache_position`, then argmax) is captured on the
  first call for this (batch, prompt, gen) and kept on the model with its static input buffers; each later step
  copies the last token and position into those buffers and replays;
- on a device without CUDA graphs (CPU) the same static-cache loop runs eagerly, which is what the CPU tests check
  token for token against `generate`.
Positions beyond the current one are masked by the causal mask transformers builds from `cache_position`; the cache
is reset in place at the start of each call, so the captured graph (which holds its addresses) stays valid.
"""

from __future__ import annotations

import torch


class _Captured:
    def __init__(self, model, batch: int, max_len: int, device: torch.device, use_graph: bool,
                 compile: bool = False):
        from transformers import StaticCache

        from gpuscope.measure.models.hf_model import cache_kwarg

        self.model = model
        # gs-compile: Inductor fuses each chain of HF's elementwise ops (RMSNorm, rotary, SiLU x up) into one
        # kernel; the compiled step is then captured like the eager one. Without it a Llama decoder layer replays
        # ~52 small kernels (H200 profile: 836 per Llama-3.2-1B step; the 723 besides the GEMVs take 1.2-1.5 ms
        # of a 2.4-2.6 ms step, engines.ENGINES["graph-unfused"]).
        self.fwd = torch.compile(model.forward, dynamic=False) if compile else model.forward
        self.cache_kw = cache_kwarg(model)  # "past_key_values", or "cache" where transformers renamed it
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.graph = None
        self.out = None
        self.use_graph = use_graph

    def step_eager(self) -> torch.Tensor:
        o = self.fwd(input_ids=self.token, cache_position=self.pos, use_cache=True, **{self.cache_kw: self.cache})
        return o.logits[:, -1:].argmax(-1)

    def _positions(self) -> list[torch.Tensor]:
        """The per-layer write positions recent transformers keep as device tensors (StaticLayer.cumulative_length,
        advanced in place by each update, so a replayed graph advances them too); older versions use the
        `cache_position` we pass and keep none."""
        layers = getattr(self.cache, "layers", [])
        return [la.cumulative_length for la in layers if isinstance(getattr(la, "cumulative_length", None),
                                                                      torch.Tensor)]

    def capture(self) -> None:
        """Warm up on a side stream (the caching allocator and cuBLAS need it), then capture one step. The warm-up
        steps advance the cache's write positions: they are put back afterwards."""
        saved = [p.clone() for p in self._positions()]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.step_eager()
                # each warm-up writes the current slot again: three steps forward could run past the cache's
                # last slot when few tokens remain (gen 2 on the H200: a device-side assert in the cache update)
                for p, v in zip(self._positions(), saved):
                    p.copy_(v)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.step_eager()

    def step(self) -> torch.Tensor:
        if not self.use_graph:
            return self.step_eager()
        if self.graph is None:
            self.capture()
        self.graph.replay()
        return self.out.clone()


@torch.no_grad()
def static_greedy(model, ids: torch.Tensor, gen: int, use_graph: bool | None = None,
                  compile: bool = False, cache_len: int | None = None) -> torch.Tensor:
    """Greedy decoding of exactly `gen` tokens; returns (batch, prompt + gen) like `generate`. ``compile``: the
    decode step goes through torch.compile (Inductor) before it is captured (engine gs-compile). ``cache_len``: run
    in the kept cache of that many slots (>= prompt + gen), e.g. a TTFT (gen 1) inside the cache of the full run,
    as a server allocates its static cache once; without it a gen-1 call builds a cache of prompt + 1 slots and
    drops it (the H200: 32 layers' lazy cache set-up, ~20 ms of host time for Llama-3.1-8B, which a TTFT measured
    that way counted and the full run, reusing its cache, did not)."""
    batch, prompt = ids.shape
    dev = ids.device
    if use_graph is None:
        use_graph = dev.type == "cuda"
    length = cache_len if cache_len is not None else prompt + gen
    if length < prompt + gen:
        raise ValueError(f"cache_len {length} is shorter than prompt + gen ({prompt + gen})")
    key = (batch, length, use_graph, compile)
    store = getattr(model, "_gpuscope_graph_steps", None)
    if store is None:
        store = {}
        model._gpuscope_graph_steps = store
    if key not in store:  # a gen-1 call runs no decode step: nothing to compile
        store[key] = _Captured(model, batch, length, dev, use_graph, compile and (gen > 1 or cache_len is not None))
    cap = store[key]
    if gen == 1 and cache_len is None:  # a lone prefill into a cache of this length; keep no second cache for it
        store.pop(key)
    cap.cache.reset()  # zeroes the cache and its write positions in place (the graph keeps their addresses)
    pos = torch.arange(prompt, device=dev)
    out = model(input_ids=ids, cache_position=pos, use_cache=True, logits_to_keep=1, **{cap.cache_kw: cap.cache})
    nxt = out.logits[:, -1:].argmax(-1)
    tokens = [nxt]
    for i in range(gen - 1):
        cap.token.copy_(tokens[-1])
        cap.pos.fill_(prompt + i)
        tokens.append(cap.step())
    return torch.cat([ids] + tokens, dim=1)
