"""Out of memory in training: the article's tiers of levers, each computed by the planner for this run, ranked.

Tiers (cheapest first, as the article orders them):
1. recompute (activation checkpointing of every layer) and gradient accumulation (micro-batch 1, same global batch);
2. sharding the model states: ZeRO-3/FSDP over N data-parallel GPUs, or CPU offload of the optimizer / parameters;
3. model parallelism: tensor parallel (with sequence parallel) or pipeline parallel over N GPUs;
4. smaller dtypes: pure bf16 (weights, grads and Adam states in bf16) and 8-bit AdamW.

How each is computed:
- recompute, grad accumulation, offload and dtypes: ``estimate_train`` with that lever (validated on an H200,
  phase by phase).
- ZeRO-3/FSDP over N: ``estimate_train(strategy="fsdp")`` (FSDP2 full shard with a bf16 policy: sharded states,
  two gathered layers, prefetched collectives over the node topology) where that model applies (amp-bf16, no
  offload, no accumulation); otherwise the single-GPU estimate's breakdown at its peak with weights, gradients,
  optimizer states and autocast's 16-bit weight copies divided by N, plus two gathered layers in 16 bit (the one
  running and the prefetched next). Time: 3 x 2P bytes of all-gather/reduce-scatter traffic per step x (N-1)/N over
  one direction of the device's link (half its bidirectional rate; the host link where the catalog has none),
  assumed overlapped with compute by prefetch: step = max(compute, communication).
- TP over N (with sequence parallelism, Korthikanti et al. 2022): weights, grads, states, activations and logits
  divided by N; 4 all-gather/reduce-scatter of the T x h activations per layer per micro-batch (2 forward,
  2 backward), not overlapped; slowdown in GPU-seconds per token = 1 + N x comm / step.
- PP over N (1F1B): model states divided by N; the first stage holds N micro-batches of 1/N of the layers'
  activations, i.e. about one micro-batch of the whole model's (unchanged); bubble (N-1)/m with m = max(grad
  accumulation, 4N) micro-batches; slowdown = 1 + (N-1)/m.
``slowdown`` is GPU-time per token relative to the configuration as given (as if it fitted); ``saved_bytes`` is
its peak minus the lever's. Ranked: levers that fit first (least slowdown, then fewest GPUs), then the rest by
memory saved. Recompute combined with ZeRO-3, optimizer offload, pure bf16 and 8-bit AdamW is listed too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gpuscope.errors import UserError
from gpuscope.estimate.params import count_params, layer_params
from gpuscope.estimate.runtime import runtime_overheads
from gpuscope.estimate.train import estimate_train, host_link_gbs

SCHEMA = "gpuscope.oom_tiers/1"
SHARD_SIZES = (2, 4, 8)


@dataclass
class Tier:
    tier: int
    lever: str
    changes: dict
    peak_bytes: float
    required_bytes: float
    saved_bytes: float
    step_s: float
    slowdown: float
    fits: bool
    num_gpus: int = 1
    method: str = "estimate_train"
    notes: list[str] = field(default_factory=list)
    rank: int = 0

    def to_json(self) -> dict:
        return asdict(self)


def _link_gbs(hw) -> float:
    bidir = getattr(hw, "interconnect_gbs_bidir", None)
    return float(bidir) / 2.0 if bidir else host_link_gbs(hw)


def _tier_from_est(tier, lever, changes, est, base, notes=()) -> Tier:
    return Tier(tier, lever, changes, est.peak_bytes_per_gpu, est.required_bytes,
                base.peak_bytes_per_gpu - est.peak_bytes_per_gpu, est.time["step_s"],
                est.time["step_s"] / base.time["step_s"], bool(est.fits), notes=list(notes))


def _analytic(tier, lever, changes, peak, step_s, base, hw, n, method, notes=()) -> Tier:
    req = peak + sum(runtime_overheads(peak).values())
    return Tier(tier, lever, changes, peak, req, base.peak_bytes_per_gpu - peak, step_s,
                step_s / base.time["step_s"], req <= hw.device_total_bytes, num_gpus=n, method=method,
                notes=list(notes))


def _zero3(m, hw, est, n: int, tier=2, lever_prefix="") -> Tier:
    b = est.breakdown_bytes
    states = sum(b.get(k, 0.0) for k in ("weights", "gradients", "optimizer_states", "weight_copies_16bit"))
    pc = count_params(m)
    gathered = 2 * 2.0 * max(layer_params(m, i).total for i in range(m.num_layers)) if m.num_layers else 0.0
    peak = est.peak_bytes_per_gpu - states * (1 - 1 / n) + gathered
    comm_s = 3 * 2.0 * pc.total * (n - 1) / n / (_link_gbs(hw) * 1e9)
    step = max(est.time["step_s"], comm_s)
    return _analytic(tier, f"{lever_prefix}ZeRO-3 / FSDP over {n} GPUs", {"zero": 3, "num_gpus": n}, peak, step,
                     est, hw, n, "analytic from estimate_train's breakdown",
                     [f"{comm_s * 1e3:.0f} ms of parameter/gradient traffic per step at {_link_gbs(hw):.0f} GB/s, "
                      "assumed overlapped by prefetch"])


def _fsdp_tier(e, base, n: int, prefix: str = "") -> Tier:
    """FSDP2 over n GPUs from estimate_train(strategy="fsdp"): per-GPU memory and step of n data-parallel ranks;
    GPU-time per token relative to the base = step ratio (n GPUs process n times the tokens)."""
    t = _tier_from_est(2, f"{prefix}ZeRO-3 / FSDP over {n} GPUs", {"zero": 3, "num_gpus": n}, e, base,
                       [f"{e.time.get('exposed_comm_s', 0.0) * 1e3:.1f} ms of exposed all-gather/reduce-scatter "
                        "per step (planner's FSDP2 model)"])
    t.num_gpus = n
    t.method = "estimate_train(strategy='fsdp')"
    return t


def _tp(m, hw, est, n: int, micro_batch: int, seq: int, act_b: float) -> Tier | None:
    if m.num_heads % n or m.num_kv_heads % n and n % m.num_kv_heads:
        return None
    peak = est.peak_bytes_per_gpu / n
    comm_bytes = 4 * m.num_layers * micro_batch * seq * m.hidden_size * act_b * (n - 1) / n
    grad_accum = est.inputs.get("grad_accum", 1)
    comm_s = grad_accum * comm_bytes / (_link_gbs(hw) * 1e9)
    step_gpu_time = est.time["step_s"] + n * comm_s  # GPU-seconds per step relative to one GPU
    return _analytic(3, f"tensor parallel over {n} GPUs (+ sequence parallel)", {"tp": n, "num_gpus": n}, peak,
                     step_gpu_time, est, hw, n, "analytic from estimate_train",
                     [f"{comm_s * 1e3:.1f} ms of activation collectives per step on each GPU, not overlapped",
                      "needs a fast link (NVLink); across PCIe or nodes it costs far more"])


def _pp(m, hw, est, n: int) -> Tier | None:
    if m.num_layers < n:
        return None
    b = est.breakdown_bytes
    states = sum(b.get(k, 0.0) for k in ("weights", "gradients", "optimizer_states", "weight_copies_16bit"))
    peak = est.peak_bytes_per_gpu - states * (1 - 1 / n)
    mb = max(est.inputs.get("grad_accum", 1), 4 * n)
    bubble = (n - 1) / mb
    return _analytic(3, f"pipeline parallel over {n} GPUs (1F1B)", {"pp": n, "num_gpus": n}, peak,
                     est.time["step_s"] * (1 + bubble), est, hw, n, "analytic from estimate_train's breakdown",
                     [f"bubble {bubble:.0%} with {mb} micro-batches per step"])


def oom_tiers(m, hw, *, micro_batch: int, seq: int, precision: str = "amp-bf16", optimizer: str = "adamw",
              recompute: str = "none", grad_accum: int = 1, offload: str = "none", fused: bool = True) -> dict:
    """{"schema", "base": {...}, "tiers": [Tier ranked], "best": Tier | None}."""
    from gpuscope.estimate.memory_train import precision_bytes

    kw = dict(micro_batch=micro_batch, seq=seq, precision=precision, optimizer=optimizer, recompute=recompute,
              grad_accum=grad_accum, offload=offload, fused=fused)
    base = estimate_train(m, hw, **kw)
    act_b = precision_bytes(precision)[1]

    def est(**over):
        try:
            return estimate_train(m, hw, **dict(kw, **over))
        except UserError:
            return None

    tiers = (_tier1(est, base, recompute, micro_batch, grad_accum) + _tier2(m, hw, est, base, offload)
             + [t for n in SHARD_SIZES for t in (_tp(m, hw, base, n, micro_batch, seq, act_b), _pp(m, hw, base, n))
                if t is not None]
             + _tier4(est, base, precision, optimizer)
             + (_with_recompute(m, hw, est, base) if recompute != "full" else []))
    ranked = sorted([t for t in tiers if t.fits], key=lambda t: (t.slowdown, t.num_gpus, t.tier)) + \
        sorted([t for t in tiers if not t.fits], key=lambda t: -t.saved_bytes)
    for i, t in enumerate(ranked, 1):
        t.rank = i
    return {
        "schema": SCHEMA,
        "model": m.name, "hardware": hw.key, "inputs": kw,
        "base": {"fits": base.fits, "peak_bytes": base.peak_bytes_per_gpu, "required_bytes": base.required_bytes,
                 "device_total_bytes": base.device_total_bytes, "step_s": base.time["step_s"]},
        "tiers": ranked,
        "best": next((t for t in ranked if t.fits), None),
    }


def _tier1(est, base, recompute: str, micro_batch: int, grad_accum: int) -> list[Tier]:
    """Tier 1, no code change: activation recompute, gradient accumulation at micro-batch 1, both."""
    tiers = []
    if recompute != "full":
        e = est(recompute="full")
        tiers.append(_tier_from_est(1, "activation recompute (full)", {"recompute": "full"}, e, base))
    if micro_batch > 1:
        ch = {"micro_batch": 1, "grad_accum": grad_accum * micro_batch}
        tiers.append(_tier_from_est(1, f"gradient accumulation (micro-batch 1 x {ch['grad_accum']})", ch,
                                    est(**ch), base, ["same global batch"]))
        if recompute != "full":
            ch2 = dict(ch, recompute="full")
            tiers.append(_tier_from_est(1, "recompute + gradient accumulation", ch2, est(**ch2), base))
    return tiers


def _tier2(m, hw, est, base, offload: str) -> list[Tier]:
    """Tier 2, sharding or offload: FSDP2 full shard through the planner's FSDP model where it applies, else the
    analytic ZeRO-3; CPU offload of the optimizer or the parameters."""
    tiers = []
    for n in SHARD_SIZES:
        e = est(num_gpus=n, strategy="fsdp")
        tiers.append(_fsdp_tier(e, base, n) if e is not None else _zero3(m, hw, base, n))
    for off in ("optimizer", "params"):
        if off != offload:
            e = est(offload=off)
            if e is not None:
                tiers.append(_tier_from_est(2, f"CPU offload ({off})", {"offload": off}, e, base,
                                            [e.assumptions[-1]] if e.assumptions else []))
    return tiers


def _tier4(est, base, precision: str, optimizer: str) -> list[Tier]:
    """Tier 4, numerics: pure bf16 states, 8-bit AdamW."""
    tiers = []
    if precision != "bf16":
        e = est(precision="bf16")
        if e is not None:
            tiers.append(_tier_from_est(4, "pure bf16 (weights, grads, Adam states)", {"precision": "bf16"}, e,
                                        base, ["bf16 master weights lose small updates; use Kahan summation or "
                                               "stochastic rounding for long runs"]))
    if optimizer != "adamw-8bit":
        e = est(optimizer="adamw-8bit")
        if e is not None:
            tiers.append(_tier_from_est(4, "8-bit AdamW (bitsandbytes)", {"optimizer": "adamw-8bit"}, e, base))
    return tiers


def _with_recompute(m, hw, est, base) -> list[Tier]:
    """Recompute combined with each tier 2-4 lever (the usual first pairing when one lever is not enough)."""
    tiers = []
    rc = est(recompute="full")
    for n in SHARD_SIZES:
        e = est(recompute="full", num_gpus=n, strategy="fsdp")
        if e is not None:
            t = _fsdp_tier(e, base, n, "recompute + ")
            t.changes = dict(t.changes, recompute="full")
            tiers.append(t)
            continue
        t = _zero3(m, hw, rc, n, lever_prefix="recompute + ")
        t.saved_bytes = base.peak_bytes_per_gpu - t.peak_bytes
        t.step_s = max(rc.time["step_s"], t.step_s)
        t.slowdown = t.step_s / base.time["step_s"]
        t.changes = dict(t.changes, recompute="full")
        tiers.append(t)
    for ch, name in (({"offload": "optimizer"}, "CPU offload (optimizer)"), ({"precision": "bf16"}, "pure bf16"),
                     ({"optimizer": "adamw-8bit"}, "8-bit AdamW")):
        e = est(recompute="full", **ch)
        if e is not None:
            tiers.append(_tier_from_est(2 if "offload" in ch else 4, f"recompute + {name}",
                                        dict(ch, recompute="full"), e, base))
    return tiers


# ---- LoRA / QLoRA fine-tuning ------------------------------------------------------------------------------------
# Tiers, cheapest first: 1 gradient checkpointing and accumulation; 2 a smaller rank or fewer targets (attention
# projections only); 3 8-bit and paged optimizers for the adapters; 4 QLoRA (the frozen base in NF4); 5 offload:
# the checkpointed layer inputs to host memory (torchtune's activation offloading: copied on a side stream, so
# overlapped, step = max(compute, 2 x their bytes over the host link)) or the frozen decoder layers to host memory
# (accelerate's CPU offload: each layer copied in before it runs, forward, backward and recompute, not overlapped;
# two layers resident). Levers 1-4 are estimate/lora_search.configure's (the planner's LoRA estimate); activation
# offloading is its memory with offload_activations, the frozen base on the CPU analytic from its breakdown; both
# offloads' times are analytic. Slowdown = base tokens/s over the lever's (the tokens of a step are kept).
LORA_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "c_attn", "c_proj", "query_key_value", "dense")


def _lora_tier(tier, lever, changes, c, base, notes=()) -> Tier:
    return Tier(tier, lever, changes, c.peak_bytes, c.required_bytes, base.peak_bytes - c.peak_bytes, c.step_s,
                base.tokens_per_s / c.tokens_per_s, bool(c.fits), method="estimate_lora_train", notes=list(notes))


def _lora_analytic(tier, lever, changes, peak, step_s, base, hw, notes) -> Tier:
    req = peak + sum(runtime_overheads(peak).values())
    return Tier(tier, lever, changes, peak, req, base.peak_bytes - peak, step_s, step_s / base.step_s,
                req <= hw.device_total_bytes, method="analytic from estimate_lora_train", notes=list(notes))


def _lora_offload(m, hw, kw: dict, base, breakdown: dict, conf) -> list[Tier]:
    from gpuscope.estimate.params import count_params

    rc = conf(recompute="full", offload_activations=True)  # the planner's memory with the inputs on the host
    T, b, accum = kw["micro_batch"] * kw["seq"], 4.0 if kw["precision"] == "fp32" else 2.0, kw["grad_accum"]
    link = host_link_gbs(hw) * 1e9
    inputs = m.num_layers * T * m.hidden_size * b
    acts = _lora_analytic(5, "activation offloading (checkpointed layer inputs to CPU) + checkpointing",
                          {"recompute": "full", "offload_activations": True}, rc.peak_bytes,
                          max(rc.step_s, accum * 2 * inputs / link), base, hw,
                          [f"{inputs / 2**30:.2f} GiB of layer inputs each way per micro-batch at "
                           f"{link / 1e9:.0f} GB/s, on a side stream (torchtune's OffloadActivations)"])
    pc = count_params(m)
    layers = breakdown["base_weights"] - (pc.embedding + pc.lm_head) * b
    passes = 2 + (kw["recompute"] == "full")
    weights = _lora_analytic(5, "frozen base offloaded to CPU (accelerate device_map)", {"offload": "params"},
                             base.peak_bytes - layers * (1 - 2 / m.num_layers),
                             base.step_s + accum * passes * layers / link, base, hw,
                             [f"{layers / 2**30:.1f} GiB of decoder weights copied in {passes}x per micro-batch, "
                              "not overlapped; two layers resident"])
    return [acts, weights]


def lora_oom_tiers(m, hw, *, r: int, micro_batch: int, seq: int, targets: str | None = None, qlora: bool = False,
                   precision: str = "amp-bf16", optimizer: str = "adamw", recompute: str = "none",
                   grad_accum: int = 1, dropout: float = 0.0) -> dict:
    """The OOM tiers of LoRA (``qlora``: QLoRA) fine-tuning: {"schema", "base", "tiers" ranked, "best"}."""
    from gpuscope.estimate.lora import ALL_LINEAR, lora_shape, resolve_targets

    targets = targets or ALL_LINEAR
    kw = dict(r=r, targets=targets, qlora=qlora, micro_batch=micro_batch, seq=seq, precision=precision,
              optimizer=optimizer, recompute=recompute, grad_accum=grad_accum)

    def conf(**over):
        from gpuscope.estimate.lora_search import configure

        k = dict(kw, **over)
        shape = lora_shape(m, k.pop("r"), k.pop("targets"), dropout)
        return configure(m, hw, shape, **k)

    base = conf()
    t = _tier1_lora(conf, base, kw)
    if r > 8:
        t.append(_lora_tier(2, f"smaller rank (r {max(8, r // 4)})", {"lora_r": max(8, r // 4)},
                            conf(r=max(8, r // 4)), base))
    attn = [s.name for s in resolve_targets(m, targets).sites if s.name in LORA_ATTENTION and s.part == "attention"]
    if attn and len(attn) < len(resolve_targets(m, targets).sites):
        t.append(_lora_tier(2, "attention projections only", {"lora_targets": ",".join(attn)},
                            conf(targets=",".join(attn)), base))
    for opt in ("adamw-8bit", "paged-adamw-8bit"):
        if opt != optimizer:
            t.append(_lora_tier(3, f"{opt} (bitsandbytes) for the adapters", {"optimizer": opt}, conf(optimizer=opt),
                                base))
    if not qlora and precision != "fp32":
        t.append(_lora_tier(4, "QLoRA (base in 4-bit NF4)", {"qlora": True}, conf(qlora=True), base))
        if recompute != "full":
            t.append(_lora_tier(4, "QLoRA + checkpointing", {"qlora": True, "recompute": "full"},
                                conf(qlora=True, recompute="full"), base))
    t += _lora_offload(m, hw, kw, base, estimate_breakdown(m, hw, kw, dropout), conf)
    ranked = sorted([x for x in t if x.fits], key=lambda x: (x.slowdown, x.tier)) + \
        sorted([x for x in t if not x.fits], key=lambda x: -x.saved_bytes)
    for i, x in enumerate(ranked, 1):
        x.rank = i
    return {"schema": SCHEMA, "model": m.name, "hardware": hw.key, "inputs": dict(kw, lora=True),
            "base": {"fits": base.fits, "peak_bytes": base.peak_bytes, "required_bytes": base.required_bytes,
                     "device_total_bytes": hw.device_total_bytes, "step_s": base.step_s},
            "tiers": ranked, "best": next((x for x in ranked if x.fits), None)}


def estimate_breakdown(m, hw, kw: dict, dropout: float) -> dict:
    """The LoRA estimate's memory breakdown at the configuration ``kw`` (paged optimizers: their unpaged one)."""
    from gpuscope.estimate.lora import lora_shape
    from gpuscope.estimate.lora_train import estimate_lora_train

    return estimate_lora_train(m, hw, lora_shape(m, kw["r"], kw["targets"], dropout), micro_batch=kw["micro_batch"],
                               seq=kw["seq"], precision=kw["precision"],
                               optimizer=kw["optimizer"].removeprefix("paged-"), recompute=kw["recompute"],
                               grad_accum=kw["grad_accum"], qlora=kw["qlora"]).breakdown_bytes


def _tier1_lora(conf, base, kw: dict) -> list[Tier]:
    out = []
    if kw["recompute"] != "full":
        out.append(_lora_tier(1, "gradient checkpointing", {"recompute": "full"}, conf(recompute="full"), base))
    if kw["micro_batch"] > 1:
        ch = {"micro_batch": 1, "grad_accum": kw["grad_accum"] * kw["micro_batch"]}
        out.append(_lora_tier(1, f"gradient accumulation (micro-batch 1 x {ch['grad_accum']})", ch, conf(**ch), base,
                              ["same tokens per step"]))
        if kw["recompute"] != "full":
            out.append(_lora_tier(1, "checkpointing + accumulation", dict(ch, recompute="full"),
                                  conf(recompute="full", **ch), base))
    return out
