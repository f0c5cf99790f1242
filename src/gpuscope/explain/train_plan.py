"""Which training plan a request asks for: one GPU (HF eager), PyTorch data parallelism (DDP, FSDP, HSDP of a
transformers model) or a Megatron-style layout (TP/PP/DP/CP/EP, ZeRO), or a search over every layout - and the
layout's degrees checked and completed (dp from num-gpus / (tp x pp x cp)) before any planning.

``plan_train(model, hw, request)`` returns an ``Estimate``, or with ``search`` a ``LayoutSearch`` (the ranked
layouts and how long the search took). Bad input is a UserError naming the flag (what `gpuscope plan train` says).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gpuscope.errors import UserError


@dataclass
class TrainRequest:
    """The options of a training plan (`gpuscope plan train`), defaults as the command's."""

    micro_batch: int = 1
    seq: int = 2048
    precision: str = "amp-bf16"
    optimizer: str = "adamw"
    recompute: str = "none"
    grad_accum: int = 1
    offload: str = "none"
    fused: bool = True
    num_gpus: int = 1
    tp: int = 1
    pp: int = 1
    dp: int | None = None
    cp: int = 1
    ep: int = 1
    zero: int = 0
    fsdp: bool = False
    hsdp: bool = False
    bucket_view: bool = False
    framework: str | None = None
    sp: bool = False
    virtual: int = 1
    global_batch: int | None = None
    gpus_per_node: int | None = None
    search: bool = False
    db: str | None = None  # a results database whose `bench collectives` rows replace datasheet link bandwidths
    with_ops: bool = False
    lora_r: int | None = None  # LoRA / QLoRA fine-tuning (explain/lora_plan.py) when any of these is given
    lora_alpha: float | None = None
    lora_targets: str | None = None
    lora_dropout: float = 0.0
    qlora: bool = False
    kbit_prep: bool = False  # peft's prepare_model_for_kbit_training before get_peft_model (QLoRA, checkpointing)
    adamw_impl: str | None = None  # fused | foreach | for-loop (estimate/adamw.py); None: from ``fused``

    @property
    def multi(self) -> bool:
        return self.num_gpus > 1 or self.search or self.tp > 1 or self.pp > 1 or (self.dp or 1) > 1

    @property
    def pure_dp(self) -> bool:
        return (self.tp == 1 and self.pp == 1 and self.cp == 1 and self.ep == 1 and self.zero == 0
                and not self.search and (self.dp is None or self.dp == self.num_gpus))


@dataclass
class LayoutSearch:
    """Every layout of ``num_gpus`` ranked by tokens/s (estimate.search's result) and the search's own time."""

    result: object
    model: str
    hardware: str
    num_gpus: int
    global_batch: int
    seq: int
    seconds: float


def plan_train(m, hw, r: TrainRequest):
    """The Estimate (or LayoutSearch) of the training plan ``r`` of model ``m`` on hardware ``hw``."""
    from gpuscope.estimate.train import estimate_train
    from gpuscope.explain.lora_plan import plan_lora, wants_lora

    if wants_lora(r):
        return plan_lora(m, hw, r)
    check_request(m, r)
    single = dict(micro_batch=r.micro_batch, seq=r.seq, precision=r.precision, optimizer=r.optimizer,
                  recompute=r.recompute, grad_accum=r.grad_accum, offload=r.offload, fused=r.fused,
                  num_gpus=r.num_gpus, adamw_impl=r.adamw_impl)
    if not r.multi and not (r.fsdp or r.hsdp):  # FSDP2 at one GPU is planned as FSDP2 (below)
        single["grad_accum"] = _accumulation(r)
        return estimate_train(m, hw, with_ops=r.with_ops, **single)
    if r.db:
        from gpuscope.explain.measured_links import with_measured_links

        hw, _links = with_measured_links(hw, r.db)
    if r.framework not in (None, "hf", "megatron"):
        raise UserError(f"--framework must be hf or megatron, got '{r.framework}'.")
    if r.framework == "hf" or (r.framework is None and r.pure_dp):
        if r.tp > 1 or r.pp > 1 or r.zero or r.ep > 1:
            raise UserError("--framework hf plans DDP or FSDP (--fsdp, --hsdp) over --num-gpus; TP/PP/EP/ZeRO "
                            "layouts need --framework megatron.")
        strategy = "hsdp" if r.hsdp else "fsdp" if r.fsdp else "ddp"
        single["grad_accum"] = _accumulation(r)
        return estimate_train(m, hw, strategy=strategy, gpus_per_node=r.gpus_per_node, bucket_view=r.bucket_view,
                              **single)
    return _megatron(m, hw, r)


def check_request(m, r: TrainRequest) -> None:
    """What no plan can run, refused before planning: two sharding schemes at once, pipeline stages that do not
    divide the layers."""
    if (r.fsdp or r.hsdp) and r.zero:
        flag = "--hsdp" if r.hsdp else "--fsdp"
        raise UserError(f"{flag} and --zero {r.zero} are two sharding schemes; give one ({flag} shards as ZeRO-3 "
                        f"does, in PyTorch's FSDP).")
    stages = r.pp * r.virtual
    if r.pp > 0 and r.virtual > 0 and m.num_layers % stages:
        of = f"--pp {r.pp} x --virtual {r.virtual} ({stages})" if r.virtual > 1 else f"--pp ({r.pp})"
        raise UserError(f"{of} must divide the model's {m.num_layers} layers into equal pipeline stages.")


def _accumulation(r: TrainRequest) -> int:
    """Micro-batches per optimizer step of PyTorch data parallelism: --grad-accum, or what --global-batch asks
    (it must split into --micro-batch x data-parallel ranks, and agree with a --grad-accum given)."""
    if r.global_batch is None:
        return r.grad_accum
    per_step = r.micro_batch * r.num_gpus
    if r.global_batch <= 0 or r.global_batch % per_step:
        raise UserError(f"--global-batch ({r.global_batch}) must be a multiple of --micro-batch x data-parallel "
                        f"ranks ({r.micro_batch} x {r.num_gpus} = {per_step}).")
    accum = r.global_batch // per_step
    if r.grad_accum not in (1, accum):
        raise UserError(f"--global-batch ({r.global_batch}) asks for {accum} micro-batches per step, --grad-accum "
                        f"for {r.grad_accum}; give one of them.")
    return accum


def data_parallel(r: TrainRequest) -> int:
    """The data-parallel degree of a Megatron-style layout: given, or num-gpus / (tp x pp x cp); checked."""
    if r.num_gpus <= 0:
        raise UserError(f"--num-gpus must be a positive integer, got {r.num_gpus}.")
    if r.cp <= 0:
        raise UserError(f"--cp must be a positive integer, got {r.cp}.")
    dp = r.dp
    if dp is None:
        if r.num_gpus % (r.tp * r.pp * r.cp):
            raise UserError(f"--tp x --pp x --cp ({r.tp} x {r.pp} x {r.cp}) must divide --num-gpus ({r.num_gpus}).")
        dp = r.num_gpus // (r.tp * r.pp * r.cp)
    if r.tp * r.pp * dp * r.cp != r.num_gpus:
        raise UserError(f"--tp x --pp x --dp x --cp ({r.tp} x {r.pp} x {dp} x {r.cp}) must equal --num-gpus "
                        f"({r.num_gpus}).")
    return dp


def _megatron(m, hw, r: TrainRequest):
    if r.precision not in ("amp-bf16", "bf16"):
        raise UserError("--precision: multi-GPU plans model Megatron-style bf16 mixed precision; use amp-bf16.")
    dp = data_parallel(r)
    gb = r.global_batch or r.micro_batch * r.grad_accum * dp
    if r.search:
        from gpuscope.estimate.search import search_layouts

        t0 = time.perf_counter()
        res = search_layouts(m, hw, r.num_gpus, gb, seq=r.seq, gpus_per_node=r.gpus_per_node)
        return LayoutSearch(res, m.name, hw.key, r.num_gpus, gb, r.seq, time.perf_counter() - t0)
    if r.hsdp or r.bucket_view:
        raise UserError("--hsdp and --gradient-as-bucket-view plan PyTorch data parallelism (--framework hf), "
                        "not a Megatron-style layout.")
    from gpuscope.estimate.parallel import Layout, estimate_parallel, to_estimate

    lay = Layout(tp=r.tp, pp=r.pp, dp=dp, cp=r.cp, ep=r.ep, micro_batch=r.micro_batch, global_batch=gb,
                 zero=3 if r.fsdp else r.zero, sp=r.sp, virtual=r.virtual, recompute=r.recompute)
    pe = estimate_parallel(m, hw, lay, seq=r.seq, gpus_per_node=r.gpus_per_node)
    return to_estimate(pe, m, hw, r.seq)
