"""Recommend a single-GPU training configuration from the planner: every combination of precision, optimizer,
activation recomputation and micro-batch that fits, ranked by tokens per second (ties within 2%: fp32 master
weights before pure bf16, bf16-master before AMP, fused AdamW before 8-bit). Gradient accumulation keeps the
requested tokens per step. Each configuration carries its numerics (specs/axes.NUMERICS).

Pure bf16 (bf16 weights and AdamW states) is ranked only when asked (``allow_pure_bf16``): an AdamW update below
2^-9 of its weight rounds away, so at the small learning rates of pre-training and its decay most weights stop
moving. bf16-master (bf16 compute weights, fp32 masters and states in the optimizer step) runs the same bf16
forward and backward and keeps every update, for 8 more bytes a parameter and 26 more bytes moved in the step.

The planner models Hugging Face eager training (estimate/train.py, validated on an H200); the recommendation is
what that runtime can do without code changes. torch.compile and fused kernels (Liger, FlashAttention-3) would
change the time ranking, not the memory feasibility, and are left to `gpuscope tune` measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.estimate.train import estimate_train
from gpuscope.specs.axes import MEASURED_RECOMPUTE, Optimizer, Precision, Recompute

# what HF eager training runs (specs/axes): precisions with bf16 compute (bf16-master with a master-weight step:
# FSDP2's MixedPrecisionPolicy on one GPU, or measure/models/master_weights.MasterAdamW; bf16-kahan and bf16-sr
# with torch-optimi's or torchao's optimizer), torch's fused AdamW or bitsandbytes' 8-bit one, and the recompute
# modes a measurement runs. The order is the tie-break's: fp32 masters first, then the compensated pure-bf16 ones.
PRECISIONS = Precision.values((Precision.BF16_MASTER, Precision.AMP_BF16, Precision.BF16_KAHAN, Precision.BF16_SR,
                               Precision.BF16))
PURE_BF16_NOTE = ("--precision bf16 (bf16 weights and AdamW states) is not ranked: "
                  + Precision.BF16.numerics.split(": ", 1)[1] + "; --allow-pure-bf16 ranks it")
OPTIMIZERS = Optimizer.values((Optimizer.ADAMW, Optimizer.ADAMW_8BIT))
# the optimizers a precision's step exists with: gpuscope's master step, torch-optimi's Kahan AdamW and torchao's
# stochastic-rounding AdamW are AdamW over their own states (bitsandbytes' 8-bit states are a different optimizer)
ONLY_ADAMW = Precision.values((Precision.BF16_MASTER, Precision.BF16_KAHAN, Precision.BF16_SR))
RECOMPUTE = Recompute.values(MEASURED_RECOMPUTE)


@dataclass(frozen=True)
class Choice:
    precision: str
    optimizer: str
    recompute: str
    micro_batch: int
    grad_accum: int
    tokens_per_s: float
    step_s: float
    mfu: float
    peak_bytes: float
    required_bytes: float

    @property
    def needs(self) -> str:
        """Packages beyond torch + transformers the configuration needs."""
        return ", ".join(n for n in (Precision.parse(self.precision).needs,
                                     "bitsandbytes" if self.optimizer == "adamw-8bit" else "") if n)

    @property
    def numerics(self) -> str:
        return Precision.parse(self.precision).numerics

    def to_json(self) -> dict:
        return dict(self.__dict__, needs=self.needs, numerics=self.numerics)


def recommend_train(m, hw, *, seq: int, tokens_per_step: int | None = None, max_micro_batch: int = 64,
                    top: int = 10, allow_pure_bf16: bool = False) -> list[Choice]:
    if seq <= 0 or max_micro_batch <= 0:
        raise UserError("--seq and --max-micro-batch must be positive integers.")
    mbs = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= max_micro_batch]
    target = tokens_per_step or seq * max(mbs)
    out: list[Choice] = []
    for precision in (p for p in PRECISIONS if allow_pure_bf16 or p != Precision.BF16.value):
        if not hw.supports("bf16"):
            break
        for optimizer in (Optimizer.ADAMW.value,) if precision in ONLY_ADAMW else OPTIMIZERS:
            for recompute in RECOMPUTE:
                for mb in mbs:
                    accum = max(1, target // (mb * seq))
                    est = estimate_train(m, hw, micro_batch=mb, seq=seq, precision=precision, optimizer=optimizer,
                                         recompute=recompute, grad_accum=accum)
                    if not est.fits:
                        break  # a larger micro-batch needs more memory still
                    out.append(Choice(precision, optimizer, recompute, mb, accum,
                                      est.throughput["tokens_per_s"], est.time["step_s"], est.mfu,
                                      est.peak_bytes_per_gpu, est.required_bytes))
    if not out:
        raise UserError(f"no single-GPU configuration of {m.name} at --seq {seq} fits {hw.name}; see "
                        "`gpuscope doctor train ... --plan-only` for multi-GPU levers.")
    prefer = {(p, o): i for i, (p, o) in enumerate((p, o) for p in PRECISIONS for o in OPTIMIZERS)}
    best = max(c.tokens_per_s for c in out)
    # Within 2% of the fastest counts as a tie: those come first, the simpler and safer setup (fp32 master weights,
    # torch's fused AdamW without bitsandbytes, no recompute) before the marginally faster one; then the
    # rest by speed. (An int() bucketing of tokens/s used to split near-equal configurations at bucket edges:
    # llama-2-7b on an H200 put 8-bit AdamW first at +0.06%.)
    tied = sorted((c for c in out if c.tokens_per_s >= 0.98 * best),
                  key=lambda c: (prefer[(c.precision, c.optimizer)], c.recompute != "none", -c.tokens_per_s))
    rest = sorted((c for c in out if c.tokens_per_s < 0.98 * best), key=lambda c: -c.tokens_per_s)
    return (tied + rest)[:top]
