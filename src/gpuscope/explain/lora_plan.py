"""A LoRA / QLoRA fine-tuning plan (`gpuscope plan train --lora-r R ...`): the request's LoRA options checked
(one sentence for the first bad one), then estimate.lora_train's one-GPU estimate."""

from __future__ import annotations

from gpuscope.errors import UserError


def wants_lora(r) -> bool:
    """Whether a TrainRequest asks for LoRA: any LoRA option given."""
    return (r.lora_r is not None or r.qlora or r.lora_targets is not None or r.lora_alpha is not None
            or bool(r.lora_dropout))


def plan_lora(m, hw, r):
    """The Estimate of LoRA (``r.qlora``: QLoRA) fine-tuning of ``m`` on one GPU of ``hw``."""
    from gpuscope.estimate.lora import ALL_LINEAR, lora_shape
    from gpuscope.estimate.lora_train import check_lora_inputs, estimate_lora_train

    if r.lora_r is None:
        flag = "--qlora needs" if r.qlora else "--lora-targets, --lora-alpha and --lora-dropout need"
        raise UserError(f"{flag} --lora-r (the adapters' rank, e.g. --lora-r 16).")
    if r.multi or r.zero or r.fsdp or r.hsdp:
        raise UserError("--lora-r plans one GPU; drop --num-gpus and the parallel layout options.")
    check_lora_inputs(r.precision, r.optimizer, r.recompute, r.qlora, 1, r.offload)
    shape = lora_shape(m, r.lora_r, r.lora_targets or ALL_LINEAR, r.lora_dropout)
    return estimate_lora_train(m, hw, shape, micro_batch=r.micro_batch, seq=r.seq, precision=r.precision,
                               optimizer=r.optimizer, recompute=r.recompute, grad_accum=r.grad_accum, fused=r.fused,
                               qlora=r.qlora, alpha=r.lora_alpha, with_ops=r.with_ops, kbit_prep=r.kbit_prep)
