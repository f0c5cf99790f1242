"""FSDP2's own parts of a training step's time (torch.distributed.fsdp.fully_shard; its memory:
memory_train.fsdp_train_memory): the bytes its copies move, and its hooks' host time per decoder layer."""

from __future__ import annotations

from gpuscope.estimate.params import ParamCounts
from gpuscope.specs.model import ModelSpec

# FSDP2's host time per decoder layer and step (its pre/post-forward and pre/post-backward hooks: the all-gather's
# copy-in, call and copy-out, the reshard, the reduce-scatter's copy-in and call, the sharded gradients' DTensors),
# in units of the platform's per-kernel launch cost (engines.EngineModel.launch_s: 17.2 us on the H200 VM), and the
# share of it in the forward. Set from two cases on one H200 at world size 1 whose GPU work is a fifth of their
# host time, so every phase is the host's: Llama-3.2-1B and -3B, mb1 x 128 tokens, fused AdamW (the host's time per
# phase, measured, less the planned plain-HF host time: 207 and 270 launches a layer, forward 41% and 43%; the
# mean). Independent checks (research/results/2026-12-02-h200-c/fsdp.md): the host-bound Llama-3.2-3B mb1 x 2048
# (fused and foreach) and Phi-3-mini mb1 x 2048 (foreach), the GPU-bound Llama-3.2-1B mb4 and -3B mb2.
FSDP_HOST_LAYER_LAUNCHES = 238
FSDP_HOST_FORWARD_SHARE = 0.42


def fsdp_micro_batch(host: dict, gpu_s: float, m: ModelSpec, pc: ParamCounts, precision: str, num_gpus: int,
                     launch_s: float, bw_gbs: float) -> tuple[dict, float]:
    """One micro-batch's host seconds per phase (estimate/train.train_host_s) with FSDP2's hook time added to its
    forward and backward, and its GPU seconds with the copies' traffic (:func:`fsdp_copy_bytes`) added."""
    per_step = FSDP_HOST_LAYER_LAUNCHES * launch_s * m.num_layers
    host = {**host, "forward": host["forward"] + FSDP_HOST_FORWARD_SHARE * per_step,
            "backward": host["backward"] + (1.0 - FSDP_HOST_FORWARD_SHARE) * per_step}
    return host, gpu_s + fsdp_copy_bytes(pc, precision, num_gpus) / (bw_gbs * 1e9)


def fsdp_copy_bytes(pc: ParamCounts, precision: str, num_gpus: int) -> float:
    """Bytes FSDP2's own copies move in one step (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py), beside
    the collectives' traffic (estimate/train.py). Per element gathered: the bf16 mixed-precision policy's cast of
    the local fp32 shard into a flat bf16 buffer (_get_param_all_gather_inputs' _foreach_copy_: 4 + 2, none for
    bf16 shards), its copy into the all-gather buffer (all_gather_copy_in: 2 + 2), both over the 1/N local shard,
    and the copy out of the gathered buffer into the unsharded parameters (split_with_sizes_copy: 2 + 2, full size).
    Decoder layers are gathered twice (forward, and backward after reshard_after_forward), the root once. Per
    gradient element: the copy of the unsharded bf16 gradient into the reduce-scatter buffer in reduce_dtype
    (foreach_reduce_scatter_copy_in: 2 + 4 under the policy, 2 + 2 in bf16), and at N = 1, where foreach_reduce
    skips the collective, reduce_output.copy_(input) (2 x the reduce dtype). On one H200 (FSDP2 at world size 1,
    research/results/2026-12-02-h200-c/fsdp.md) this is 42 bytes a layer parameter: 31 ms of a 0.25 s 3B step."""
    pb = 4.0 if precision == "amp-bf16" else 2.0
    rb = pb  # reduce_dtype: fp32 under the policy, the parameters' bf16 without one
    N = num_gpus
    gather = ((pb + 2.0 if pb != 2.0 else 0.0) + 4.0) / N + 4.0
    reduce = 2.0 + rb + (2.0 * rb if N == 1 else 0.0)
    root = pc.embedding + pc.lm_head + pc.norms
    return (pc.total - root) * (2.0 * gather + reduce) + root * (gather + reduce)
