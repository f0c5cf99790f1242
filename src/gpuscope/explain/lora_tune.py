"""`gpuscope tune plan --lora-r R [--qlora]`: the LoRA / QLoRA configurations of one GPU that fit, fastest first,
and the longest sequence each (checkpointing, optimizer) pair reaches at micro-batch 1 (estimate/lora_search.py).
The document it returns is what report/lora_view.py renders (schema gpuscope.tune.lora/1)."""

from __future__ import annotations

from gpuscope.errors import UserError
from gpuscope.estimate.lora import ALL_LINEAR, lora_shape
from gpuscope.estimate.lora_search import OPTIMIZERS, RECOMPUTES, longest_by_config, rank_configs


def tune_lora(m, hw, *, r: int, targets: str | None = None, qlora: bool = False, seq: int = 2048,
              precision: str = "amp-bf16", tokens_per_step: int | None = None, max_micro_batch: int = 64,
              top: int = 10) -> dict:
    """{"schema", "model", "hardware", "lora", "ranked", "longest_seq"} for LoRA rank ``r`` on ``m`` and ``hw``."""
    from gpuscope.report.lora_view import tune_json

    if r is None:
        raise UserError("--qlora and --lora-targets need --lora-r (the adapters' rank, e.g. --lora-r 16).")
    targets = targets or ALL_LINEAR
    if tokens_per_step is not None and (isinstance(tokens_per_step, bool) or tokens_per_step <= 0):
        raise UserError(f"--tokens-per-step must be a positive integer, got {tokens_per_step!r}.")
    shape = lora_shape(m, r, targets)
    ranked = rank_configs(m, hw, r=r, targets=targets, qlora=qlora, seq=seq, precision=precision,
                          max_micro_batch=max_micro_batch, tokens_per_step=tokens_per_step, top=top)
    longest = longest_by_config(m, hw, r=r, targets=targets, qlora=qlora, precision=precision,
                                optimizers=("adamw", "paged-adamw-8bit"), recomputes=RECOMPUTES)
    lora = {"r": r, "targets": targets, "qlora": qlora, "trainable_params": shape.trainable, "seq": seq,
            "precision": precision, "optimizers_searched": list(OPTIMIZERS)}
    return tune_json(ranked, longest, m.name, hw.key, lora)
