"""DDP communication hooks for gradient compression (measure/distributed/compression.py compares them on one run),
wrapped to count the bytes each bucket hands to its collective.

Hooks (``torch.distributed.algorithms.ddp_comm_hooks``):
- ``none``: DDP's built-in all-reduce of each fp32 gradient bucket.
- ``fp16`` / ``bf16``: ``default_hooks.fp16_compress_hook`` / ``bf16_compress_hook``: bucket cast to 16 bits,
  divided by world size, all-reduced, cast back.
- ``powersgdR``: ``powerSGD_hook.powerSGD_hook`` with ``PowerSGDState(matrix_approximation_rank=R,
  start_powerSGD_iter=start, min_compression_rate=2, use_error_feedback=True, warm_start=True, seed=seed)``
  (Vogels et al. 2019). The first ``start`` iterations are plain all-reduce (PowerSGD's rule); timing starts
  after ``warmup`` >= ``start`` steps so only compressed steps are timed.
- ``sign``: :func:`sign_ef_hook`, written here: 1-bit sign compression with error feedback (EF-SignSGD, Karimireddy
  et al. 2019, "Error Feedback Fixes SignSGD"), see its docstring. The signs travel packed 8 per byte, with each
  rank's fp32 scale, through all_gather (a sum of 1-bit signs is not 1 bit, so all-reduce cannot carry them).

Bytes sent per step (per rank; the payload handed to the collective, summed over buckets: all_reduce for every hook
but ``sign``, all_gather for ``sign``). With parameter tensors p of d_p elements, gradient element size e (4 for fp32
gradients), and B buckets of d_b elements:
- none:        sum_p d_p * e
- fp16, bf16:  sum_p d_p * 2
- powersgdR:   sum_{p compressed} (n_p + m_p) * r_p * e  +  sum_{p not compressed} d_p * e,
               matrix view n_p = shape[0], m_p = d_p / n_p, r_p = min(R, n_p, m_p), compressed iff
               (n_p + m_p) * r_p * 2 < n_p * m_p (PowerSGD's ``_should_compress`` with min_compression_rate 2;
               1-D tensors are never compressed). P (n x r) and Q (m x r) are all-reduced in the bucket dtype.
- sign:        sum_b (ceil(d_b / 8) + 4): one bit per element, the bucket padded to a whole byte, plus the
               rank's fp32 scale, handed to all_gather by each rank (= ceil(sum_p d_p / 8) + 4 B when every
               bucket holds a multiple of 8 elements; about 1/32 of ``none``).
``compression_ratio`` is ``none``'s payload over the hook's. On the wire the collectives differ:
``wire_bytes_per_step_ring`` is what each rank receives per step, ``bytes_per_step * 2 (N-1)/N`` for a ring
all-reduce (every hook but ``sign``), ``bytes_per_step * (N-1)`` for ``sign``'s all_gather (N payloads of which
(N-1) come from the other ranks, i.e. (N-1)/N * N * payload). So the wire ratio of ``none`` over ``sign`` is
about 64/N: 32x at N = 2, 8x at N = 8, and the all_gather loses its edge past N = 64.
The hooks here are wrapped to count bytes per bucket as they run with these formulas (so the real bucket layout
and PowerSGD's warm-up iterations are accounted); ``bytes_per_step`` is the last (steady-state) step.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

MIN_COMPRESSION_RATE = 2


def pack_signs(bits: torch.Tensor) -> torch.Tensor:
    """Booleans (True = +1) packed 8 per byte into uint8, ceil(d / 8) bytes: element 8k + j is bit j of byte k;
    the last byte is padded with 0 bits."""
    bits = bits.reshape(-1)
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    shifts = torch.arange(8, dtype=torch.uint8, device=bits.device)
    return (bits.view(-1, 8).to(torch.uint8) << shifts).sum(-1, dtype=torch.uint8)


def unpack_signs(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """Inverse of :func:`pack_signs` along the last dimension: (..., ceil(d / 8)) uint8 -> (..., d) fp32 of +1
    (bit 1) and -1 (bit 0)."""
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    bits = (packed.unsqueeze(-1) >> shifts) & 1
    return bits.flatten(-2)[..., :numel].float().mul_(2).sub_(1)


def _all_gather_flat(out: torch.Tensor, inp: torch.Tensor, group):
    """Async all_gather of equal-sized 1-D tensors into ``out`` (world * n, concatenated: the form gloo accepts as
    well as NCCL); ``all_gather_single`` where torch has it (``all_gather_into_tensor`` is deprecated there)."""
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out, inp, group=group, async_op=True)


class SignState:
    """State of :func:`sign_ef_hook`: the process group, one error-feedback buffer per bucket index, and the size
    of the last payload handed to all_gather (bytes, for checking the byte formula)."""

    def __init__(self, process_group=None):
        self.process_group = process_group
        self.error: dict[int, torch.Tensor] = {}
        self.last_payload_bytes: int | None = None


def sign_ef_hook(state: SignState, bucket) -> torch.futures.Future:
    """1-bit sign compression with error feedback, one scale per bucket and rank.

    On rank i, with bucket gradient g_i (d elements) and the bucket's carried error e_i (zero at first):
      x_i = g_i + e_i;  s_i = mean |x_i| (fp32);  c_i = +1 where x_i >= 0, -1 where x_i < 0 (1 bit, no zero level);
      e_i <- x_i - s_i * c_i                    (error feedback: what this rank's compression dropped)
    The bits of c_i are packed 8 per byte (:func:`pack_signs`, ceil(d / 8) bytes) and s_i's 4 bytes appended; that
    payload is all_gathered (asynchronously), and every rank decompresses the same N payloads in the same order:
      g <- (1/N) * sum_i s_i * c_i              (the bucket's averaged gradient DDP expects, each rank's signs
                                                 with its own scale; identical on every rank).
    Payload per bucket and rank: ceil(d / 8) + 4 bytes (vs 4 d for fp32); each rank receives (N-1) of them.
    """
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    buf = bucket.buffer()
    idx = bucket.index()
    x = buf.detach().float()
    # DDP rebuilds its buckets after the first iteration (in the order gradients became ready), so an index can
    # name a bucket of another size: the residual then belongs to a layout that no longer exists and restarts at
    # zero (found on two H200s: a 16.8M-element bucket met the 1.24G-element residual of the first iteration's).
    if idx in state.error and state.error[idx].numel() == x.numel():
        x = x + state.error[idx]
    numel = x.numel()
    positive = x >= 0
    scale = x.abs().mean().reshape(1)
    state.error[idx] = torch.where(positive, x - scale, x + scale)  # x - s c, c = +-1
    signs = pack_signs(positive)
    nsign = signs.numel()
    payload = torch.cat([signs, scale.view(torch.uint8)])
    state.last_payload_bytes = payload.numel()
    gathered = torch.empty(world * payload.numel(), dtype=torch.uint8, device=payload.device)
    fut = _all_gather_flat(gathered, payload, group).get_future()

    def decompress(f):
        f.value()  # raises if the all_gather failed
        rows = gathered.view(world, -1)
        scales = rows[:, nsign:].reshape(-1).clone().view(torch.float32)  # (world,) s_i, bit-exact
        acc = None
        for i in range(world):  # one rank's unpacked signs at a time: O(d) memory, the same order on every rank
            term = unpack_signs(rows[i, :nsign], numel).mul_(scales[i])
            acc = term if acc is None else acc.add_(term)
        buf.copy_(acc.div_(world).view_as(buf))
        return buf

    return fut.then(decompress)


def powersgd_split(shape, rank: int) -> tuple[bool, int, int]:
    """(compressed?, uncompressed elements, elements sent) of one tensor under PowerSGD rank ``rank``."""
    n = int(shape[0]) if len(shape) else 1
    numel = int(math.prod(shape)) if len(shape) else 1
    m = numel // n if n else 0
    r = min(n, m, rank)
    sent = (n + m) * r
    ok = sent * MIN_COMPRESSION_RATE < n * m
    return ok, numel, sent if ok else numel


def bucket_bytes(scheme: str, shapes: list, grad_elem: int, world: int, powersgd_active: bool = True) -> int:
    """Payload bytes one bucket hands to the collective under ``scheme`` (all_reduce; all_gather for ``sign``;
    formulas in the module docstring)."""
    numel = sum(int(math.prod(s)) if len(s) else 1 for s in shapes)
    if scheme == "none":
        return numel * grad_elem
    if scheme in ("fp16", "bf16"):
        return numel * 2
    if scheme.startswith("powersgd"):
        if not powersgd_active:
            return numel * grad_elem
        return sum(powersgd_split(s, int(scheme[8:]))[2] for s in shapes) * grad_elem
    if scheme == "sign":
        return (numel + 7) // 8 + 4
    raise ValueError(scheme)


def static_bytes_per_step(scheme: str, model, world: int, n_buckets: int = 1, bucket_numels=None) -> int:
    """The same formula from the model's parameters. For ``sign`` (B = n_buckets): ceil(D / 8) + 4 B with D the
    model's trainable elements, plus the per-bucket byte padding sum_b ceil(d_b / 8) - ceil(sum_b d_b / 8) taken
    from the bucket layout ``bucket_numels`` when given (0 when every bucket holds a multiple of 8 elements)."""
    shapes = [tuple(p.shape) for p in model.parameters() if p.requires_grad]
    e = next(model.parameters()).element_size()
    b = bucket_bytes(scheme, shapes, e, world)
    if scheme != "sign":
        return b
    pad = (sum((n + 7) // 8 for n in bucket_numels) - (sum(bucket_numels) + 7) // 8) if bucket_numels else 0
    return b + 4 * (n_buckets - 1) + pad


def wire_bytes_per_step(scheme: str, payload: int | None, world: int) -> float | None:
    """Bytes each rank receives per step: ring all-reduce 2 (N-1)/N x payload; all_gather (``sign``) receives the
    other ranks' payloads, (N-1)/N * N * payload = (N-1) x payload."""
    if payload is None:
        return None
    if scheme == "sign":
        return float(payload * (world - 1))
    return payload * 2 * (world - 1) / world


class Counter:
    def __init__(self):
        self.per_step: list[int] = []
        self.buckets: list[int] = []
        self.bucket_numels: list[int] = []  # the last step's bucket layout (elements per bucket)
        self._bytes = 0
        self._n = 0
        self._numels: list[int] = []

    def add(self, nbytes: int, numel: int | None = None) -> None:
        self._bytes += nbytes
        self._n += 1
        if numel is not None:
            self._numels.append(numel)

    def end_step(self) -> None:
        self.per_step.append(self._bytes)
        self.buckets.append(self._n)
        self.bucket_numels = self._numels
        self._bytes, self._n, self._numels = 0, 0, []


def make_hook(scheme: str, counter: Counter, world: int, seed: int, start_iter: int):
    """(state, hook) for DDP.register_comm_hook, the hook counting bytes per bucket before delegating."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if scheme == "fp16":
        state, inner = None, default_hooks.fp16_compress_hook
    elif scheme == "bf16":
        state, inner = None, default_hooks.bf16_compress_hook
    elif scheme.startswith("powersgd"):
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=int(scheme[8:]),
                                            start_powerSGD_iter=start_iter, min_compression_rate=MIN_COMPRESSION_RATE,
                                            use_error_feedback=True, warm_start=True, random_seed=seed)
        inner = powerSGD_hook.powerSGD_hook
    elif scheme == "sign":
        state, inner = SignState(), sign_ef_hook
    else:
        raise ValueError(scheme)

    def hook(st, bucket):
        shapes = [tuple(g.shape) for g in bucket.gradients()]
        active = not scheme.startswith("powersgd") or st.iter >= st.start_powerSGD_iter
        numel = sum(int(math.prod(x)) if len(x) else 1 for x in shapes)
        counter.add(bucket_bytes(scheme, shapes, bucket.buffer().element_size(), world, active), numel)
        return inner(st, bucket)

    return state, hook
