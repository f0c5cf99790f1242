"""Training memory on one GPU: a walk through one optimizer step as PyTorch's caching allocator sees it.

Gradients are set to None after each step (optimizer.zero_grad's default since PyTorch 2.0).

- rest: weights (W) + optimizer states (O). amp-*: fp32 weights, fp32 AdamW exp_avg and exp_avg_sq (8 bytes);
  bf16: all in bf16; fp32: all fp32; adamw-8bit: two 8-bit states with one fp32 absmax per 256-element block
  (bitsandbytes blockwise quantization); sgd: one momentum buffer.
- forward: + saved activations (activations.py), + under AMP the 16-bit copies of the weights that autocast makes
  and caches (2 bytes x matmul parameters; embeddings are not autocast), + the head's transient:
  logits (T x V, 16 bit), their fp32 upcast in the loss and log_softmax's fp32 output (saved): 10 T V bytes.
- backward: starts with the loss head (log_softmax's saved output, the nll gradient and log_softmax's gradient:
  12 T V bytes), then walks the layers from last to first; at layer l the allocator holds the activations and
  16-bit weight copies of layers <= l, the gradients of layers > l and the head, and layer l's working set.
  The reported backward peak is the maximum over that walk.
- optimizer step: rest + gradients + the temporaries of the AdamW implementation priced (estimate/adamw.py, from
  torch/optim/adam.py): none when fused (torch.optim.AdamW(fused=True)), one tensor list the size of the
  parameters for foreach (``_foreach_sqrt(exp_avg_sqs)``), two tensors the size of the largest one for torch's
  for-loop (what AdamW(fused=False) runs).
- bf16-sr / bf16-kahan (planner only): pure bf16's 2 + 2 + 4 bytes a parameter; Kahan summation adds a bf16
  compensation buffer (2) to the optimizer's states.
- bf16-master (measure/models/master_weights.py): bf16 weights and gradients (2 + 2 bytes), an fp32 master copy
  (4) and fp32 AdamW states (8) held by the optimizer: 16 bytes per parameter at rest with the gradients, as AMP's
  4 + 4 + 8 but with the activations and the autocast-free compute of pure bf16. Its step casts one bucket of
  gradients at a time to fp32 (MASTER_BUCKET_NUMEL elements, or the largest tensor if larger), runs fused AdamW on
  that bucket's masters and copies them back to bf16: the bucket's fp32 gradients are the step's only temporary.
- full recompute (activation checkpointing of each decoder layer, non-reentrant): only each layer's input is kept;
  its activations come back one layer at a time in backward; autocast's weight cache is dropped when the forward's
  autocast region ends, so the 16-bit copies live only during forward and per layer in backward.
- offload (DeepSpeed ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840): ``optimizer`` keeps the fp32 master weights
  and optimizer states in host memory; the GPU holds 16-bit weights and, during backward, 16-bit gradients that
  stream to the host as their layer finishes (one layer's worth at a time). ``params`` (ZeRO-Infinity style)
  also keeps the 16-bit weights on the host and brings two layers at a time to the GPU (the one running and the
  prefetched next).
The peak is the maximum over the phases, not their sum. Verified against torch.cuda.max_memory_allocated on an
H200 for every phase of 14 training cases (research/results/2026-11-29-h200, research/tests/test_validation_h200.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from gpuscope.estimate.activations import hf_layer_saved_bytes
from gpuscope.estimate.adamw import resolve_impl, step_temporary_bytes
from gpuscope.estimate.params import ParamCounts, layer_params
from gpuscope.estimate.runtime import TRAIN_WORKSPACE_BYTES
from gpuscope.specs.axes import Precision
from gpuscope.specs.model import ModelSpec

# The bf16-master step's bucket: 2^26 elements (256 MiB of fp32 gradients); measure/models/master_weights.py
# groups its parameters by this size (a tensor larger than it is a bucket of its own).
MASTER_BUCKET_NUMEL = 2**26


def precision_bytes(precision: str) -> tuple[float, float, str]:
    """(weight/grad bytes, activation bytes, compute dtype): specs/axes.Precision's."""
    p = Precision.parse(precision, "precision")
    return p.weight_bytes, p.activation_bytes, p.compute_dtype


def master_step_bytes(pc: ParamCounts, precision: str) -> float:
    """bf16-master's optimizer-step temporary: one bucket of fp32 gradients (the largest tensor, the embedding or
    the LM head, when it exceeds a bucket); 0 for every other precision."""
    if Precision.parse(precision, "precision") is not Precision.BF16_MASTER:
        return 0.0
    return 4.0 * max(MASTER_BUCKET_NUMEL, pc.embedding, pc.lm_head)


def optimizer_state_bytes(params: float, optimizer: str, weight_b: float) -> float:
    if optimizer in ("adamw", "adam"):
        return 2 * params * weight_b
    if optimizer == "sgd":
        return params * weight_b
    return params * (2.0 + 2 * 4.0 / 256)  # adamw-8bit, bitsandbytes blockwise (block 256)


@dataclass(frozen=True)
class TrainMemory:
    phases: dict[str, float]  # allocator peak per phase: forward, backward, optimizer
    breakdown: dict[str, float]  # named parts at the overall peak
    host_bytes: float  # what offload keeps in host memory


def train_memory(m: ModelSpec, pc: ParamCounts, *, micro_batch: int, seq: int, precision: str, optimizer: str,
                 recompute: str, grad_accum: int, offload: str, fused: bool, impl: str | None = None) -> TrainMemory:
    w_b, act_b, _ = precision_bytes(precision)
    amp = precision.startswith("amp") or precision == "fp8"
    T, V, h = micro_batch * seq, m.vocab_size, m.hidden_size
    layer_p = [layer_params(m, i) for i in range(m.num_layers)]
    r = _resident(m, pc, layer_p, w_b, optimizer, offload, Precision.parse(precision, "precision"))
    # 16-bit weight copies autocast makes (matmul weights, not norms or embedding lookups); none under offload
    copy_b = 2.0 if (amp and offload == "none") else 0.0
    copies = [(lp.attention + lp.mlp) * copy_b for lp in layer_p]
    head_copy = V * h * copy_b
    moe_set = set(m.moe_layers)
    saved = [sum(hf_layer_saved_bytes(m, micro_batch, seq, precision, i in moe_set).values())
             for i in range(m.num_layers)]
    stream_b = 4.0 if (amp or precision == "fp32") else 2.0
    layer_input = T * h * stream_b
    # Working set while one layer runs backward: grad of the residual stream (fp32 under AMP) in and out, and the
    # largest intermediate's gradient pair (MLP: 3 x T x I), plus the 16-bit weight-grad before its fp32 cast.
    width = max(m.intermediate_size, (m.moe.expert_intermediate_size * m.moe.experts_per_token) if m.moe else 0)
    bwd_work = 2 * T * h * stream_b + 3 * T * width * act_b + max(lp.mlp for lp in layer_p) / 3 * copy_b
    head_saved, head_fwd_transient, head_bwd_transient = _head_bytes(T, h, V, act_b, stream_b, amp)

    full = recompute == "full"
    kept = [layer_input if full else s for s in saved]
    fwd_extra_layer = max(saved) if full else 0.0
    accum_grads = r.grads_total if grad_accum > 1 else 0.0  # gradients persist across micro-batches
    forward_peak = (r.rest + accum_grads + sum(kept) + sum(copies) + head_copy + head_saved + head_fwd_transient
                    + fwd_extra_layer)
    # Backward walk.
    copies_alive = [0.0 if full else c for c in copies]
    bwd_start = (r.rest + accum_grads + sum(kept) + sum(copies_alive) + head_copy + head_saved
                 + head_bwd_transient)
    walk = []
    # The LM head's weight gradient (the shared embedding's, when tied) exists from here on; with gradient
    # accumulation every gradient already exists (later micro-batches add into them in place). alive[i]: what
    # layers 0..i still hold while layer i runs backward (prefix sums: the walk stays linear in depth).
    g_done, alive = accum_grads or V * h * r.gpu_w_b, list(accumulate(k + c for k, c in zip(kept, copies_alive)))
    for i in range(m.num_layers - 1, -1, -1):
        recomputed = (saved[i] + copies[i]) if full else 0.0
        walk.append(r.rest + alive[i] + recomputed + g_done + bwd_work)
        g_done += r.grads[i] if (offload == "none" and not accum_grads) else 0.0
    bwd_end = r.rest + r.grads_total + layer_input + _tied_embedding_grads(pc, amp) * (pc.embedding * r.gpu_w_b)
    foreach_tmp = _step_temporaries(m, pc, precision, optimizer, resolve_impl(fused, impl), offload)
    phases = {"forward": forward_peak, "backward": max([bwd_start, bwd_end] + walk),
              "optimizer": r.rest + (r.grads_total if offload == "none" else 0.0) + foreach_tmp}
    peak, at = max(phases.values()), max(phases, key=phases.get)
    breakdown = {
        "weights": r.weights,
        **({"master_weights_fp32": r.master} if r.master else {}),
        "optimizer_states": r.opt_states,
        "gradients": r.grads_total if (at == "optimizer" or grad_accum > 1) else 0.0,
        "activations": sum(kept) + (fwd_extra_layer if at == "forward" else 0.0),
        "weight_copies_16bit": (sum(copies) + head_copy) if at == "forward" else 0.0,
        "logits_and_loss": (head_saved + head_fwd_transient) if at == "forward" else 0.0,
        "optimizer_temporaries": foreach_tmp if at == "optimizer" else 0.0,
        "workspace": TRAIN_WORKSPACE_BYTES,
    }
    if at == "backward":
        breakdown["backward_working_set"] = peak - sum(breakdown.values())
    return TrainMemory(phases=phases, breakdown=breakdown, host_bytes=r.host)


def _step_temporaries(m: ModelSpec, pc: ParamCounts, precision: str, optimizer: str, impl: str,
                      offload: str) -> float:
    """The optimizer step's temporaries (module docstring): the AdamW implementation's (estimate/adamw.py, in the
    updated dtype; none when the optimizer runs on the host), and bf16-master's fp32 gradient bucket."""
    state_b = Precision.parse(precision, "precision").state_bytes
    tmp = step_temporary_bytes(m, pc.total, optimizer, impl, state_b) if offload == "none" else 0.0
    return tmp + master_step_bytes(pc, precision)


@dataclass(frozen=True)
class _Resident:
    """What lives on the GPU (and the host) through the whole step: weights, optimizer states, the gradients."""

    gpu_w_b: float  # bytes of a weight / gradient on the GPU
    weights: float
    master: float  # bf16-master's fp32 master copy (0 otherwise)
    opt_states: float
    host: float
    rest: float  # weights + optimizer states + workspace
    grads: list  # per layer
    grads_total: float


def _resident(m: ModelSpec, pc: ParamCounts, layer_p: list, w_b: float, optimizer: str, offload: str,
              p: Precision) -> _Resident:
    P = pc.total
    master = P * p.master_bytes  # offload with bf16-master is refused (estimate/train.py): it is always here
    # Where weights, gradients and states live. Offloaded training keeps 16-bit weights/grads on the GPU.
    gpu_w_b = w_b if offload == "none" else 2.0
    if offload == "params":
        two_layers = 2 * max(lp.total for lp in layer_p)
        weights = (two_layers + pc.embedding + pc.lm_head + pc.norms) * gpu_w_b
    else:
        weights = P * gpu_w_b
    # + bf16-kahan's compensation buffer, held by the optimizer beside its states
    opt_states = (optimizer_state_bytes(P, optimizer, p.state_bytes) + P * p.compensation_bytes
                  if offload == "none" else 0.0)
    host = 0.0 if offload == "none" else P * w_b + optimizer_state_bytes(P, optimizer, w_b)
    # Gradients: all of them on the GPU unless offloaded, where each layer's stream out as it completes.
    grads = [lp.total * gpu_w_b for lp in layer_p]
    grads_total = (P * gpu_w_b if offload == "none"
                   else (m.vocab_size * m.hidden_size + max(lp.total for lp in layer_p)) * gpu_w_b)
    return _Resident(gpu_w_b, weights, master, opt_states, host,
                     weights + master + opt_states + TRAIN_WORKSPACE_BYTES, grads, grads_total)


def _head_bytes(T: int, h: int, V: int, act_b: float, stream_b: float, amp: bool) -> tuple[float, float, float]:
    """(saved, forward transient, backward transient) bytes of the LM head and loss (transformers
    ForCausalLMLoss): logits in the activation dtype, upcast to fp32 for the loss (a copy unless they already are
    fp32), cross_entropy = log_softmax (saves its fp32 output) + nll_loss. Forward peak at log_softmax: logits +
    fp32 copy + log_softmax output; only the output outlives the forward. Backward peak at log_softmax's
    backward: its saved output, the nll gradient and its own result (3 x 4TV)."""
    head_saved = T * h * (8.0 if stream_b == 4 else 6.0) + (T * h * 2.0 if amp else 0.0) + 4.0 * T * V
    return head_saved, (act_b + (4.0 if act_b != 4.0 else 0.0)) * T * V, 8.0 * T * V


def _tied_embedding_grads(pc: ParamCounts, amp: bool) -> int:
    """Copies of the embedding's gradient at the end of backward beyond grads_total. A tied embedding gets two
    gradients (the LM head's, already in grads_total, and the embedding's): the embedding backward's output, and
    without autocast the sum as well. GPT-2 fp32 mb2 s128 on the H200 (research/results/2026-11-29-h200-d): the
    backward peak sat 302 MiB above rest + gradients at the end of backward, two copies of the 147 MiB V x h fp32
    gradient; under amp-bf16 (GPT-2 and Llama-3.2-1B, tied too) one copy: there the head's gradient arrives
    through autocast's cast node as a fresh tensor that is summed in place. bf16 without autocast is taken to
    behave as fp32 (same graph, no cast node; not measured)."""
    return (1 if amp else 2) if pc.lm_head == 0 else 0


def ddp_bucket_bytes(pc: ParamCounts, precision: str) -> float:
    """DistributedDataParallel's flat gradient buckets (torch/csrc/distributed/c10d/reducer.cpp): one buffer the
    size of all gradients, in the parameters' dtype, allocated when DDP wraps the model and kept for its life,
    with or without gradient_as_bucket_view (measured on two H200s: Llama-2-7B fp32, 26.95 GB more right after
    the wrap either way). With gradient_as_bucket_view=True the gradients are views into it: they cost nothing
    more, but they are never freed either (train.py adds the buffer to the phases accordingly)."""
    return pc.total * precision_bytes(precision)[0]


def fsdp_train_memory(m: ModelSpec, pc: ParamCounts, *, num_gpus: int, micro_batch: int, seq: int,
                      optimizer: str, recompute: str, precision: str = "amp-bf16", fused: bool = True,
                      impl: str | None = None) -> TrainMemory:
    """FSDP2 (torch.distributed.fsdp.fully_shard on every decoder layer and the root), as `gpuscope bench
    train-dist --strategy fsdp` runs it: ``amp-bf16`` = fp32 parameters with MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=fp32); ``bf16`` = bf16 parameters, no policy (gradients reduced in bf16, bf16 AdamW states).

    - sharded parameters, gradients and AdamW states: (4 + 4 + 8) P / N for amp-bf16, (2 + 2 + 4) P / N for bf16;
      nothing else at rest (after backward every module is resharded, the root too: fsdp.md below);
    - the root (embedding, final norm, LM head) is gathered at the start of the forward and kept to the end of
      backward (bf16: fully_shard does not reshard the root after forward);
    - a decoder layer's bf16 parameters are all-gathered before it runs and freed after (reshard_after_forward):
      the running layer and the prefetched next one are unsharded at a time;
    - the layers compute in bf16 (the policy casts the parameters), so activations are those of pure bf16
      training (activations.py with precision "bf16"); no autocast weight cache;
    - backward: a layer's bf16 gradient is cast to fp32 for the reduce-scatter (reduce_dtype) and its 1/N shard kept;
    - optimizer step: the shards' parameters, states and gradients (the root resharded), and the temporaries of
      the AdamW implementation (``impl``, else fused or foreach from ``fused``; estimate/adamw.py) over the local
      shards: foreach + P / N, the for-loop (AdamW(fused=False)) 2 x the largest tensor / N, in the shards' dtype.
    At N = 1 the same walk (FSDP2 still gathers into bf16 buffers); every phase checked on one H200 for Llama-3.2-1B
    and -3B: research/results/2026-12-02-h200-c/fsdp.md."""
    N = num_gpus
    P = pc.total
    T = micro_batch * seq
    V, h = m.vocab_size, m.hidden_size
    layer_p = [layer_params(m, i) for i in range(m.num_layers)]
    biggest = max(lp.total for lp in layer_p)
    root = (pc.embedding + pc.lm_head + pc.norms) * 2.0
    pb = 4.0 if precision == "amp-bf16" else 2.0  # the sharded parameters' (and gradients', states') dtype
    sharded = P * pb / N
    opt_states = optimizer_state_bytes(P, optimizer, pb) / N
    rest = sharded + opt_states + TRAIN_WORKSPACE_BYTES
    in_flight = 2 * biggest * 2.0 + root  # two layers' bf16 parameters, and the root's from forward to backward
    moe_set = set(m.moe_layers)
    saved = [sum(hf_layer_saved_bytes(m, micro_batch, seq, "bf16", i in moe_set).values())
             for i in range(m.num_layers)]
    full = recompute == "full"
    kept = [T * h * 2.0 if full else s for s in saved]
    head_saved = T * h * 6.0 + 4.0 * T * V
    forward = rest + in_flight + sum(kept) + head_saved + (2.0 + 4.0) * T * V + (max(saved) if full else 0.0)
    width = max(m.intermediate_size, (m.moe.expert_intermediate_size * m.moe.experts_per_token) if m.moe else 0)
    # grad of the stream, MLP; the layer's unsharded bf16 gradient (+ its fp32 copy for an fp32 reduce)
    bwd_work = 2 * T * h * 2.0 + 3 * T * width * 2.0 + biggest * (2.0 + (4.0 if pb == 4.0 else 0.0))
    g_done = pb * V * h / N
    walk = [rest + sum(kept) + head_saved + 8.0 * T * V + in_flight]
    for i in range(m.num_layers - 1, -1, -1):
        walk.append(rest + sum(kept[: i + 1]) + (saved[i] if full else 0.0) + in_flight + g_done + bwd_work)
        g_done += layer_p[i].total * pb / N
    backward = max(walk + [rest + sharded])
    foreach_tmp = step_temporary_bytes(m, P, optimizer, resolve_impl(fused, impl), pb, N)
    optimizer_peak = rest + sharded + foreach_tmp
    phases = {"forward": forward, "backward": backward, "optimizer": optimizer_peak}
    at = max(phases, key=phases.get)
    breakdown = {"weights_sharded": sharded, "optimizer_states": opt_states, "workspace": TRAIN_WORKSPACE_BYTES}
    breakdown.update({"gradients_sharded": sharded, "optimizer_temporaries": foreach_tmp} if at == "optimizer" else
                     {"root_unsharded_bf16": root, "layers_unsharded_bf16": in_flight - root, "activations": sum(kept),
                      **({"logits_and_loss": head_saved + 6.0 * T * V} if at == "forward" else {})})
    breakdown["other_at_peak"] = phases[at] - sum(breakdown.values())
    return TrainMemory(phases=phases, breakdown=breakdown, host_bytes=0.0)
