"""LoRA / QLoRA fine-tuning memory on one GPU: the walk of memory_train.py with a frozen base.

What runs (peft ``get_peft_model`` on a transformers model, HF ``Trainer``), by ``--precision``:
- ``amp-bf16`` (``Trainer(bf16=True)``): base weights loaded in bf16 and frozen, adapters fp32 (peft's
  ``autocast_adapter_dtype=True`` upcasts them), bf16 autocast; the residual stream is bf16 (the embedding is).
- ``amp-fp16`` (``Trainer(fp16=True)``): the same in fp16, with a GradScaler.
- ``bf16``: bf16 base, fp32 adapters, no autocast: peft casts each adapter's input to fp32 (``_cast_input_dtype``),
  so the adapter GEMMs run in fp32 and each target saves its own fp32 copy of its input.
- ``fp32``: everything fp32.
- ``--qlora`` (bitsandbytes ``load_in_4bit``, ``bnb_4bit_quant_type="nf4"``, ``bnb_4bit_use_double_quant=True``,
  compute dtype = the precision's half dtype): every ``nn.Linear`` of the decoder layers is stored 4-bit whether or
  not it carries an adapter; embeddings, norms, biases, lm_head (bitsandbytes skips the output layer) and the
  fused 3-D MoE experts (not ``nn.Linear`` in transformers 5) stay in the compute dtype.
  NF4 storage (Dettmers et al. 2023, arXiv 2305.14314, section 3, "Double Quantization"): 4 bits a weight, one
  absmax per 64-weight block quantized to 8 bits, and one fp32 second-level constant per 256 blocks:
  4 + 8/64 + 32/(64 x 256) = 4.127 bits = NF4_BYTES_PER_WEIGHT.

Memory parts (bytes):
- base weights: P x 2 (P x 4 in fp32), or (P - Q) x 2 + Q x NF4_BYTES_PER_WEIGHT under QLoRA (Q: decoder Linear
  weights). No gradients, no optimizer states for them.
- adapters: A trainable parameters (estimate/lora.py) in fp32: weights 4A, gradients 4A, AdamW exp_avg and
  exp_avg_sq 8A (adamw-8bit: 2A + one fp32 absmax per 256; sgd: a 4A momentum); autocast's 16-bit copies 2A.
  Paged optimizers (bitsandbytes ``paged_*``) keep their states in CUDA unified memory, outside PyTorch's caching
  allocator: not modelled (they would not show in ``torch.cuda.max_memory_allocated``).
- activations, per decoder layer (``lora_layer_saved_bytes``), from activations.hf_layer_saved_bytes with what a
  frozen weight does not need removed: a Linear whose weight needs no gradient saves only its weight (for dX),
  not its input; a norm whose weight is frozen saves only its fp32 input copy (RMSNorm; LayerNorm its input).
  Checked on CPU with ``torch.autograd.graph.saved_tensors_hooks``: a frozen Linear under autocast saves one
  tensor, its 16-bit weight; a LoRA Linear adds x (16 bit) for lora_A, A.x (T x r) for lora_B and their weights'
  16-bit copies. peft casts x to the adapters' fp32 dtype before lora_A (``_cast_input_dtype``) and autocast casts
  it back to 16 bit for the matmul, so every target saves its own 16-bit copy of its input (a norm's output, the
  attention output before o_proj, the MLP product before down_proj), even where q, k and v read the same x
  (without autocast: its own fp32 copy; in fp32 nothing is cast and one input is saved once); under QLoRA with
  autocast peft's bnb ``Linear4bit`` does not cast x (it casts only when ``torch.is_autocast_enabled()`` is false,
  which on CUDA it is not), so targets reading one tensor save it once (q, k, v: one; gate, up: one), and o_proj's
  input is SDPA's saved output itself (flash attention writes its output as b x s x heads x d, so HF's
  ``transpose(1, 2).contiguous()`` copies nothing; seen on CPU with saved_tensors_hooks, tests/test_qlora_saved_cpu.py);
  with
  ``--lora-dropout`` > 0 each target also keeps a 1-byte mask (CUDA's bool dropout mask).
- gradient checkpointing (``--recompute full``): each decoder layer's input (T x h in the stream dtype) is kept and
  its activations come back one layer at a time in backward. In the forward a checkpointed layer (non-reentrant:
  its saved tensors are dropped as they are packed; reentrant: it runs without a graph) holds only its working
  set, the MLP's gate, up and product (3 T I): the forward's peak is the layers' inputs plus the larger of that and
  the LM head's, and no layer's saved set (with one, the H200's three checkpointed runs read +5.8%, +5.0% and +1.0%
  in the forward; without, -0.2%, +1.0%, -0.0%: research/results/2026-12-01-h200/lora.jsonl Llama-3.1-8B mb4 and
  Qwen2.5-32B, research/results/2026-12-02-h200/qlora.jsonl; research/results/2026-12-02-h200-b/qlora.md).
- the head: lm_head frozen: the final norm's fp32 copy (4 T h) and log_softmax's fp32 output (4 T V) are saved;
  the logits (T x V, stream dtype) and their fp32 upcast are forward transients; backward's loss head is 8 T V.
- ``loss="chunked"`` (torchtune's LinearCrossEntropyLoss, 8 chunks, compiled): the head runs chunk by chunk and
  the compiled chunk recomputes its logits in backward, so nothing vocabulary-sized is saved; one chunk's logits,
  fp32 upcast and softmax (forward) or its gradients (backward) exist at a time: (2 + 4 + 4) T V / 8 and
  (2 + 4 + 4 + 4) T V / 8. An assumption about the compiled graph, not measured here.
- ``loss="hf-shift"``: transformers up to 4.47's ForCausalLMLoss, which shifted the fp32 logits
  (``logits[..., :-1, :].contiguous()``) instead of the labels (5.x pads the labels): one more fp32 T x V copy
  alive in forward beside the 16-bit logits and their fp32 upcast (backward unchanged: 8 T V).
- ``offload_activations`` (with gradient checkpointing; torchtune's ``enable_activation_offloading``): each
  checkpointed layer input is copied to host memory as the forward goes on and fetched back one layer ahead in
  backward, so OFFLOAD_RESIDENT = 2 layer inputs are on the device at a time (the one in use and the one in
  flight) instead of all L.
- QLoRA: one Linear's weight dequantised to the compute dtype at a time (forward and backward): a transient of the
  largest decoder Linear x 2 bytes.
- ``kbit_prep`` (QLoRA with gradient checkpointing; peft's ``prepare_model_for_kbit_training``, the HF QLoRA recipe's
  step before ``get_peft_model``): every 16-bit parameter that is not 4-bit (embeddings, norms, lm_head) is cast to
  fp32, so the embedding's output and the residual stream are fp32 (bitsandbytes' ``Linear4bit`` casts its output
  back to its input's dtype), the checkpointed layer inputs and the MLP's working set take 4 bytes an element, and
  autocast's bf16 copy of the fp32 lm_head weight (not cached: the weight is frozen) is saved for dX from the head's
  forward to its backward. The recomputed layer's saved set is the bf16 stream's (an underestimate of the backward
  walk; at long sequences the forward's head is the peak).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.estimate.activations import hf_layer_saved_bytes
from gpuscope.estimate.lora import LinearSite, LoraShape, linear_sites
from gpuscope.estimate.memory_train import TrainMemory
from gpuscope.estimate.params import ParamCounts
from gpuscope.estimate.runtime import TRAIN_WORKSPACE_BYTES
from gpuscope.specs.model import ModelSpec

NF4_BYTES_PER_WEIGHT = (4 + 8 / 64 + 32 / (64 * 256)) / 8  # 0.5159 bytes = 4.127 bits (module docstring)
DROPOUT_MASK_BYTES = 1.0  # torch.native_dropout's bool mask on CUDA
OFFLOAD_RESIDENT = 2  # activation offloading: layer inputs on the device at a time (module docstring)


@dataclass(frozen=True)
class LoraDtypes:
    """Bytes of the base weights and residual stream, of what an adapter saves, and whether autocast runs."""

    base_b: float
    adapter_in_b: float  # the dtype of x as lora_A receives it (fp32 when peft casts it up: bf16 without autocast)
    autocast: bool

    @classmethod
    def of(cls, precision: str) -> "LoraDtypes":
        if precision == "fp32":
            return cls(4.0, 4.0, False)
        if precision.startswith("amp-"):
            return cls(2.0, 2.0, True)
        return cls(2.0, 4.0, False)  # bf16: peft casts each adapter input to its fp32 weight dtype


def quantized_params(m: ModelSpec) -> int:
    """Weights bitsandbytes stores 4-bit: every decoder-layer nn.Linear (not lm_head)."""
    return sum(s.n_in * s.n_out * s.count for s in linear_sites(m))


def base_weight_bytes(pc: ParamCounts, m: ModelSpec, dt: LoraDtypes, qlora: bool) -> float:
    if not qlora:
        return pc.total * dt.base_b
    q = quantized_params(m)
    return (pc.total - q) * dt.base_b + q * NF4_BYTES_PER_WEIGHT


def adapter_state_bytes(a: int, optimizer: str, adapter_b: float = 4.0) -> float:
    """Optimizer states of ``a`` adapter parameters of ``adapter_b`` bytes (fp32: peft's; module docstring)."""
    if optimizer in ("adamw", "adam"):
        return 2 * adapter_b * a
    if optimizer == "sgd":
        return adapter_b * a
    return a * (2.0 + 2 * 4.0 / 256)  # adamw-8bit, bitsandbytes blockwise (block 256)


_READS_ATTENTION_OUTPUT = ("o_proj", "dense", "c_proj")  # in the attention part


def input_of(s: LinearSite) -> tuple[str, str]:
    """The tensor a module reads: its sub-layer's normed input (q, k, v; gate, up), the attention's output (o_proj),
    else its own (down_proj, MLA's q_b_proj / kv_b_proj)."""
    if s.name in _READS_LAYER_INPUT:
        return s.part, "layer_input"
    if s.name in _READS_MLP_INPUT:
        return s.part, "mlp_input"
    if s.part == "attention" and s.name in _READS_ATTENTION_OUTPUT:
        return s.part, "attention_output"
    return s.part, s.name


def _adapter_saved(sites_in_layer: list[LinearSite], T: int, r: int, dt: LoraDtypes, dropout: float,
                   shared: bool = False, attention_saved: bool = True) -> float:
    """What one layer's adapters add: their inputs (a copy per target where peft casts x, else once per distinct
    input tensor), A.x, dropout masks. ``shared``: x reaches lora_A uncast (QLoRA under autocast: peft's bnb layer
    casts only without autocast), so targets reading one tensor save it once."""
    if not sites_in_layer:
        return 0.0
    ax_b = 2.0 if dt.autocast else dt.adapter_in_b
    out = sum(T * r * ax_b for _ in sites_in_layer)
    x_b = 2.0 if dt.autocast else dt.adapter_in_b  # the copy lora_A's matmul saves
    if dropout > 0:
        return out + sum(T * s.n_in * (x_b + DROPOUT_MASK_BYTES) for s in sites_in_layer)
    if not shared and (dt.adapter_in_b != dt.base_b or dt.autocast):  # peft casts x per target
        return out + sum(T * s.n_in * x_b for s in sites_in_layer)
    distinct = {input_of(s): s.n_in for s in sites_in_layer}  # x uncast: one tensor per input
    if shared and attention_saved:  # o_proj's input is SDPA's saved output itself (module docstring)
        distinct.pop(("attention", "attention_output"), None)
    return out + sum(T * n_in * (2.0 if dt.autocast else dt.base_b) for n_in in distinct.values())


_READS_LAYER_INPUT = ("q_proj", "k_proj", "v_proj", "qkv_proj", "c_attn", "query_key_value", "q_a_proj",
                      "kv_a_proj_with_mqa")
_READS_MLP_INPUT = ("gate_proj", "up_proj", "gate_up_proj", "c_fc", "dense_h_to_4h", "shared_expert_gate")


def _live_parts(m: ModelSpec, sites: list[LinearSite], first: bool) -> tuple[bool, bool, bool]:
    """Whether the attention block, the rest of the attention sub-layer and the MLP need gradients. In the first
    layer the input comes from the frozen embedding: nothing before the first adapter requires grad, so autograd
    saves nothing there (saved_tensors_hooks on CPU: with o_proj and down_proj adapted, layer 0 saved no q, k, v)."""
    if not first:
        return True, True, True
    attn_in = any(s.part == "attention" and s.name in _READS_LAYER_INPUT for s in sites)
    after_attn = attn_in or any(s.part == "attention" for s in sites)
    mlp_in = after_attn or any(s.part == "mlp" and s.name in _READS_MLP_INPUT for s in sites)
    return attn_in, after_attn, mlp_in


def lora_layer_saved_bytes(m: ModelSpec, batch: int, seq: int, dt: LoraDtypes, sites_in_layer: list[LinearSite],
                           r: int, dropout: float, moe: bool = False, first: bool = False,
                           shared: bool = False) -> dict[str, float]:
    """Bytes autograd keeps for one decoder layer with a frozen base and these adapters (module docstring);
    ``first``: the first decoder layer (its input needs no gradient); ``shared``: as _adapter_saved."""
    T = batch * seq
    full = hf_layer_saved_bytes(m, batch, seq, "fp32" if dt.base_b == 4 else "bf16", moe)
    h, act_b = m.hidden_size, dt.base_b
    attn_live, post_live, mlp_live = _live_parts(m, sites_in_layer, first)
    per_norm = T * h * (4.0 if m.norm == "rmsnorm" else act_b)  # fp32 copy (RMSNorm) or the input (LayerNorm)
    norms = (int(attn_live) + int(post_live)) * per_norm * (1 if m.norms_per_layer == 2 else 2)
    attn = full["attention"] - (0.0 if m.mla else T * m.q_dim * act_b)  # o_proj's input: only if o_proj adapts
    mlp = full["mlp"] if (moe and m.moe) else full["mlp"] - T * m.intermediate_size * act_b  # down's input, same
    return {"norms": norms, "attention": attn if attn_live else 0.0, "mlp": mlp if mlp_live else 0.0,
            "adapters": _adapter_saved(sites_in_layer, T, r, dt, dropout, shared, attn_live)}


def _kbit_prep(m: ModelSpec, pc: ParamCounts, qlora: bool, recompute: str) -> tuple[float, float]:
    """(the fp32 upcast's extra bytes: 2 a parameter that is not 4-bit, the residual stream's bytes) under
    prepare_model_for_kbit_training."""
    if not qlora or recompute != "full":
        raise UserError("--kbit-prep (peft's prepare_model_for_kbit_training) is planned for QLoRA: give --qlora and --recompute full.")
    return 2.0 * (pc.total - quantized_params(m)), 4.0


def _loss_head(T: int, h: int, V: int, base_b: float, loss: str) -> tuple[float, float, float]:
    """(saved, forward transient, backward transient) bytes of the LM head and loss (module docstring)."""
    if loss == "chunked":
        return 4.0 * T * h, (base_b + 8.0) * T * V / 8, (base_b + 12.0) * T * V / 8
    if loss == "hf-shift":  # transformers <= 4.47: one more fp32 T x V, the shifted logits' contiguous copy
        return 4.0 * T * h + 4.0 * T * V, (base_b + 8.0) * T * V, 8.0 * T * V
    return 4.0 * T * h + 4.0 * T * V, (base_b + (4.0 if base_b != 4 else 0.0)) * T * V, 8.0 * T * V


def lora_train_memory(m: ModelSpec, pc: ParamCounts, shape: LoraShape, *, micro_batch: int, seq: int,
                      precision: str, optimizer: str, recompute: str, grad_accum: int, fused: bool,
                      qlora: bool, loss: str = "hf", offload_activations: bool = False,
                      adapter_b: float = 4.0, kbit_prep: bool = False) -> TrainMemory:
    """``adapter_b``: bytes of an adapter parameter (4: peft's fp32; 2: torchtune's bf16, whose AdamW states and
    gradients then are bf16 too and need no autocast copy); ``kbit_prep``: module docstring."""
    dt = LoraDtypes.of(precision)
    T, V, h, A, L = micro_batch * seq, m.vocab_size, m.hidden_size, shape.trainable, m.num_layers
    base = base_weight_bytes(pc, m, dt, qlora)
    prep, stream_b = _kbit_prep(m, pc, qlora, recompute) if kbit_prep else (0.0, dt.base_b)
    head_copy = m.vocab_size * h * 2.0 if kbit_prep else 0.0  # autocast's bf16 lm_head, saved for dX
    base += prep
    opt_states = adapter_state_bytes(A, optimizer, adapter_b)
    rest = base + adapter_b * A + opt_states + TRAIN_WORKSPACE_BYTES
    moe_set = set(m.moe_layers) if m.is_moe else set()
    saved = [sum(lora_layer_saved_bytes(m, micro_batch, seq, dt, list(shape.sites_per_layer[i]), shape.r,
                                        shape.dropout, i in moe_set, first=i == 0, shared=qlora and dt.autocast
                                        ).values()) for i in range(L)]
    full = recompute == "full"
    layer_input = T * h * stream_b
    kept = [layer_input if full else s for s in saved]
    if full and offload_activations:  # on the host but the OFFLOAD_RESIDENT in flight (module docstring)
        kept = [layer_input if i < OFFLOAD_RESIDENT else 0.0 for i in range(L)]
    copies = 2.0 * A if (dt.autocast and adapter_b == 4.0) else 0.0  # autocast's 16-bit copies of fp32 adapters
    dequant = 2.0 * max((s.n_in * s.n_out for s in linear_sites(m)), default=0) if qlora else 0.0
    head_saved, head_fwd, head_bwd = _loss_head(T, h, V, dt.base_b, loss)
    grads = adapter_b * A
    accum = grads if grad_accum > 1 else 0.0
    width = max(m.intermediate_size, (m.moe.expert_intermediate_size * m.moe.experts_per_token) if m.moe else 0)
    fwd_work = 3 * T * width * stream_b if full else 0.0  # a checkpointed layer's MLP working set (docstring)
    forward = rest + accum + sum(kept) + copies + max(head_saved + head_fwd + head_copy, fwd_work) + dequant
    bwd_work = 2 * T * h * stream_b + 3 * T * width * stream_b + dequant
    walk = [rest + accum + sum(kept) + copies + head_saved + head_bwd + head_copy]
    for i in range(L - 1, -1, -1):
        done = accum or grads * (L - 1 - i) / L
        walk.append(rest + sum(kept[: i + 1]) + copies + (saved[i] if full else 0.0) + done + bwd_work)
    backward = max(walk + [rest + grads + layer_input])
    optimizer_peak = rest + grads + (0.0 if (fused or optimizer == "sgd") else adapter_b * A)
    phases = {"forward": forward, "backward": backward, "optimizer": optimizer_peak}
    at = max(phases, key=phases.get)
    breakdown = {
        "base_weights": base, "adapter_weights": adapter_b * A,
        "adapter_grads": grads if (at == "optimizer" or grad_accum > 1) else 0.0,
        "adapter_optimizer_states": opt_states,
        "activations": sum(kept),
        "logits_and_loss": (head_saved + head_fwd) if at == "forward" else 0.0,
        "workspace": TRAIN_WORKSPACE_BYTES,
    }
    breakdown["other_at_peak"] = phases[at] - sum(breakdown.values())
    return TrainMemory(phases=phases, breakdown=breakdown, host_bytes=0.0)
