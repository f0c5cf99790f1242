"""LoRA / QLoRA on one GPU: the configurations that fit, ranked, and the longest sequence that fits.

Each configuration is estimate/lora_train.estimate_lora_train's (HF transformers + peft, one GPU). The axes searched:
micro-batch (powers of two up to a limit; gradient accumulation keeps the tokens per optimizer step), gradient
checkpointing (none | full), and the adapters' optimizer:
- ``adamw``: torch's fused AdamW (8 bytes of fp32 states an adapter parameter);
- ``adamw-8bit``: bitsandbytes' blockwise 8-bit AdamW (2 bytes + an fp32 absmax per 256);
- ``paged-adamw`` / ``paged-adamw-8bit``: bitsandbytes' paged optimizers (QLoRA, Dettmers et al. 2023,
  arXiv 2305.14314, section 3 "Paged Optimizers"): the states live in CUDA unified memory, which the driver
  evicts to host RAM when the device runs short and pages back for the optimizer step. They are outside PyTorch's
  caching allocator, so the device has to hold only the rest: the fit is judged on the peak less the states. Where
  the unpaged configuration would not fit, the states are taken to move out and back each step over the host link
  (2 x their bytes, estimate/train.host_link_gbs); where it fits, paging costs nothing.
Ranking: tokens per second, one row per (sequence, micro-batch, checkpointing): an 8-bit or paged optimizer is
listed only where it makes that configuration fit or run faster than one earlier in OPTIMIZERS; configurations within 2% of the fastest count as a tie and come first in the order
of fewer extra packages (torch's AdamW before bitsandbytes'), unpaged before paged, no checkpointing before
checkpointing. Memory grows with the micro-batch, so a search along the micro-batch stops at the first that does
not fit; the longest sequence is found by doubling from 256 tokens and then bisecting on multiples of 256 (memory
grows with the sequence), capped at the model's ``max_position_embeddings`` unless a cap is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.estimate.lora import ALL_LINEAR, LoraShape, lora_shape
from gpuscope.estimate.lora_train import estimate_lora_train
from gpuscope.estimate.runtime import runtime_overheads
from gpuscope.estimate.train import host_link_gbs

PAGED = "paged-"
OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit")
RECOMPUTES = ("none", "full")
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
SEQ_STEP = 256
TIE = 0.02  # within 2% of the fastest: a tie (module docstring)


@dataclass(frozen=True)
class LoraConfig:
    """One LoRA / QLoRA configuration on one GPU and the planner's numbers for it."""

    seq: int
    micro_batch: int
    grad_accum: int
    recompute: str
    optimizer: str
    qlora: bool
    tokens_per_s: float
    step_s: float
    mfu: float
    peak_bytes: float
    required_bytes: float
    fits: bool
    paged_bytes: float = 0.0  # optimizer states held in unified memory (paged optimizers), outside the peak

    @property
    def needs(self) -> str:
        """Packages beyond torch + transformers + peft."""
        return "bitsandbytes" if (self.qlora or self.optimizer != "adamw") else ""

    def to_json(self) -> dict:
        return dict(self.__dict__, needs=self.needs)


def check_optimizer(name: str) -> str:
    if name not in OPTIMIZERS:
        raise UserError(f"--optimizer {name!r} is not searched with LoRA; use one of {', '.join(OPTIMIZERS)}.")
    return name


def configure(m, hw, shape: LoraShape, *, seq: int, micro_batch: int, recompute: str, optimizer: str,
              qlora: bool, precision: str = "amp-bf16", grad_accum: int = 1, loss: str = "hf",
              offload_activations: bool = False, kbit_prep: bool = False) -> LoraConfig:
    """The planner's numbers for one configuration (paged optimizers as the module docstring says)."""
    paged = check_optimizer(optimizer).startswith(PAGED)
    est = estimate_lora_train(m, hw, shape, micro_batch=micro_batch, seq=seq, precision=precision,
                              optimizer=optimizer[len(PAGED):] if paged else optimizer, recompute=recompute,
                              grad_accum=grad_accum, qlora=qlora, loss=loss, offload_activations=offload_activations,
                              kbit_prep=kbit_prep)
    peak, step_s, held = est.peak_bytes_per_gpu, est.time["step_s"], 0.0
    if paged:
        held = est.breakdown_bytes["adapter_optimizer_states"]
        peak -= held
        if not est.fits:
            step_s += 2.0 * held / (host_link_gbs(hw) * 1e9)
    required = peak + sum(runtime_overheads(peak).values())
    tokens = micro_batch * seq * grad_accum
    return LoraConfig(seq, micro_batch, grad_accum, recompute, optimizer, qlora, tokens / step_s, step_s,
                      est.mfu * est.time["step_s"] / step_s, peak, required,
                      required <= hw.device_total_bytes, held)


def _useful(configs: list[LoraConfig]) -> list[LoraConfig]:
    """Drop a configuration whose (seq, micro-batch, checkpointing) fits with an optimizer earlier in OPTIMIZERS
    (fewer packages, no paging) at least as fast: the 8-bit and paged optimizers stay where they make a
    configuration fit or run faster."""
    kept: dict[tuple, LoraConfig] = {}
    for c in sorted(configs, key=lambda c: OPTIMIZERS.index(c.optimizer)):
        k = (c.seq, c.micro_batch, c.recompute)
        if k not in kept or c.tokens_per_s > kept[k].tokens_per_s * (1 + 1e-9):
            kept[k] = c
    return list(kept.values())


def _order(configs: list[LoraConfig]) -> list[LoraConfig]:
    configs = _useful(configs)
    if not configs:
        return []
    best = max(c.tokens_per_s for c in configs)
    tied = sorted((c for c in configs if c.tokens_per_s >= (1 - TIE) * best),
                  key=lambda c: (c.optimizer != "adamw", c.optimizer.startswith(PAGED), c.recompute != "none",
                                 -c.tokens_per_s))
    rest = sorted((c for c in configs if c.tokens_per_s < (1 - TIE) * best), key=lambda c: -c.tokens_per_s)
    return tied + rest


def rank_configs(m, hw, *, r: int, targets: str = ALL_LINEAR, qlora: bool = False, seq: int = 2048,
                 precision: str = "amp-bf16", max_micro_batch: int = 64, tokens_per_step: int | None = None,
                 optimizers=OPTIMIZERS, recomputes=RECOMPUTES, dropout: float = 0.0, top: int = 10
                 ) -> list[LoraConfig]:
    """The configurations of LoRA (``qlora``: QLoRA) rank ``r`` on ``targets`` at ``seq`` that fit, fastest first."""
    if isinstance(seq, bool) or not isinstance(seq, int) or seq <= 0:
        raise UserError(f"--seq must be a positive integer, got {seq!r}.")
    if isinstance(max_micro_batch, bool) or not isinstance(max_micro_batch, int) or max_micro_batch <= 0:
        raise UserError(f"--max-micro-batch must be a positive integer, got {max_micro_batch!r}.")
    shape = lora_shape(m, r, targets, dropout)
    mbs = [b for b in MICRO_BATCHES if b <= max_micro_batch]
    target = tokens_per_step or seq * max(mbs)
    out: list[LoraConfig] = []
    for optimizer in optimizers:
        for recompute in recomputes:
            for mb in mbs:
                c = configure(m, hw, shape, seq=seq, micro_batch=mb, recompute=recompute, optimizer=optimizer,
                              qlora=qlora, precision=precision, grad_accum=max(1, target // (mb * seq)))
                if not c.fits:
                    break  # a larger micro-batch needs more memory still
                out.append(c)
    return _order(out)[:top]


def longest_seq(m, hw, shape: LoraShape, *, qlora: bool, recompute: str = "full", optimizer: str = "adamw",
                precision: str = "amp-bf16", micro_batch: int = 1, cap: int | None = None,
                loss: str = "hf", step: int = SEQ_STEP, kbit_prep: bool = False) -> LoraConfig | None:
    """The longest sequence (a multiple of ``step``, at most ``cap``) whose configuration fits, or None."""
    cap = cap or m.max_position_embeddings

    def at(s: int) -> LoraConfig:
        return configure(m, hw, shape, seq=s, micro_batch=micro_batch, recompute=recompute, optimizer=optimizer,
                         qlora=qlora, precision=precision, loss=loss, kbit_prep=kbit_prep)

    lo = at(step)
    if not lo.fits:
        return None
    top = max(cap // step, 1) * step
    s = 2 * step
    while s <= top:
        c = at(s)
        if not c.fits:
            break
        lo, s = c, 2 * s
    hi = min(s, top + step)  # the first length known (or taken) not to fit
    while hi - lo.seq > step:
        c = at(lo.seq + (hi - lo.seq) // step // 2 * step)
        lo, hi = (c, hi) if c.fits else (lo, c.seq)
    return lo


def longest_by_config(m, hw, *, r: int, targets: str = ALL_LINEAR, qlora: bool = False,
                      precision: str = "amp-bf16", optimizers=("adamw", "paged-adamw-8bit"),
                      recomputes=RECOMPUTES, cap: int | None = None) -> list[LoraConfig]:
    """The longest sequence at micro-batch 1 for each (checkpointing, optimizer), longest first."""
    shape = lora_shape(m, r, targets)
    found = [longest_seq(m, hw, shape, qlora=qlora, recompute=rc, optimizer=opt, precision=precision, cap=cap)
             for opt in optimizers for rc in recomputes]
    return sorted((c for c in found if c is not None), key=lambda c: -c.seq)
