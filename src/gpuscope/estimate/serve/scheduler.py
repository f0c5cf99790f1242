"""An iteration-level simulation of a continuous-batching scheduler (vLLM V1, transformers CB, TensorRT-LLM's
in-flight batching share this shape).

Every step: each decoding sequence adds one token; then partial prefills continue and waiting requests are
admitted (FIFO), each taking min(what is left of its prompt, the step's token budget): chunked prefill under a
max-batched-tokens budget. A sequence holds ceil(cached tokens / block_size) blocks; a decoding sequence that
crosses into a new block and finds none free preempts the most recently admitted running request (recompute: its
blocks are freed, it goes back to the front of the queue and later prefills its prompt and what it had generated).
Admission needs the blocks of the chunk it will compute, a free sequence slot (max_num_seqs) and, for transformers,
at least ``safety_margin`` of the blocks free unless it is the step's first request.

Decode-only stretches (no prefill can run: nothing waiting, or nothing admissible) are skipped in one move up to
the next event (a finish, a block boundary, an arrival): the steps' times are the step model at the stretch's mean
context (exact for the attention terms, which are affine in the context). Decoders are kept as offsets from a
global step counter G (generated = G + g_off), so a stretch costs O(1) and each event O(log n).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field


@dataclass
class Seq:
    req: object
    admit: int = 0  # admission order (preemption takes the latest)
    computed: int = 0  # prefill progress of the current (re)prefill, cached prefix included
    target: int = 0  # tokens the current prefill must have in cache: prompt (+ generated after a preemption)
    generated: int = 0
    blocks: int = 0
    g_off: int | None = None  # decoding: generated = G + g_off
    ver: int = 0
    first_s: float | None = None
    finish_s: float | None = None
    preempted: int = 0


@dataclass
class SimResult:
    seqs: list
    duration_s: float
    steps: int
    itl: list = field(default_factory=list)  # (step seconds, tokens emitted at that gap)
    peak_blocks: int = 0
    peak_running: int = 0
    preemptions: int = 0


class Simulator:
    def __init__(self, requests, step, *, num_blocks: int, block_size: int, max_num_seqs: int,
                 max_batched_tokens: int, safety_margin: float = 0.0, concurrency: int | None = None,
                 reserve_full: bool = False, max_skip: int | None = None):
        self.step, self.B, self.nb = step, block_size, num_blocks
        self.max_seqs, self.budget, self.margin = max_num_seqs, max_batched_tokens, safety_margin
        self.seqs = [Seq(r, target=r.prompt, computed=r.cached) for r in requests]
        self.pending = deque(range(len(self.seqs)))  # not yet arrived, in arrival order
        self.concurrency = concurrency
        self.reserve = reserve_full
        self.max_skip = max_skip  # at most this many decode steps in one move (1: step by step; tests compare)
        self.release_at: list = []  # closed loop: (time, index) of requests released by finishes
        if concurrency:
            for _ in range(min(concurrency, len(self.seqs))):
                heapq.heappush(self.release_at, (0.0, self.pending.popleft()))
        self.waiting: deque = deque()
        self.prefilling: list = []
        self.decoding: set = set()
        self.fin_heap, self.blk_heap = [], []
        self.t, self.G, self.A, self.free = 0.0, 0, 0, num_blocks
        self.order, self.steps, self.done, self.preemptions = 0, 0, 0, 0
        self.itl, self.peak_blocks, self.peak_running = [], 0, 0
        # host time in series per finishing request, after its last token (profiles.ServeEngine.host_per_finish_s)
        self.finish_cost = getattr(getattr(step, "engine", None), "host_per_finish_s", 0.0)

    # ---- arrivals --------------------------------------------------------------------------------------
    def _next_arrival(self) -> float | None:
        if self.concurrency:
            return self.release_at[0][0] if self.release_at else None
        return self.seqs[self.pending[0]].req.arrival_s if self.pending else None

    def _admit_arrivals(self) -> None:
        if self.concurrency:
            while self.release_at and self.release_at[0][0] <= self.t:
                sent, i = heapq.heappop(self.release_at)
                self.seqs[i].req.arrival_s = sent  # a closed-loop client's clock starts when it sends (vLLM)
                self.waiting.append(i)
            return
        while self.pending and self.seqs[self.pending[0]].req.arrival_s <= self.t:
            self.waiting.append(self.pending.popleft())

    # ---- blocks ------------------------------------------------------------------------------------------
    def _grow(self, i: int, tokens: int) -> bool:
        """Give sequence i the blocks for ``tokens`` cached tokens, if free."""
        s = self.seqs[i]
        need = -(-tokens // self.B) - s.blocks
        if need > self.free:
            return False
        if need > 0:
            s.blocks += need
            self.free -= need
        return True

    def _release(self, i: int) -> None:
        s = self.seqs[i]
        self.free += s.blocks
        s.blocks = 0
        if s.g_off is not None:
            self.decoding.discard(i)
            self.A -= s.req.prompt + s.g_off
            s.g_off, s.ver = None, s.ver + 1

    def _preempt_for(self, i: int) -> bool:
        """Free blocks for decoder i by preempting the latest-admitted running requests; False if i itself went."""
        while True:
            running = list(self.decoding) + self.prefilling
            victim = max(running, key=lambda j: self.seqs[j].admit)
            v = self.seqs[victim]
            generated = v.generated if v.g_off is None else self.G + v.g_off
            self._release(victim)
            if victim in self.prefilling:
                self.prefilling.remove(victim)
            v.generated, v.computed, v.target, v.preempted = generated, 0, v.req.prompt + generated, v.preempted + 1
            self.preemptions += 1
            self.waiting.appendleft(victim)
            if victim == i:
                return False
            if self._grow(i, self._cache_len(i) + 1):
                return True

    def _cache_len(self, i: int) -> int:
        s = self.seqs[i]
        return s.req.prompt + self.G + s.g_off - 1

    # ---- decoders ------------------------------------------------------------------------------------
    def _join_decode(self, i: int) -> None:
        s = self.seqs[i]
        s.g_off = s.generated - self.G
        s.ver += 1
        self.decoding.add(i)
        self.A += s.req.prompt + s.g_off
        heapq.heappush(self.fin_heap, (s.req.out - s.g_off, s.ver, i))
        self._push_boundary(i)

    def _push_boundary(self, i: int) -> None:
        s = self.seqs[i]
        c = self._cache_len(i)  # cached before the step at G; the step that caches token c + 1 needs block c // B + 1
        nxt = c if c % self.B == 0 else (c // self.B + 1) * self.B
        heapq.heappush(self.blk_heap, (self.G + (nxt - c), s.ver, i))

    def _valid(self, heap) -> None:
        while heap and (heap[0][2] not in self.decoding or self.seqs[heap[0][2]].ver != heap[0][1]):
            heapq.heappop(heap)

    def _allocate_boundaries(self) -> None:
        """Decoders whose next token opens a new block at this step get it (or preempt)."""
        self._valid(self.blk_heap)
        while self.blk_heap and self.blk_heap[0][0] <= self.G:
            _, _, i = heapq.heappop(self.blk_heap)
            if self._grow(i, self._cache_len(i) + 1) or self._preempt_for(i):
                self._push_boundary_after(i)
            self._valid(self.blk_heap)

    def _push_boundary_after(self, i: int) -> None:
        if i in self.decoding:
            s = self.seqs[i]
            heapq.heappush(self.blk_heap, (self.G + self.B, s.ver, i))

    # ---- one step with prefill -------------------------------------------------------------------------
    def _admissible(self) -> bool:
        if self.prefilling:
            return True
        if not self.waiting or len(self.decoding) >= self.max_seqs:
            return False
        s = self.seqs[self.waiting[0]]
        chunk = min(s.target - s.computed, max(1, self.budget - len(self.decoding)))
        need = -(-((s.target + s.req.out - s.generated) if self.reserve else s.computed + chunk) // self.B) - s.blocks
        return need <= self.free and (not self.decoding or self.free >= self.margin * self.nb)

    def _schedule_prefills(self, budget: int) -> list:
        """(index, chunk) of the prefills this step runs: partial ones first, then waiting ones (FIFO)."""
        chunks = []
        for i in list(self.prefilling):
            s = self.seqs[i]
            c = min(s.target - s.computed, budget)
            if c > 0 and self._grow(i, s.computed + c):
                chunks.append((i, c))
                budget -= c
        while self.waiting and budget > 0 and len(self.decoding) + len(self.prefilling) < self.max_seqs:
            if (chunks or self.decoding) and self.free < self.margin * self.nb:
                break  # transformers' safety margin: no new prompt while the cache is nearly full
            i = self.waiting[0]
            s = self.seqs[i]
            c = min(s.target - s.computed, budget)
            if not self._grow(i, s.target + s.req.out - s.generated if self.reserve else s.computed + c):
                break
            self.waiting.popleft()
            s.admit, self.order = self.order, self.order + 1
            self.prefilling.append(i)
            chunks.append((i, c))
            budget -= c
        return chunks

    def _mixed_step(self) -> None:
        self._allocate_boundaries()
        n = len(self.decoding)
        chunks = self._schedule_prefills(self.budget - n)
        done = [i for i, c in chunks if self.seqs[i].computed + c >= self.seqs[i].target]
        tokens = n + sum(c for _, c in chunks)
        if not tokens:  # partial prefills hold blocks none of them can grow past: send the latest back to wait
            i = max(self.prefilling, key=lambda j: self.seqs[j].admit)
            if len(self.prefilling) == 1:
                raise RuntimeError("a request needs more KV blocks than the cache holds")
            self.prefilling.remove(i)
            self._release(i)
            self.seqs[i].computed = 0
            self.waiting.appendleft(i)
            return
        kv = self.A + n * self.G + n + sum(self.seqs[i].computed + c for i, c in chunks)
        pairs = kv - sum(self.seqs[i].computed + c for i, c in chunks) + sum(
            c * self.seqs[i].computed + c * (c + 1) / 2 for i, c in chunks)
        dt = self.step.step_s(tokens, n + len(done), kv, pairs, n + len(chunks), decode_only=not chunks)
        self._advance(dt, 1, n)
        for i, c in chunks:
            self.seqs[i].computed += c
        for i in done:
            self.prefilling.remove(i)
            s = self.seqs[i]
            s.generated += 1
            if s.first_s is None:
                s.first_s = self.t
            if s.generated >= s.req.out:
                self._finish(i)
            else:
                self._join_decode(i)

    # ---- decode-only stretches ---------------------------------------------------------------------------
    def _decode_stretch(self) -> None:
        self._allocate_boundaries()
        n = len(self.decoding)
        if not n:
            return
        self._valid(self.fin_heap)
        self._valid(self.blk_heap)
        k = self.fin_heap[0][0] - self.G
        if self.blk_heap:
            k = min(k, max(1, self.blk_heap[0][0] - self.G))
        k = max(1, min(k, self.max_skip or k))
        nxt = self._next_arrival()

        def time(j: int) -> float:
            kv = self.A + n * (self.G + (j - 1) / 2.0) + n
            return j * self.step.step_s(n, n, kv, kv, n, decode_only=True)

        if nxt is not None and self.t + time(k) > nxt:
            lo, hi = 1, k  # the fewest steps that pass the arrival
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (mid + 1, hi) if self.t + time(mid) <= nxt else (lo, mid)
            k = lo
        one = lambda j: self.step.step_s(n, n, self.A + n * (self.G + j) + n, self.A + n * (self.G + j) + n, n,
                                         decode_only=True)
        # the gaps of the stretch, for ITL percentiles: its first and last step, half the tokens each
        gaps = [(one(0), n * k)] if k == 1 else [(one(0), n * k / 2), (one(k - 1), n * k / 2)]
        self._advance(time(k), k, n, gaps)

    def _advance(self, dt: float, k: int, n: int, gaps: list | None = None) -> None:
        self.t += dt
        self.G += k if n else 0
        self.steps += k
        if n:
            self.itl.extend(gaps or [(dt / k, n * k)])
        used = self.nb - self.free
        self.peak_blocks = max(self.peak_blocks, used)
        self.peak_running = max(self.peak_running, len(self.decoding) + len(self.prefilling))
        self._valid(self.fin_heap)
        while self.fin_heap and self.fin_heap[0][0] <= self.G:
            _, _, i = heapq.heappop(self.fin_heap)
            s = self.seqs[i]
            s.generated = self.G + s.g_off
            self._finish(i)
            self._valid(self.fin_heap)

    def _finish(self, i: int) -> None:
        s = self.seqs[i]
        s.finish_s = self.t  # its last token's stamp; the host's finishing work delays the requests after it
        self.t += self.finish_cost
        self._release(i)
        self.done += 1
        if self.concurrency and self.pending:
            heapq.heappush(self.release_at, (self.t, self.pending.popleft()))

    def run(self) -> SimResult:
        n = len(self.seqs)
        while self.done < n:
            self._admit_arrivals()
            if not self.decoding and not self.prefilling and not self.waiting:
                self.t = max(self.t, self._next_arrival())
                continue
            if self._admissible():
                self._mixed_step()
            elif self.decoding:
                self._decode_stretch()
            else:
                raise RuntimeError("a request can never be scheduled (it needs more blocks than the cache has)")
        return SimResult(self.seqs, self.t, self.steps, self.itl, self.peak_blocks, self.peak_running,
                         self.preemptions)
