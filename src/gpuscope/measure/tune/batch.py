"""Batch-size tuning on the user's model: the largest batch that fits, the throughput knee and the article's
dynamic policy.

Batch search (``search_batch``): doubling from ``start`` until a trial runs out of memory or ``max_batch`` is
reached, then bisection between the last batch that ran and the first that did not. Out-of-memory is caught
(``device.is_oom``) and recorded as a row; between trials every reference is dropped, ``gc.collect()`` and the
allocator's cache emptied, and the peak counter reset, so one trial's memory does not leak into the next.
- knee (the throughput-optimal batch): the smallest measured batch b from which no larger measured batch b'
  gains ``knee_gain`` (default 10%) or more tokens/s per doubling, i.e. (tps(b')/tps(b))^(1/log2(b'/b)) - 1 <
  knee_gain for every b' > b. Larger batches only add latency and memory from there on. Where that is the largest
  batch measured (``knee_reached`` false), the search ended (memory, --max-batch, the budget) before the curve
  flattened: the knee is at or above it.
- memory cap (measure/tune/memory_cap.py): the search never tries a batch whose planner peak is over
  ``mem_fraction`` of the memory free before the model is built; a CPU does not raise out-of-memory, it swaps.
- dynamic policy (the article's): start at ``start``; double while utilisation < ``util_threshold``, the next batch
  stays under ``mem_fraction`` of the device memory, and under ``upper`` (the bound). Utilisation is NVML's GPU
  utilisation during the trial where sampled, else (CPU, no NVML) tokens/s relative to the best measured, a proxy
  that says "how far from saturation". Simulated on the measured rows; its choice is compared with the fixed and
  the optimal batch.
Trials: inference = ``generate`` of exactly ``gen`` tokens after a ``prompt`` (tokens/s = batch x gen / E2E, with
prefill); training = forward + backward + AdamW step at micro-batch b (tokens/s = b x seq / median step).

The precision sweep is in measure/tune/precision.py.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time

import torch

from gpuscope.measure.device.device import Device, is_oom
from gpuscope.measure.models.train_step import autocast, grad_scaler, optimizer_step

SCHEMA_BATCH = "gpuscope.tune.batch/1"


def _guard(batch: int, tokens: int) -> None:
    """Called by every trial after its inputs are allocated. A no-op; tests replace it with one that raises
    ``torch.OutOfMemoryError`` above a batch, to exercise the search on CPU."""


def release(dev: Device) -> None:
    gc.collect()
    dev.empty_cache()
    dev.reset_peak()


# --- the search (pure given `trial`) -----------------------------------------------------------------------------
def search_batch(trial, *, start: int = 1, max_batch: int = 1024, knee_gain: float = 0.10,
                 cleanup=None, budget_s: float | None = None, on_row=None, clock=time.perf_counter) -> dict:
    """``trial(b) -> {"tokens_per_s", "peak_bytes"?, "util"?}`` or raises an out-of-memory error.
    ``budget_s``: no trial starts that would end past it, by the last trial's time scaled with the batch (a trial's
    time grows about with the batch; at least one trial runs); the reason is ``budget_stop``. ``on_row(row)``:
    called after each trial (the CLI's line per batch size)."""
    if start < 1 or max_batch < start:
        raise ValueError("need 1 <= start <= max_batch")
    rows: dict[int, dict] = {}
    t_start, stop = clock(), {}

    def fits_budget(b: int) -> bool:
        if budget_s is None or not rows or stop:
            return not stop
        ran = [r for r in rows.values() if r["status"] == "ok"] or list(rows.values())
        last = max(ran, key=lambda r: r["batch"])  # the largest that ran: the nearest below b
        need = last["trial_s"] * max(1.0, b / last["batch"])
        spent = clock() - t_start
        if spent + need <= budget_s:
            return True
        stop["reason"] = (f"time budget: batch {b} would take about {need:.0f} s more, past the search's "
                          f"{budget_s:g} s ({spent:.0f} s spent)")
        return False

    def run(b: int) -> bool:
        t0 = clock()
        try:
            r = dict(trial(b), status="ok")
        except Exception as e:
            if not is_oom(e):
                raise
            r = {"status": "oom", "error": f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"}
        finally:
            if cleanup:
                cleanup()
        r.update(batch=b, trial_s=clock() - t0)
        rows[b] = r
        if on_row:
            on_row(r)
        return r["status"] == "ok"

    last_ok, first_bad = _grow_and_bisect(run, fits_budget, start, max_batch)
    ok = sorted(k for k, r in rows.items() if r["status"] == "ok")
    kb = knee(rows, knee_gain)
    return {"rows": [rows[k] for k in sorted(rows)], "max_batch": last_ok, "first_oom": first_bad and min(
        k for k, r in rows.items() if r["status"] == "oom"), "limit_reached": first_bad is None and not stop,
        "knee_batch": kb, "knee_gain": knee_gain, "budget_s": budget_s,
        # a larger batch measured and gaining less than knee_gain per doubling: the knee is seen, not the edge of
        # the search (where tokens/s may still rise past it)
        "knee_reached": kb is not None and any(k > kb for k in ok),
        "budget_stop": stop.get("reason"),
        "best_batch": max(ok, key=lambda k: rows[k]["tokens_per_s"]) if ok else None}


def _grow_and_bisect(run, fits_budget, start: int, max_batch: int) -> tuple[int | None, int | None]:
    """Doubling from ``start`` until a trial runs out of memory, ``max_batch`` ran, or the budget says no; then
    bisection between the last batch that ran and the first that did not (within the budget). (last ok, first
    out-of-memory or None)."""
    last_ok, first_bad, b = None, None, start
    while True:
        if run(b):
            last_ok = b
            if b >= max_batch:
                break
            b = min(2 * b, max_batch)
            if not fits_budget(b):
                break
        else:
            first_bad = b
            break
    if last_ok is not None and first_bad is not None:
        lo, hi = last_ok, first_bad
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if not fits_budget(mid):
                break
            if run(mid):
                lo = mid
            else:
                hi = mid
        last_ok = lo
    return last_ok, first_bad


def knee(rows: dict[int, dict], gain: float = 0.10) -> int | None:
    """The smallest measured batch that no larger measured batch beats by ``gain`` or more per doubling. Not the
    first step that gains little: a flat or noisy step early on (gpt2 on a CPU: batch 1 to 2) stopped the old rule
    at batch 1 where batch 16 gave 2.83x the tokens/s."""
    ok = sorted(k for k, r in rows.items() if r.get("status") == "ok" and r.get("tokens_per_s"))
    for i, a in enumerate(ok):
        tps = rows[a]["tokens_per_s"]
        if all((rows[b]["tokens_per_s"] / tps) ** (1 / math.log2(b / a)) - 1 < gain for b in ok[i + 1:]):
            return a
    return None


def dynamic_policy(rows: list[dict], *, start: int = 1, util_threshold: float = 0.9, mem_fraction: float = 0.9,
                   total_bytes: float | None = None, upper: int = 512, growth: int = 2) -> dict:
    """The article's policy, replayed on measured rows: grow while utilisation < threshold and memory has headroom,
    up to ``upper``."""
    by = {r["batch"]: r for r in rows}
    best = max((r["tokens_per_s"] for r in rows if r.get("status") == "ok"), default=None)
    b, trace, reason = start, [], None
    if b not in by or by[b].get("status") != "ok":
        return {"batch": None, "trace": [], "stop_reason": f"batch {start} did not run"}
    while True:
        r = by[b]
        util = r.get("util")
        src = "nvml"
        if util is None:
            util, src = (r["tokens_per_s"] / best if best else 1.0), "tokens_per_s/best"
        trace.append({"batch": b, "util": util, "util_source": src, "tokens_per_s": r["tokens_per_s"]})
        nb = b * growth
        if util >= util_threshold:
            reason = f"utilisation {util:.0%} >= {util_threshold:.0%}"
            break
        if nb > upper:
            reason = f"upper bound {upper}"
            break
        nxt = by.get(nb)
        if nxt is None:
            reason = f"batch {nb} not measured (beyond the search)"
            break
        if nxt.get("status") != "ok":
            reason = f"batch {nb} runs out of memory"
            break
        if total_bytes and nxt.get("peak_bytes") and nxt["peak_bytes"] > mem_fraction * total_bytes:
            reason = f"batch {nb} would use more than {mem_fraction:.0%} of device memory"
            break
        b = nb
    r = by[b]
    return {"batch": b, "tokens_per_s": r["tokens_per_s"], "peak_bytes": r.get("peak_bytes"), "trace": trace,
            "stop_reason": reason, "util_threshold": util_threshold, "upper": upper}


def compare_policies(res: dict, fixed_row: dict | None, dyn: dict) -> list[dict]:
    by = {r["batch"]: r for r in res["rows"]}
    out = []
    opt = by.get(res.get("knee_batch")) or {}
    ref = opt.get("tokens_per_s")
    for name, b, r in (("fixed", fixed_row and fixed_row["batch"], fixed_row),
                       ("optimal (knee)", res.get("knee_batch"), opt),
                       ("largest that fits", res.get("max_batch"), by.get(res.get("max_batch"))),
                       ("dynamic policy", dyn.get("batch"), by.get(dyn.get("batch")))):
        if not r or r.get("status") != "ok":
            continue
        out.append({"policy": name, "batch": b, "tokens_per_s": r["tokens_per_s"], "peak_bytes": r.get("peak_bytes"),
                    "vs_optimal": r["tokens_per_s"] / ref if ref else None})
    return out


# --- trials on a real model ---------------------------------------------------------------------------------------
def _nvml_util(dev: Device):
    from gpuscope.measure.device.nvml import device_sampler

    smp = device_sampler(dev)  # this device's GPU (by UUID), not NVML's first one
    return smp if smp is not None else contextlib.nullcontext(None)


def _util_of(sampler) -> float | None:
    if sampler is None:
        return None
    s = sampler.result(with_samples=False).get("summary") or {}
    u = s.get("gpu_util_pct_median")
    return u / 100.0 if u is not None else None


class InferTrial:
    def __init__(self, cfg: dict, dev: Device, dtype: str = "bf16", prompt: int = 128, gen: int = 16,
                 repeats: int = 2, attn: str = "sdpa", fuse_proj: bool = False):
        from gpuscope.measure.models.hf_model import DTYPES, build_model, silence_generation, vocab_size

        torch.manual_seed(0)
        self.dev, self.prompt, self.gen, self.repeats = dev, prompt, gen, repeats
        self.model, config = build_model(cfg, dev, DTYPES[dtype], attn, use_cache=True)
        self.model.eval()
        silence_generation(self.model)
        self.fused = None
        if fuse_proj:
            from gpuscope.measure.llm.fused_proj import fuse_projections

            self.fused = fuse_projections(self.model)
        self.vocab = vocab_size(config)

    @torch.no_grad()
    def __call__(self, b: int) -> dict:
        from gpuscope.measure.llm.infer import generate

        ids = torch.randint(0, self.vocab, (b, self.prompt), device=self.dev.torch_device)
        mask = torch.ones_like(ids)
        _guard(b, b * (self.prompt + self.gen))
        # warm-up at full length on accelerators (compiled shapes, the allocator's pool); on a CPU two tokens run the
        # same kernels at a fraction of the time
        generate(self.model, ids, mask, min(2, self.gen) if self.dev.type == "cpu" else self.gen)
        self.dev.reset_peak()
        times = []
        with _nvml_util(self.dev) as smp:
            for _ in range(self.repeats):
                with self.dev.timer() as t:
                    out = generate(self.model, ids, mask, self.gen)
                times.append(t.s)
                del out
        e2e = statistics.median(times)
        return {"tokens_per_s": b * self.gen / e2e, "e2e_s": e2e, "peak_bytes": self.dev.peak_allocated(),
                "util": _util_of(smp)}


class TrainTrial:
    def __init__(self, cfg: dict, dev: Device, precision: str = "amp-bf16", seq: int = 128, steps: int = 2):
        from gpuscope.measure.models.hf_model import build_model, vocab_size
        from gpuscope.measure.models.train_step import PRECISIONS

        torch.manual_seed(0)
        self.dev, self.seq, self.steps = dev, seq, steps
        pdt, self.ac = PRECISIONS[precision]
        self.model, config = build_model(cfg, dev, pdt, use_cache=False)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=dev.type == "cuda")
        self.scaler = grad_scaler(dev, self.ac)
        self.vocab = vocab_size(config)

    def step(self, ids) -> None:
        """One training step on ``ids`` (forward with the loss, backward, optimizer step)."""
        with autocast(self.dev, self.ac):
            loss = self.model(input_ids=ids, labels=ids, use_cache=False).loss
        (self.scaler.scale(loss) if self.scaler else loss).backward()
        optimizer_step(self.opt, self.scaler)

    def __call__(self, b: int) -> dict:
        ids = torch.randint(0, self.vocab, (b, self.seq), device=self.dev.torch_device)
        try:
            _guard(b, b * self.seq)
            self.step(ids)  # warm-up
            self.dev.reset_peak()
            with _nvml_util(self.dev) as smp:
                st = self.dev.step_timer()
                st.start()
                for _ in range(self.steps):
                    self.step(ids)
                    st.mark()
                times = st.times_s()
        finally:
            self.opt.zero_grad(set_to_none=True)  # an OOM mid-step leaves gradients behind
        step = statistics.median(times)
        return {"tokens_per_s": b * self.seq / step, "step_s": step, "peak_bytes": self.dev.peak_allocated(),
                "util": _util_of(smp)}


def _capped(kind: str, cfg: dict, dev: Device, max_batch: int, mem_fraction: float, trial_kw: dict) -> dict:
    """The memory cap of the search (measure/tune/memory_cap.py), from the memory free before the model is built;
    a UserError where not even batch 1 fits."""
    from gpuscope.errors import UserError
    from gpuscope.measure.tune.memory_cap import free_bytes, memory_cap, planned_peak_fn

    cap = memory_cap(planned_peak_fn(kind, cfg, trial_kw), free_bytes(dev), max_batch, mem_fraction)
    if cap["batch"] is None:
        raise UserError(f"batch 1 needs about {cap['estimated_peak_bytes'] / 2**30:.1f} GiB by the planner, more "
                        f"than {mem_fraction:.0%} of the {cap['free_bytes'] / 2**30:.1f} GiB free on {dev.name}.")
    if cap["limited"]:
        cap["stop_reason"] = (f"memory: the planner puts batch {cap['first_over']} at "
                              f"{cap['first_over_peak_bytes'] / 2**30:.2f} GiB, over {mem_fraction:.0%} of the "
                              f"{cap['free_bytes'] / 2**30:.2f} GiB free on {dev.name}")
    return cap


def tune_batch(kind: str, cfg: dict, dev: Device, *, start: int = 1, max_batch: int = 256, knee_gain: float = 0.10,
               fixed: int = 1, util_threshold: float = 0.9, mem_fraction: float = 0.9, upper: int | None = None,
               budget_s: float | None = None, on_row=None, **trial_kw) -> dict:
    """The batch search on the model: capped where the planner says memory runs out (``memory_cap``), doubling
    and bisecting below it, within ``budget_s`` seconds of trials where given (search_batch); the knee, the dynamic
    policy and the user's ``fixed`` batch beside (measured where the budget was not spent or it is below the
    largest batch that ran)."""
    cap = _capped(kind, cfg, dev, max_batch, mem_fraction, trial_kw)
    top = cap["batch"]
    trial = InferTrial(cfg, dev, **trial_kw) if kind == "infer" else TrainTrial(cfg, dev, **trial_kw)
    res = search_batch(trial, start=min(start, top), max_batch=top, knee_gain=knee_gain,
                       cleanup=lambda: release(dev), budget_s=budget_s, on_row=on_row)
    by = {r["batch"]: r for r in res["rows"]}
    if fixed not in by and fixed <= top and (not res["budget_stop"] or fixed < max(by)):  # the user's batch too
        by[fixed] = search_batch(trial, start=fixed, max_batch=fixed, cleanup=lambda: release(dev),
                                 on_row=on_row)["rows"][0]
    total = dev.total_memory()
    dyn = dynamic_policy(res["rows"], start=min(start, top), util_threshold=util_threshold, mem_fraction=mem_fraction,
                         total_bytes=total, upper=upper or top)
    res.update(schema=SCHEMA_BATCH, kind=kind, device=dev.name, device_name=dev.device_name(),
               device_total_bytes=total, fixed_batch=fixed, dynamic=dyn, trial=trial_kw, memory_cap=cap,
               comparison=compare_policies(res, by.get(fixed), dyn))
    del trial
    release(dev)
    return res
