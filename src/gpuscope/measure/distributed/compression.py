"""Gradient compression under DDP (torchrun worker): communication hooks compared on the same run.

    python -m torch.distributed.run --standalone --nproc-per-node N -m gpuscope.measure.distributed.compression \
        --model llama-3.2-1b --micro-batch 4 --seq 1024 --steps 12 --hooks none,fp16,bf16,powersgd1,powersgd4,sign

Each variant trains the SAME model (same seed, so the same initial weights), on the SAME data (each rank cycles
through its own fixed pool of ``pool`` batches, the same for every variant, so the loss actually falls and the
trajectories can be compared), for the same ``steps`` optimizer steps (AdamW, lr ``lr``). A reference run with no
hook comes first; every variant (``none`` included: its deviation is the run-to-run noise floor, exactly 0 on CPU,
small on GPU where kernels are not deterministic) is compared with it through the loss averaged over ranks:
``loss_dev_final = |loss_T - ref_T|``, ``loss_dev_max = max_t |loss_t - ref_t|`` (and relative to ref).

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

import argparse
import contextlib
import math
import sys

import torch
import torch.distributed as dist

from gpuscope.measure.device.device import Device, summarize
from gpuscope.measure.distributed.case import add_model_and_device, read_case
from gpuscope.measure.distributed.train import env_ranks, gather, make_batches, worker_main
from gpuscope.measure.models.hf_model import build_model, case_config, model_bytes, vocab_size
from gpuscope.measure.llm.infer import _release
from gpuscope.measure.llm.train import PRECISIONS, optimizer_step

HOOKS = ("none", "fp16", "bf16", "powersgd1", "powersgd2", "powersgd4", "sign")
MIN_COMPRESSION_RATE = 2


def parse_hooks(spec) -> list[str]:
    items = spec if isinstance(spec, (list, tuple)) else str(spec).split(",")
    out = []
    for h in (str(x).strip().lower() for x in items):
        if not h:
            continue
        if h not in HOOKS and not (h.startswith("powersgd") and h[8:].isdigit() and int(h[8:]) > 0):
            raise ValueError(f"hooks: '{h}' is not one of {', '.join(HOOKS)} (powersgdR for any rank R >= 1)")
        if h not in out:
            out.append(h)
    if not out:
        raise ValueError("hooks: none given")
    return out


# --- the 1-bit hook ------------------------------------------------------------------------------------------------
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


# --- bytes per bucket ------------------------------------------------------------------------------------------------
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


# --- one variant -----------------------------------------------------------------------------------------------------
def run_variant(scheme: str | None, case: dict, dev: Device, state: dict) -> dict:
    """Train ``steps`` steps under DDP with ``scheme`` (None = reference, no hook); this rank's numbers, with the
    per-step loss averaged over ranks."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, _ = env_ranks()
    B, S = int(case["micro_batch"]), int(case["seq"])
    steps, warmup = int(case["steps"]), int(case["warmup"])
    seed = int(case.get("seed", 0))
    param_dtype, ac_dtype = PRECISIONS[case["precision"]]
    name = scheme or "reference"
    state["phase"] = f"{name}/load"
    torch.manual_seed(seed)
    model, config = build_model(case_config(case), dev, param_dtype, case.get("attn", "sdpa"), use_cache=False)
    model.train()
    kw = {"bucket_cap_mb": float(case.get("bucket_cap_mb", 25))}
    if dev.type == "cuda":
        kw["device_ids"] = [dev.torch_device.index]
    ddp = DDP(model, **kw)
    counter = Counter()
    if scheme not in (None, "none"):
        hstate, hook = make_hook(scheme, counter, world, seed, int(case["start_powersgd_iter"]))
        ddp.register_comm_hook(hstate, hook)
    fused = dev.type == "cuda"
    opt = torch.optim.AdamW(ddp.parameters(), lr=float(case.get("lr", 1e-3)), fused=fused)
    scaler = torch.amp.GradScaler(dev.type, init_scale=8192) if ac_dtype is torch.float16 else None
    pool = make_batches(vocab_size(config), B, S, max(1, int(case.get("pool", 4))), seed, rank, dev)
    losses = torch.zeros(steps, device=dev.torch_device)

    def autocast():
        return torch.autocast(device_type=dev.type, dtype=ac_dtype) if ac_dtype else contextlib.nullcontext()

    dist.barrier()
    st = dev.step_timer()
    st.start()
    for t in range(steps):
        state["phase"] = f"{name}/step{t}"
        ids = pool[t % len(pool)]
        with autocast():
            loss = ddp(input_ids=ids, labels=ids, use_cache=False).loss
        (scaler.scale(loss) if scaler else loss).backward()
        optimizer_step(opt, scaler)
        losses[t] = loss.detach().float()
        st.mark()
        counter.end_step()
    times = st.times_s()
    dist.all_reduce(losses)  # SUM (gloo has no AVG)
    losses = (losses / world).tolist()
    timed = times[warmup:] or times
    s = summarize(timed)
    if scheme in (None, "none"):
        counter.per_step = [static_bytes_per_step("none", model, world)] * steps
    out = {"hook": name, "step_s": s["median"], "step_s_min": s["min"], "step_s_max": s["max"],
           "samples_s": times, "losses": losses,
           "bytes_per_step": counter.per_step[-1] if counter.per_step else None,
           "bytes_per_step_all": counter.per_step, "buckets_per_step": counter.buckets[-1] if counter.buckets else None,
           "bytes_formula_check": static_bytes_per_step(scheme or "none", model, world,
                                                        counter.buckets[-1] if counter.buckets else 1,
                                                        counter.bucket_numels)}
    if scheme in (None, "none"):
        out["buckets_per_step"] = None
    out["wire_bytes_per_step_ring"] = wire_bytes_per_step(scheme or "none", out["bytes_per_step"], world)
    if scaler:
        out["grad_scale"] = float(scaler.get_scale())
    state["model_bytes"] = model_bytes(model)
    del ddp, model, opt
    _release(dev)
    return out


def deviations(ref: list[float], var: list[float]) -> dict:
    d = [abs(a - b) for a, b in zip(var, ref)]
    fin = all(math.isfinite(x) for x in var)
    return {"loss_final": var[-1], "loss_dev_final": d[-1], "loss_dev_max": max(d),
            "loss_dev_final_rel": d[-1] / abs(ref[-1]) if ref[-1] else None, "loss_finite": fin}


def check_case(case: dict) -> dict:
    c = dict(case)
    c.setdefault("kind", "compression")
    c.setdefault("precision", "fp32")
    c.setdefault("steps", 12)
    c.setdefault("warmup", 3)
    c.setdefault("start_powersgd_iter", 2)
    c["hooks"] = parse_hooks(c.get("hooks", ",".join(HOOKS)))
    if c["precision"] not in PRECISIONS:
        raise ValueError(f"precision: '{c['precision']}' is not one of {', '.join(PRECISIONS)}")
    for k in ("micro_batch", "seq", "steps"):
        if int(c.get(k) or 0) <= 0:
            raise ValueError(f"{k}: must be a positive integer, not {c.get(k)}")
    if int(c["start_powersgd_iter"]) < 2:
        raise ValueError("start_powersgd_iter: must be >= 2 (PowerSGD with error feedback / warm start needs it)")
    if int(c["warmup"]) < 0 or int(c["warmup"]) >= int(c["steps"]):
        raise ValueError(f"warmup: must be >= 0 and below steps ({c['steps']}), not {c['warmup']}")
    if not c.get("model") and not c.get("config"):
        raise ValueError("case has neither 'model' nor 'config'")
    return c


def _body(case: dict, dev: Device, state: dict) -> dict | None:
    case = check_case(case)
    world = dist.get_world_size()
    ref = run_variant(None, case, dev, state)
    variants = []
    for h in case["hooks"]:
        v = run_variant(h, case, dev, state)
        v.update(deviations(ref["losses"], v["losses"]))
        variants.append(v)
    timings = gather({h["hook"]: h["step_s"] for h in [ref, *variants]})
    if dist.get_rank() != 0:
        return None
    for v in [ref, *variants]:  # the slowest rank sets the pace
        per_rank = [t[v["hook"]] for t in timings]
        v["rank_step_s"] = per_rank
        v["step_s"] = max(per_rank)
    base = ref["bytes_per_step"]
    for v in variants:
        v["compression_ratio"] = base / v["bytes_per_step"] if v["bytes_per_step"] else None
        v["speedup_vs_reference"] = ref["step_s"] / v["step_s"] if v["step_s"] else None
    res = {"status": "ok", "kind": "compression", "world_size": world, "precision": case["precision"],
           "micro_batch": int(case["micro_batch"]), "seq": int(case["seq"]), "steps": int(case["steps"]),
           "warmup": int(case["warmup"]), "lr": float(case.get("lr", 1e-3)), "pool": int(case.get("pool", 4)),
           "start_powersgd_iter": int(case["start_powersgd_iter"]),
           "bucket_cap_mb": float(case.get("bucket_cap_mb", 25)),
           "model": case.get("model") or case_config(case).get("model_type"), "device": dev.name,
           "device_name": dev.device_name(), "timer": dev.timer_kind, "reference": ref, "variants": variants,
           "metric_formulas": {
               "step_s": "max over ranks of the per-rank median over steps[warmup:] (perf_counter+sync or events)",
               "bytes_per_step": "payload handed to the collective per rank per step (all_reduce; all_gather for "
                                 "sign: sum over buckets of ceil(d_b/8) + 4) (module docstring formulas)",
               "wire_bytes_per_step_ring": "bytes each rank receives per step: bytes_per_step * 2 (N-1)/N (ring "
                                           "all-reduce: none, fp16, bf16, powersgdR); bytes_per_step * (N-1) "
                                           "(all_gather, (N-1)/N * N * payload: sign)",
               "compression_ratio": "reference bytes_per_step / variant bytes_per_step (payload, not wire)",
               "loss_dev_final": "|loss_T - reference_T|, loss averaged over ranks",
               "loss_dev_max": "max_t |loss_t - reference_t|",
           }}
    res.update(state.get("model_bytes") or {})
    return res


def parse_case(argv):
    p = argparse.ArgumentParser(prog="python -m gpuscope.measure.distributed.compression",
                                description="DDP gradient-compression hooks compared; launch with torchrun.")
    p.add_argument("--case", help="case JSON, @file.json or - (overrides the flags)")
    p.add_argument("--model")
    p.add_argument("--config", help="inline HF config JSON or a path")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--precision", default="fp32", choices=tuple(PRECISIONS))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--hooks", default=",".join(HOOKS))
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--pool", type=int, default=4)
    p.add_argument("--start-powersgd-iter", type=int, default=2)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device")
    p.add_argument("--timeout-s", type=float, default=1800.0)
    p.add_argument("--out")
    a = p.parse_args(argv)
    if a.case:
        return read_case(a.case), a
    case = {"kind": "compression", "micro_batch": a.micro_batch, "seq": a.seq, "precision": a.precision,
            "steps": a.steps, "warmup": a.warmup, "hooks": a.hooks, "lr": a.lr, "pool": a.pool,
            "start_powersgd_iter": a.start_powersgd_iter, "bucket_cap_mb": a.bucket_cap_mb, "seed": a.seed,
            "timeout_s": a.timeout_s}
    return add_model_and_device(case, a), a


def main(argv=None) -> int:
    return worker_main(argv, parse_case, check_case, _body)


if __name__ == "__main__":
    sys.exit(main())
