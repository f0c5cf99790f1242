"""Training over many GPUs, Megatron-LM style: tensor (+ sequence), pipeline and data parallelism with ZeRO.

Per GPU of the busiest pipeline stage (the first: it holds the embedding and, under 1F1B, p micro-batches in flight).

Memory
- model states: parameters of the stage (layers / pp, tensor-parallel parts / tp; the embedding and the LM head
  vocab-parallel / tp on the first and last stage) x bytes per parameter. Megatron mixed precision keeps bf16
  parameters (2), fp32 main gradients (4) and fp32 master weights + Adam moments (12): 18 B/param; ZeRO (Rajbhandari
  et al. 2020) divides the 12 (stage 1, Megatron's distributed optimizer), then the gradients (2), then the
  parameters (3) by the data-parallel degree.
- activations: Korthikanti et al. 2022 Table 2 per layer (activations.korthikanti_layer_bytes) x layers per stage x
  micro-batches in flight; the first stage holds p of them under 1F1B, so L/pp x p = L layers' worth, and the
  interleaved schedule multiplies by (1 + (p - 1)/(p m)) (section 4.2.3). Full recompute keeps only each layer's
  input (2sbh) and rebuilds one layer at a time.

Time (one optimizer step)
- per micro-batch and layer: GEMMs with the tensor-parallel split of N or K at the achievable rate (wave
  quantization), attention's two batched GEMMs (QK^T, PV: 4 b s^2 h / t FLOPs, non-causal in Megatron 2021 runs),
  fused elementwise kernels over the activations they read and write, and 2 all-reduces of b s h x 2 bytes over
  the tensor-parallel group forward (2 backward; with sequence parallelism the same bytes as all-gather +
  reduce-scatter). Backward = 2x forward compute; full recompute adds a forward.
- pipeline: 1F1B takes (m + (p - 1)/v) micro-batch slots of the slowest stage (bubble (p - 1)/(v m), Narayanan
  et al. 2021 section 2.2), plus point-to-point sends of b s h x 2 bytes between stages.
- data parallel: gradients all-reduced (ZeRO >= 2: reduce-scattered, and ZeRO-3 all-gathers parameters before each
  forward and backward) over the data-parallel group; Megatron's 2021 runs did not overlap this with backward.
- optimizer: a memory-bound pass over the stage's (sharded) model states.
- expert parallelism (MoE, Megatron-Core style): the routed experts of each MoE layer are split over ``ep`` ranks
  carved from the data-parallel group (ep divides dp and the expert count); expert weights are also split over the
  TP group (expert TP = TP). Each token's hidden state goes to its top-k experts and back: an all-to-all of
  b s k h x 2 bytes (/ tp with SP) over the EP group to dispatch and one to combine, forward and backward (again
  when recomputed). Expert GEMMs run at GROUPED_GEMM_EFFICIENCY of the dense rate; expert gradients reduce over
  the dp / ep ranks that hold the same experts, and ZeRO shards expert states over those.
Model FLOPs: Narayanan et al. 2021 eq. (3), F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per iteration with
activation recomputation (their convention: recompute counted), so TFLOP/s per GPU = F / (time x GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuscope.errors import UserError
from gpuscope.estimate.activations import korthikanti_layer_bytes
from gpuscope.estimate.comm import collective_time
from gpuscope.estimate.params import count_params
from gpuscope.estimate.pipeline_schedule import bubble_share
from gpuscope.estimate.roofline import sm_count, wave_efficiency
from gpuscope.estimate.result import Estimate
from gpuscope.estimate.runtime import runtime_overheads
from gpuscope.estimate.topology import topology_for
from gpuscope.specs.axes import Recompute
from gpuscope.specs.model import ModelSpec

# Megatron's fused kernels (fused LayerNorm, bias-GeLU, bias-dropout-add, scaled masked softmax) move their bytes
# close to copy bandwidth, unlike eager TensorIterator kernels (roofline.ELEMENTWISE_BW_FRACTION): assumed 0.85.
FUSED_BW_FRACTION = 0.85
# Attention's batched GEMMs (K = head_dim = 64..128) run below the large-GEMM rate; the same fraction as flash
# attention measured on the H200 at head_dim 128 (roofline.ATTENTION_EFFICIENCY).
ATTN_GEMM_EFFICIENCY = 0.62
# torch._grouped_mm (transformers 5's MoE path; Megatron-Core's grouped GEMM is the same idea) ran at 88%
# (Mixtral-8x7B prefill shapes) and 70% (DeepSeek-V2-Lite: 64 small experts) of a dense GEMM of the same rows on
# the H200 (research/results/2026-11-29-h200-b/moe_attn.json): we take 0.8.
GROUPED_GEMM_EFFICIENCY = 0.8
STATE_BYTES = {
    "megatron": {"param": 2.0, "grad": 4.0, "optimizer": 12.0},  # bf16 params, fp32 main grads, fp32 master + Adam
    "zero": {"param": 2.0, "grad": 2.0, "optimizer": 12.0},  # Rajbhandari et al. 2020, section 3.1
}


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    global_batch: int = 1  # sequences per optimizer step, all data-parallel ranks together
    zero: int = 0  # 0-3; Megatron's distributed optimizer is 1; FSDP full shard is 3
    sp: bool = False  # sequence parallelism with tensor parallelism (Korthikanti et al. 2022)
    virtual: int = 1  # interleaved pipeline: model chunks per GPU
    recompute: str = "full"  # "none", "selective", "full"
    cp: int = 1  # context parallelism: each rank holds s/cp tokens of every sequence (Llama 3 section 3.3.2)
    ep: int = 1  # expert parallelism (MoE): routed experts split over ep ranks of the data-parallel group

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per step (m)."""
        return self.global_batch // (self.dp * self.micro_batch)


def check_layout(m: ModelSpec, lay: Layout) -> None:
    for name in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch", "virtual"):
        v = getattr(lay, name)
        if not isinstance(v, int) or v <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be a positive integer, got {v!r}.")
    if m.num_heads % lay.tp:
        raise UserError(f"--tp ({lay.tp}) must divide the model's {m.num_heads} attention heads.")
    if lay.pp * lay.virtual > m.num_layers:
        raise UserError(f"--pp ({lay.pp}) x virtual stages ({lay.virtual}) exceeds the model's {m.num_layers} layers.")
    if lay.global_batch % (lay.dp * lay.micro_batch):
        raise UserError(f"the global batch ({lay.global_batch}) must be a multiple of dp x micro-batch "
                        f"({lay.dp} x {lay.micro_batch}).")
    if m.max_position_embeddings % (2 * lay.cp) and lay.cp > 1:
        raise UserError(f"--cp ({lay.cp}): the sequence ({m.max_position_embeddings}) must split into 2 x cp chunks.")
    if lay.ep > 1:
        if not m.is_moe:
            raise UserError(f"--ep ({lay.ep}) needs a mixture-of-experts model; {m.name} is dense.")
        if (lay.dp * lay.cp) % lay.ep or m.moe.num_experts % lay.ep:
            raise UserError(f"--ep ({lay.ep}) must divide dp x cp ({lay.dp * lay.cp}) and the "
                            f"{m.moe.num_experts} experts.")
    if lay.zero not in (0, 1, 2, 3):
        raise UserError(f"--zero must be 0, 1, 2 or 3, got {lay.zero}.")
    Recompute.parse(lay.recompute, "recompute")


@dataclass(frozen=True)
class ParallelEstimate:
    layout: Layout
    memory_bytes: dict[str, float]  # busiest GPU: model states split, activations, logits
    peak_bytes: float
    fits: bool
    time_s: dict[str, float]  # step and its parts
    step_s: float
    tflops_per_gpu: float  # Narayanan eq. (3) FLOPs (recompute counted) per second per GPU
    mfu: float  # 6N + 12 l s h model FLOPs (no recompute) against the dense peak
    tokens_per_s: float


def _stage_param_split(m: ModelSpec, lay: Layout) -> tuple[float, float]:
    """(dense, routed-expert) parameters on one GPU of the first stage. Routed experts are spread evenly over the
    layers (a first dense layer, as DeepSeek's, is averaged in)."""
    pc = count_params(m)
    per_layer = (pc.attention + pc.mlp - pc.routed_experts + pc.norms) / m.num_layers
    experts = pc.routed_experts / m.num_layers
    layers = -(-m.num_layers // lay.pp)
    emb = pc.embedding / lay.tp
    head = (pc.lm_head or pc.lm_head_matmul) / lay.tp if lay.pp > 1 else pc.lm_head / lay.tp
    # first stage: its layers + the embedding (+ the head too when pp == 1; with pp > 1 a tied head is a copy on
    # the last stage, so the first stage stays the busiest by activations)
    dense = layers * per_layer / lay.tp + emb + (head if lay.pp == 1 else 0.0)
    return dense, layers * experts / (lay.tp * lay.ep)


def parallel_memory(m: ModelSpec, lay: Layout, states: str = "megatron", flash: bool = True,
                    p_stage: float | tuple[float, float] | None = None) -> dict[str, float]:
    """``p_stage``: the stage's parameters per GPU, or (dense, routed experts) of them (parallel._stage_param_split);
    ZeRO shards dense states over the dp x cp ranks and expert states over the dp x cp / ep ranks sharing them."""
    if p_stage is None:
        p_stage = _stage_param_split(m, lay)
    dense, expert = p_stage if isinstance(p_stage, tuple) else (p_stage, 0.0)
    b = STATE_BYTES[states]
    dp = lay.dp * lay.cp  # ZeRO shards over every rank holding the same parameters
    whole, shard = dense + expert, dense / dp + expert / (dp // lay.ep)  # experts: over the ranks sharing them
    z = lay.zero
    model_states = {"parameters": b["param"] * (shard if z >= 3 else whole),
                    "gradients": b["grad"] * (shard if z >= 2 else whole),
                    "optimizer_states": b["optimizer"] * (shard if z >= 1 else whole)}
    s, h, a = m.max_position_embeddings // lay.cp, m.hidden_size, m.num_heads
    out = model_states | _activation_memory(m, lay, s, h, a, flash)
    if lay.cp > 1:  # the all-gathered K and V of the full sequence for the layer being computed
        out["cp_gathered_kv"] = 2 * lay.micro_batch * m.max_position_embeddings * m.kv_dim / lay.tp * 2.0
    return out


def _activation_memory(m: ModelSpec, lay: Layout, s: int, h: int, a: int, flash: bool) -> dict[str, float]:
    # flash attention keeps no s^2 tensor: the selective-recompute form of Table 2 applies without recomputation
    rc = "selective" if (flash and lay.recompute == "none") else lay.recompute
    per_layer = korthikanti_layer_bytes(s, lay.micro_batch, h, a, t=lay.tp, sp=lay.sp, recompute=rc)
    # 1F1B: the first stage holds min(p, m) micro-batches of its L/pp layers: L layers' worth when m >= p
    in_flight_layers = -(-m.num_layers // lay.pp) * min(lay.pp, max(1, lay.micro_batches))
    if lay.virtual > 1:
        in_flight_layers *= 1 + (lay.pp - 1) / (lay.pp * max(1, lay.micro_batches))
    acts = per_layer * in_flight_layers
    if lay.recompute == "full":  # one layer rebuilt in full during its backward
        acts += korthikanti_layer_bytes(s, lay.micro_batch, h, a, t=lay.tp, sp=lay.sp,
                                        recompute="selective" if flash else "none")
    out = {"activations": acts}
    if lay.pp == 1:  # the last stage's logits: vocab-parallel fp32 cross entropy (logits + softmax + grad)
        out["logits"] = 3 * 4.0 * s * lay.micro_batch * m.vocab_size / lay.tp
    return out


def _gemm_s(mm: int, n: int, k: int, tflops: float, sms: int | None) -> float:
    return 2.0 * mm * n * k / (tflops * 1e12 * wave_efficiency((mm, n, k), sms))


class Planner:
    """One model, device, sequence length and network: estimates layouts, caching what layouts share (per-layer
    costs by TP degree and micro-batch, stage parameter counts, collective times), so a search is mostly sums."""

    def __init__(self, m: ModelSpec, hw, seq: int | None = None, num_gpus: int = 1,
                 gpus_per_node: int | None = None, inter_gbs: float | None = None, attention: str = "flash",
                 states: str = "megatron"):
        if attention not in ("flash", "materialized"):
            raise UserError(f"attention must be flash or materialized, got '{attention}'.")
        if states not in STATE_BYTES:
            raise UserError(f"states must be one of {', '.join(STATE_BYTES)}, got '{states}'.")
        if seq and seq != m.max_position_embeddings:
            m = replace(m, max_position_embeddings=seq)
        self.m, self.hw, self.s = m, hw, m.max_position_embeddings
        self.attention, self.states = attention, states
        self.topo = topology_for(hw, num_gpus, gpus_per_node=gpus_per_node, inter_gbs=inter_gbs)
        self.tflops = hw.achievable_tflops("bf16")
        self.bw = hw.achievable_bw_gbs() * 1e9
        self.peak = hw.peak("bf16") * 1e12
        self.sms = sm_count(hw)
        self.matmul_active = count_params(m).matmul_active
        self._layer: dict = {}
        self._coll: dict = {}
        self._stage: dict = {}

    def coll(self, op: str, nbytes: float, group: int, per_node: int | None = None) -> float:
        key = (op, nbytes, group, per_node)
        if key not in self._coll:
            self._coll[key] = collective_time(op, nbytes, group, self.topo, gpus_per_node_in_group=per_node)
        return self._coll[key]

    def stage_params(self, tp: int, pp: int, ep: int = 1) -> tuple[float, float]:
        """(dense, routed-expert) parameters per GPU of the first stage."""
        if (tp, pp, ep) not in self._stage:
            self._stage[(tp, pp, ep)] = _stage_param_split(self.m, Layout(tp=tp, pp=pp, ep=ep))
        return self._stage[(tp, pp, ep)]

    def layer_costs(self, t: int, b: int, sp: bool, cp: int = 1) -> tuple[float, float, float, float, float]:
        """(forward seconds of one layer, its attention core, one TP all-reduce, LM head fwd+bwd, one CP K/V
        all-gather) per micro-batch. With context parallelism each rank holds s/cp tokens (load-balanced causal
        chunks) and its queries attend the whole gathered sequence: 1/cp of the attention work."""
        key = (t, b, sp, cp)
        if key in self._layer:
            return self._layer[key]
        m, s_full = self.m, self.s
        s = s_full // cp
        h, a, V = m.hidden_size, m.num_heads, m.vocab_size
        ffn = m.intermediate_size
        tok = b * s
        tflops, bw, sms = self.tflops, self.bw, self.sms
        n_qkv = (m.q_dim + 2 * m.kv_dim) // t
        up = 2 if m.gated_mlp else 1

        def mlp_s(rows: int, width: int) -> float:
            return _gemm_s(rows, width // t, h, tflops, sms) * up + _gemm_s(rows, h, width // t, tflops, sms)

        mlp = mlp_s(tok, ffn)
        if m.is_moe:  # MoE layers: the top-k routed experts per token (grouped GEMMs) + shared experts + router
            moe = m.moe
            routed = mlp_s(tok * moe.experts_per_token, moe.expert_intermediate_size) / GROUPED_GEMM_EFFICIENCY
            shared = mlp_s(tok, moe.shared_intermediate_size) if moe.shared_intermediate_size else 0.0
            router = 2.0 * tok * h * moe.num_experts / (tflops * 1e12)
            # token permutation to the experts' order and back: read + write b s k h bf16 values, twice
            router += 4.0 * tok * moe.experts_per_token * h * 2.0 / (bw * FUSED_BW_FRACTION)
            f = len(m.moe_layers) / m.num_layers
            mlp = (1 - f) * mlp + f * (routed + shared + router)
        gemm = _gemm_s(tok, n_qkv, h, tflops, sms) + _gemm_s(tok, h, m.q_dim // t, tflops, sms) + mlp
        rep = (1.0 / t) if sp else 1.0
        if self.attention == "flash":
            # causal flash attention: half the pairs, no s^2 tensor in memory (Dao 2022), at the SDPA rate
            attn = 2.0 * b * s * s_full * m.q_dim / t / (tflops * 1e12 * ATTN_GEMM_EFFICIENCY)
        else:
            # Megatron 2021-22: QK^T and PV as batched GEMMs over all s^2 pairs, then scaled-masked softmax and
            # dropout over b x (a/t) x s^2 (read 2, write 2, mask 1, dropout output 2 bytes)
            attn = 4.0 * b * s * s * m.q_dim / t / (tflops * 1e12 * ATTN_GEMM_EFFICIENCY)
            attn += 7.0 * b * (a / t) * s * s / (bw * FUSED_BW_FRACTION)
        # fused LayerNorms, bias-GeLU and bias-dropout-add over the activations (replicated unless SP)
        ew_bytes = tok * h * (2 * 4 * rep + 2 * 3 * rep) * 2 + tok * ffn / t * 2 * 2
        fwd_layer = gemm + attn + ew_bytes / (bw * FUSED_BW_FRACTION)
        allreduce = self.coll("all_reduce", tok * h * 2.0, t) if t > 1 else 0.0
        head = 3.0 * _gemm_s(tok, V // t, h, tflops, sms) + 3 * 4.0 * tok * V / t * 2 / (bw * FUSED_BW_FRACTION)
        # CP (all-gather based, as Llama 3 runs it): K and V of the full sequence gathered before attention
        kv_gather = self.coll("all_gather", 2 * b * s_full * m.kv_dim / t * 2.0, cp) if cp > 1 else 0.0
        self._layer[key] = (fwd_layer, attn, allreduce, head, kv_gather)
        return self._layer[key]

    def _dp_comm(self, params: float, replicas: int, per_node: int, zero: int, mbs: int) -> float:
        """Gradient reduction (ZeRO >= 2: reduce-scatter) of ``params`` bf16 gradients over ``replicas`` ranks, the
        gather of the updated shards (ZeRO >= 1) and ZeRO-3's parameter gathers before every micro-batch's forward
        and backward."""
        if replicas <= 1 or params <= 0:
            return 0.0
        op = "all_reduce" if zero < 2 else "reduce_scatter"
        t = self.coll(op, params * 2.0, replicas, per_node)
        if zero >= 1:  # updated parameters gathered back after the sharded optimizer step
            t += self.coll("all_gather", params * 2.0, replicas, per_node)
        if zero == 3:  # gathered before every micro-batch's forward and backward
            t += 2 * mbs * self.coll("all_gather", params * 2.0, replicas, per_node)
        return t

    def estimate(self, lay: Layout, check: bool = True) -> ParallelEstimate:
        if check:
            check_layout(self.m, lay)
        m, s = self.m, self.s
        h, L = m.hidden_size, m.num_layers
        t, p, b = lay.tp, lay.pp, lay.micro_batch
        fwd_layer, attn_core, allreduce, head_mb, kv_gather = self.layer_costs(t, b, lay.sp, lay.cp)
        # TP: 2 all-reduces forward and 2 backward (with SP: all-gather + reduce-scatter, the same bytes), 2 more
        # when the forward is recomputed. Recompute: full = the forward again; selective = the attention core.
        full = lay.recompute == "full"
        tp_comm = allreduce * (6 if full else 4)
        # CP: the K/V all-gather forward (again if recomputed) and the matching reduce-scatter of their gradients
        tp_comm += kv_gather * (3 if full else 2)
        recomputed = fwd_layer if full else (attn_core if lay.recompute == "selective" else 0.0)
        layers_per_stage = -(-L // p)  # the busiest stage when p does not divide L (Llama 3 405B: 126 over 16)
        ep_comm = 0.0
        if lay.ep > 1:  # dispatch + combine all-to-alls, forward and backward (and the recomputed forward)
            moe_share = len(m.moe_layers) / L
            a2a_bytes = b * (s // lay.cp) * m.moe.experts_per_token * h * 2.0 / (t if lay.sp else 1)
            per_node = max(1, min(lay.ep, self.topo.gpus_per_node // t))
            ep_comm = moe_share * (6 if full else 4) * self.coll("all_to_all", a2a_bytes, lay.ep, per_node)
        slot = layers_per_stage * (3.0 * fwd_layer + recomputed + tp_comm + ep_comm) + head_mb  # last stage: head
        p2p = self.coll("send_recv", b * s // lay.cp * h * 2.0, 2, 1) if p > 1 else 0.0
        mbs = lay.micro_batches
        slots = mbs + (p - 1) / lay.virtual
        pipeline = slots * (slot + 2 * p2p)
        # ---- data parallel gradient reduction and ZeRO parameter gathers ----
        dense, expert = self.stage_params(t, p, lay.ep)
        p_stage = dense + expert
        replicas = lay.dp * lay.cp  # context-parallel ranks hold the same parameters: gradients reduce over both
        per_node = _dp_per_node(lay, self.topo)
        # dense parameters reduce over every replica; routed experts over the replicas / ep that hold the same ones
        dp_comm = self._dp_comm(dense, replicas, per_node, lay.zero, mbs)
        if expert:
            dp_comm += self._dp_comm(expert, replicas // lay.ep, max(1, per_node // lay.ep), lay.zero, mbs)
        # optimizer: read 18 and write 16 bytes per (sharded) parameter
        sharded = (dense + expert * lay.ep) / replicas if lay.zero >= 1 else p_stage  # as parallel_memory shards
        optimizer = sharded * (18 + 16) / self.bw
        step = pipeline + dp_comm + optimizer
        mem = parallel_memory(m, lay, states=self.states, flash=self.attention == "flash", p_stage=(dense, expert))
        peak = sum(mem.values())
        fits = peak + sum(runtime_overheads(peak).values()) <= self.hw.device_total_bytes
        B, gpus = lay.global_batch, lay.num_gpus
        model_flops = (6.0 * self.matmul_active + 12.0 * L * s * m.q_dim) * B * s
        return ParallelEstimate(
            layout=lay, memory_bytes=mem, peak_bytes=peak, fits=fits,
            time_s={"step": step, "pipeline": pipeline, "bubble": (p - 1) / lay.virtual * (slot + 2 * p2p),
                    "tp_comm": tp_comm * layers_per_stage * slots, "ep_comm": ep_comm * layers_per_stage * slots,
                    "dp_comm": dp_comm, "optimizer": optimizer},
            step_s=step, tflops_per_gpu=megatron_table1_flops(B, s, L, h, m.vocab_size) / step / gpus / 1e12,
            mfu=model_flops / step / gpus / self.peak, tokens_per_s=B * s / step,
        )


def estimate_parallel(m: ModelSpec, hw, lay: Layout, seq: int | None = None, gpus_per_node: int | None = None,
                      inter_gbs: float | None = None, attention: str = "flash",
                      states: str = "megatron") -> ParallelEstimate:
    """Megatron-style training step on ``lay.num_gpus`` GPUs (bf16 compute).

    attention: "flash" (causal, fused, no s^2 memory) or "materialized" (Megatron 2021-22: s^2 scores in memory).
    states: "megatron" (2 + 4 + 12 bytes per parameter) or "zero" (the ZeRO paper's 2 + 2 + 12)."""
    check_layout(m, lay)
    return Planner(m, hw, seq, lay.num_gpus, gpus_per_node, inter_gbs, attention, states).estimate(lay, False)


def _dp_per_node(lay: Layout, topo) -> int:
    """Data-parallel ranks sharing a node: TP (and PP) groups are packed into nodes first (Megatron's rank order)."""
    inner = lay.tp * lay.pp
    return max(1, min(lay.dp * lay.cp, topo.gpus_per_node // inner)) if inner < topo.gpus_per_node else 1


def megatron_table1_flops(B: int, s: int, L: int, h: int, V: int) -> float:
    """Narayanan et al. 2021 eq. (3)."""
    return 96.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))



def to_estimate(pe: ParallelEstimate, m: ModelSpec, hw, seq: int) -> Estimate:
    """The CONTRACT's estimate object for a multi-GPU plan (the busiest GPU's memory; step over all GPUs)."""
    lay = pe.layout
    gib = 2**30
    overheads = runtime_overheads(pe.peak_bytes)
    est = Estimate(
        kind="train", model=m.name, hardware=hw.key,
        inputs=dict(num_gpus=lay.num_gpus, tp=lay.tp, pp=lay.pp, dp=lay.dp, cp=lay.cp, ep=lay.ep, zero=lay.zero,
                    sp=lay.sp,
                    virtual=lay.virtual, micro_batch=lay.micro_batch, global_batch=lay.global_batch, seq=seq,
                    recompute=lay.recompute, micro_batches_per_step=lay.micro_batches, framework="megatron"),
        fits=pe.fits, peak_bytes_per_gpu=pe.peak_bytes, breakdown_bytes=dict(pe.memory_bytes),
        device_total_bytes=hw.device_total_bytes, runtime_overhead_bytes=overheads,
        phases_bytes={"step": pe.peak_bytes}, time={"step_s": pe.step_s, **{f"{k}_s": v for k, v in
                                                                            pe.time_s.items() if k != "step"}},
        throughput={"tokens_per_s": pe.tokens_per_s, "tokens_per_s_per_gpu": pe.tokens_per_s / lay.num_gpus},
        mfu=pe.mfu, hfu=None, flops={"narayanan_tflops_per_gpu": pe.tflops_per_gpu},
        params={"total": count_params(m).total},
    )
    est.assumptions = [
        "Megatron-LM-style training: fused kernels, bf16 params + fp32 main grads + fp32 Adam (18 B/param), "
        "Korthikanti et al. activations, 1F1B pipeline",
        f"busiest GPU: first pipeline stage; {lay.micro_batches} micro-batches per step, bubble "
        f"{bubble_share(lay.pp, lay.virtual, lay.micro_batches):.1%} of the pipeline's time (more micro-batches: less)",
    ]
    need = est.required_bytes / gib
    have = hw.device_total_bytes / gib
    if pe.fits:
        est.verdict = (f"Fits on {lay.num_gpus} x {hw.name}: {need:.1f} of {have:.1f} GiB per GPU; "
                       f"{pe.tokens_per_s:,.0f} tok/s, MFU {pe.mfu:.0%}.")
    else:
        est.verdict = f"Does not fit: the busiest GPU needs {need:.1f} GiB of {have:.1f} GiB."
        est.suggestions = ["try --search to rank the layouts that fit", "--recompute full", "--zero 1..3",
                           "a larger --tp or --pp"]
    return est
