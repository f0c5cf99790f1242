"""torch's three AdamW implementations as the planner prices them: the optimizer step's temporaries (memory) and its
passes over memory and kernel launches (time). Source: torch/optim/adam.py (AdamW calls adam()), 2.11-2.13.

Which one torch runs: ``AdamW(fused=True)`` -> ``fused`` (_fused_adam, one kernel per tensor group);
``AdamW(foreach=True)``, or neither keyword with every parameter on CUDA (torch's default) -> ``foreach``
(_multi_tensor_adam); ``AdamW(fused=False)`` or ``foreach=False`` -> ``for-loop`` (_single_tensor_adam): adam()
chooses its default only when both keywords are None, so an explicit ``fused=False`` is the for-loop, on one GPU or
under FSDP2 alike (its DTensor parameters are of a foreach-supported type; measure/distributed/optim.py).
"""

from __future__ import annotations

import math

from gpuscope.errors import UserError
from gpuscope.specs.axes import Precision
from gpuscope.specs.model import ModelSpec

ADAMW_IMPLS = ("fused", "foreach", "for-loop")

# One line per implementation for the plan's assumptions: what is priced and the torch call that runs it.
IMPL_NOTES = {
    "fused": "AdamW priced fused (torch.optim.AdamW(fused=True)): one kernel per tensor group, no temporaries",
    "foreach": "AdamW priced foreach (AdamW(foreach=True), torch's default on CUDA when neither fused nor foreach "
               "is given): + one temporary list the size of the (local) parameters",
    "for-loop": "AdamW priced as torch's for-loop (AdamW(fused=False) or foreach=False): eight kernels per tensor, "
                "+ two temporaries of the largest tensor",
}


def resolve_impl(fused: bool, impl: str | None = None) -> str:
    """The implementation priced: ``impl`` when given (one of ADAMW_IMPLS), else fused or foreach from ``fused``."""
    if impl is None:
        return "fused" if fused else "foreach"
    if impl not in ADAMW_IMPLS:
        raise UserError(f"--adamw-impl must be one of {', '.join(ADAMW_IMPLS)}, got '{impl}'.")
    return impl


def param_tensors(m: ModelSpec) -> int:
    """Parameter tensors: ~9 a layer (q, k, v, o, 3 MLP matrices or 2 plus biases, 2 norms) and embeddings/head."""
    return m.num_layers * (9 if m.gated_mlp else 12) + 4


def largest_tensors(m: ModelSpec) -> tuple[float, float]:
    """(elements of the largest parameter tensor, of the tensor the optimizer updates just before it), in the
    parameters' order: the token embedding (V x h) is an HF decoder's first parameter (nothing before it; an untied
    LM head of the same size comes after the final norm); a dense MLP's down_proj (I x h) follows up_proj, of the
    same size; transformers 5's fused 3-D MoE gate_up_proj (E x 2 I_e x h) follows the router (small, taken as 0),
    and its down_proj, half its size, follows it (2 x half + the whole = 2 x the whole, the same peak)."""
    h = m.hidden_size
    emb = m.vocab_size * h
    mlp = m.intermediate_size * h
    moe = m.moe.num_experts * (2 if m.gated_mlp else 1) * m.moe.expert_intermediate_size * h if m.moe else 0
    if emb >= max(mlp, moe):
        return float(emb), 0.0
    return (float(moe), 0.0) if moe >= mlp else (float(mlp), float(mlp))


def step_temporary_bytes(m: ModelSpec, total_params: float, optimizer: str, impl: str, state_b: float,
                         shards: int = 1) -> float:
    """What one step allocates beyond parameters, gradients and states, per GPU (FSDP2 shards every tensor on dim 0,
    so each local tensor is 1/shards of it):

    - fused: nothing (updates in place).
    - foreach: ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)``, one list the size of every parameter (then
      divided and offset in place; every other _foreach op of AdamW is in place): P x state bytes.
    - for-loop, per tensor: ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)``: the sqrt and the
      division each allocate a tensor of its size, both alive at the division, while the previous tensor's
      ``denom`` is still bound (Python rebinds it after the new one exists): max_i (2 s_i + s_(i-1)), with the
      largest tensors of :func:`largest_tensors`. FSDP2 at world size 1 on an H200 (Llama-3.2-1B and -3B,
      research/results/2026-12-02-h200-c/fsdp.md): 2.10 and 3.16 GB, twice their fp32 V x h embedding; the op by
      op count on CPU: tests/test_fsdp_adamw_path.py.

    SGD with momentum updates in place (nothing); other optimizers (bitsandbytes' 8-bit AdamW) are taken as one
    full-size list unless fused."""
    if optimizer == "sgd" or impl == "fused":
        return 0.0
    if impl == "for-loop" and optimizer in ("adamw", "adam"):
        big, before = largest_tensors(m)
        return (2.0 * big + before) * state_b / shards
    return total_params * state_b / shards


# Element accesses to device memory per parameter of one AdamW step (a read or a write of one tensor element): the
# fused kernel reads p, g, m, v and writes p, m, v (7); foreach and the for-loop run the same eight ops (AdamW:
# decoupled weight decay on, the default 0.01; no amsgrad, no maximize), over lists or one tensor at a time:
# mul_(p) 2, lerp_(m, g) 3, mul_(v) 2, addcmul_(v, g, g) 3 (g passed twice, read once from memory), sqrt(v) -> tmp 2,
# div(tmp) 2, add_(tmp, eps) 2, addcdiv_(p, m, tmp) 4 = 20 (Adam without weight decay skips the first: 18).
ADAM_ACCESSES = {"fused": 7, "adamw-foreach": 20, "adam-foreach": 18}
LOOP_KERNELS = 8  # the for-loop's kernels per tensor (the eight ops above)


def optimizer_bytes(P: float, optimizer: str, precision: str, impl: str) -> float:
    """Bytes one optimizer step moves. AdamW / Adam: ADAM_ACCESSES x the updated dtype's bytes (the parameters', or
    bf16-master's fp32 masters); bf16-master adds its gradients' fp32 cast (read 2, write 4) and the masters' copy
    back to bf16 (read 4, write 2): 12 bytes a parameter, 40 in all when fused; bf16-kahan reads and writes its
    compensation buffer (+4). SGD with momentum: 5 accesses. 8-bit AdamW: p, g read, p written, two 8-bit states
    read and written."""
    p = Precision.parse(precision, "precision")
    master = (12.0 if p is Precision.BF16_MASTER else 2 * p.compensation_bytes) * P
    if optimizer == "adamw-8bit":
        return P * (3 * p.state_bytes + 4) + master
    passes = 5 if optimizer == "sgd" else ADAM_ACCESSES["fused" if impl == "fused" else f"{optimizer}-foreach"]
    return passes * P * p.state_bytes + master


# foreach's list kernels (multi_tensor_apply, below) stream at FOREACH_BW_FRACTION of the copy bandwidth: FSDP2 at
# world size 2 (fake process group) on an H200, foreach AdamW over Llama-2-7B's 3.37 G local parameters: 76.8 ms for
# 20 accesses a parameter, against 65.3 planned at the copy rate (0.850); checked on Llama-3.1-8B's 4.02 G at 2048
# and 4096 tokens (91.6 / 91.3 ms: 0.849 / 0.852). research/results/2026-12-02-h200-d/fsdp_fake.md
FOREACH_BW_FRACTION = 0.85


def bw_fraction(impl: str) -> float:
    """The share of the copy bandwidth an implementation's optimizer kernels stream at (fused and the for-loop's
    elementwise kernels: all of it, not measured apart)."""
    return FOREACH_BW_FRACTION if impl == "foreach" else 1.0

# torch's multi_tensor_apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh): a _foreach kernel takes at most
# depth_to_max_tensors[depth - 1] tensors per list (36 for the four lists of addcdiv_ / addcmul_) and 320 blocks of
# kChunkSize = 65536 elements, and launches again when either fills.
FOREACH_MAX_TENSORS = 36
FOREACH_LAUNCH_ELEMENTS = 320 * 65536


def launch_s(m: ModelSpec, impl: str, kernel_s: float, local_params: float) -> float:
    """Host seconds of the optimizer's kernel launches, issued ahead of the GPU (the step takes max(traffic, host)).
    for-loop: LOOP_KERNELS a tensor. foreach: the same eight ops as list ops, each launching once per
    FOREACH_MAX_TENSORS tensors or FOREACH_LAUNCH_ELEMENTS elements, whichever fills first. Fused: in the fused
    step's measured host cost (engines.TrainHost). FSDP2 at world size 1 on an H200 read foreach and the for-loop
    at the same step, their 20 accesses a parameter at full bandwidth (Llama-3.2-1B mb4: 0.198 s both;
    research/results/2026-12-02-h200-c/fsdp.md)."""
    if impl == "for-loop":
        return LOOP_KERNELS * param_tensors(m) * kernel_s
    if impl == "foreach":
        per_op = max(math.ceil(param_tensors(m) / FOREACH_MAX_TENSORS),
                     math.ceil(local_params / FOREACH_LAUNCH_ELEMENTS))
        return LOOP_KERNELS * per_op * kernel_s
    return 0.0
