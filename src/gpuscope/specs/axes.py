"""The axes a workload is chosen on, each defined once: its values, which of them the planner models and which the
measurement runs, and the one sentence a bad value gets. CLI choices, validation messages and JSON values all
derive from these classes (a value is its string: ``Precision.AMP_BF16 == "amp-bf16"`` and it serialises as such).

- ``Precision``: training precision. ``amp-*``: fp32 parameters, gradients and optimizer states with autocast
  compute in the half dtype (PyTorch AMP); ``bf16``: parameters, gradients and states all bf16; ``bf16-master``:
  bf16 weights and gradients for compute, fp32 master weights and AdamW states in the optimizer step
  (measure/models/master_weights.py; single-GPU `bench train` only); ``fp8``: planner only (Transformer
  Engine-style fp8 GEMMs over amp-bf16 states); ``bf16-sr`` / ``bf16-kahan``: planner only, pure bf16 weights and
  states with the update rounded stochastically (torchao.optim's ``bf16_stochastic_round=True``) or Kahan-compensated
  in a bf16 buffer (torch-optimi's ``kahan_sum=True``, +2 bytes a parameter): neither package is in the measured
  environment. ``Precision.numerics``: what each does to the updates.
- ``Optimizer``, ``Recompute``: the optimizer's states and activation recompute (``selective``: Korthikanti et al.
  2022's attention-core recompute, planner only; ``full``: every decoder layer re-run in the backward).
- ``Strategy``: data-parallel training's sharding (``hsdp``: planner only).
- ``InferDtype``: weights and activations of a measured inference run (the planner takes more: estimate/dtypes).
- ``Engine``: how a measured inference run decodes; ``PlannerEngine``: the planner's models of them
  (``Engine.planner``: which one models which).
- ``WorkloadKind``: the kinds of measurement (workloads/ holds one module each).
"""

from __future__ import annotations

from enum import Enum

from gpuscope.errors import UserError


class Axis(str, Enum):
    """A str-valued enum: ``parse`` checks a user's value (one sentence naming the flag and what is allowed)."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def values(cls, among=None) -> tuple[str, ...]:
        return tuple(m.value for m in (among if among is not None else cls))

    @classmethod
    def parse(cls, value, flag: str | None = None, among=None):
        """The member named ``value``; ``among`` narrows what is allowed (e.g. what a measurement runs)."""
        allowed = tuple(among) if among is not None else tuple(cls)
        for m in allowed:
            if value == m.value or value is m:
                return m
        name = flag or cls.__name__.lower()
        raise UserError(f"--{name} '{value}' is not one of {', '.join(m.value for m in allowed)}.")


class Precision(Axis):
    AMP_BF16 = "amp-bf16"
    AMP_FP16 = "amp-fp16"
    BF16 = "bf16"
    BF16_MASTER = "bf16-master"
    BF16_SR = "bf16-sr"
    BF16_KAHAN = "bf16-kahan"
    FP32 = "fp32"
    FP8 = "fp8"

    @property
    def measured(self) -> bool:
        return self in TRAIN_PRECISIONS

    @property
    def amp(self) -> bool:
        return self.value.startswith("amp-")

    @property
    def compute_dtype(self) -> str:
        """The dtype the GEMMs run in (MFU is against this dtype's dense peak)."""
        return {"amp-bf16": "bf16", "amp-fp16": "fp16", "fp32": "fp32", "fp8": "fp8"}.get(self.value, "bf16")

    @property
    def pure_bf16_states(self) -> bool:
        """bf16 weights updated in place with bf16 AdamW states (bf16, bf16-sr, bf16-kahan)."""
        return self in (Precision.BF16, Precision.BF16_SR, Precision.BF16_KAHAN)

    @property
    def weight_bytes(self) -> float:
        """Bytes of one parameter (and of its gradient) as the model holds it."""
        return 2.0 if (self.pure_bf16_states or self is Precision.BF16_MASTER) else 4.0

    @property
    def master_bytes(self) -> float:
        """Bytes per parameter of a separate fp32 master copy the optimizer updates (0: the model's own weights
        are what it updates)."""
        return 4.0 if self is Precision.BF16_MASTER else 0.0

    @property
    def state_bytes(self) -> float:
        """Bytes of one optimizer-state element (AdamW's exp_avg, exp_avg_sq): the dtype of what the optimizer
        updates (torch.optim keeps its states in the parameter's dtype)."""
        return 2.0 if self.pure_bf16_states else 4.0

    @property
    def compensation_bytes(self) -> float:
        """bf16-kahan's compensation buffer, bytes a parameter (torch-optimi keeps it in the parameter's dtype)."""
        return 2.0 if self is Precision.BF16_KAHAN else 0.0

    @property
    def needs(self) -> str:
        """The package beyond torch + transformers the precision's optimizer step comes from ("" for none)."""
        return {"bf16-sr": "torchao", "bf16-kahan": "torch-optimi"}.get(self.value, "")

    @property
    def numerics(self) -> str:
        """What the precision does to the weight updates, in one line (shown beside each recommendation)."""
        return NUMERICS[self.value]

    @property
    def activation_bytes(self) -> float:
        return 4.0 if self is Precision.FP32 else 2.0


# bf16 has 8 significand bits: w + u rounds back to w when |u| < 2^-9 |w| (half an ulp), so an AdamW update of
# lr x O(1) is lost on a weight of magnitude |w| > 2^9 lr: at lr 1e-5 every weight above ~5e-3 stops moving, which
# is most of a trained model's weights (Zamirai et al. 2020, "Revisiting BFloat16 Training", arXiv 2010.06192:
# pure bf16 with round-to-nearest updates loses accuracy; stochastic rounding or Kahan summation recover it).
NUMERICS = {
    "amp-bf16": "fp32 master weights and states: safe for pre-training",
    "amp-fp16": "fp32 master weights and states, loss scaling: safe, watch for scaler skips",
    "bf16": "pure bf16: updates below 2^-9 of a weight are rounded away (small LR stalls); fine-tuning only",
    "bf16-master": "fp32 master weights and states: safe for pre-training (gradients summed in bf16 across "
                   "accumulation)",
    "bf16-sr": "bf16 with stochastic rounding: small updates survive in expectation (unbiased); planner only",
    "bf16-kahan": "bf16 with Kahan-compensated updates: near fp32-master updates for +2 B/param; planner only",
    "fp32": "fp32 throughout: the reference",
    "fp8": "fp8 GEMMs over fp32 master weights (planner only): needs per-tensor scaling recipes",
}

MEASURED_PRECISIONS = (Precision.AMP_BF16, Precision.AMP_FP16, Precision.BF16, Precision.FP32)
# what single-GPU `bench train` runs: the above and bf16-master (its mixed-precision step is single-GPU only)
TRAIN_PRECISIONS = MEASURED_PRECISIONS + (Precision.BF16_MASTER,)


class Optimizer(Axis):
    ADAMW = "adamw"
    ADAM = "adam"
    SGD = "sgd"
    ADAMW_8BIT = "adamw-8bit"


class Recompute(Axis):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


MEASURED_RECOMPUTE = (Recompute.NONE, Recompute.FULL)


class Offload(Axis):
    NONE = "none"
    OPTIMIZER = "optimizer"
    PARAMS = "params"


class Strategy(Axis):
    """How data-parallel training shards its states (estimate/train.py: ddp, FSDP2 full shard, FSDP2 hybrid)."""

    DDP = "ddp"
    FSDP = "fsdp"
    HSDP = "hsdp"


MEASURED_STRATEGIES = (Strategy.DDP, Strategy.FSDP)


class InferDtype(Axis):
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"


class PlannerEngine(Axis):
    EAGER = "eager"  # plain HF generate: every kernel launched from Python
    GRAPH = "graph"  # gpuscope's compiled static-cache step replayed as one CUDA graph (gs-compile)
    GRAPH_UNFUSED = "graph-unfused"  # HF's eager kernels replayed from one CUDA graph (gs-graph)
    HF_GRAPH = "hf-graph"  # HF generate over its compiled static-cache step, waiting on the GPU every token
    HF_GRAPH_DEFER = "hf-graph-defer"  # the same with the stop check read one token late

    @property
    def static_cache(self) -> bool:
        return self is not PlannerEngine.EAGER

    @property
    def hf_generate(self) -> bool:
        """HF ``generate`` drives the loop (its decode switches MoE experts from grouped_mm to batched_mm)."""
        return self in (PlannerEngine.EAGER, PlannerEngine.HF_GRAPH, PlannerEngine.HF_GRAPH_DEFER)


class Engine(Axis):
    """How `bench infer` decodes."""

    HF_EAGER = "hf-eager"  # HF generate, DynamicCache
    HF_GRAPH = "hf-graph"  # HF generate, StaticCache, compiled step
    GS_GRAPH = "gs-graph"  # gpuscope's loop: static cache, one CUDA graph per step
    GS_COMPILE = "gs-compile"  # gs-graph with the step compiled by torch.compile first

    @property
    def hf_generate(self) -> bool:
        return self in (Engine.HF_EAGER, Engine.HF_GRAPH)

    def planner(self, defer_stop: bool = False) -> PlannerEngine:
        """The planner engine that models this one. hf-eager under --defer-stop stays eager: a launch-bound step is
        host time whether or not the loop waits."""
        if self is Engine.HF_GRAPH and defer_stop:
            return PlannerEngine.HF_GRAPH_DEFER
        return {Engine.HF_EAGER: PlannerEngine.EAGER, Engine.HF_GRAPH: PlannerEngine.HF_GRAPH,
                Engine.GS_COMPILE: PlannerEngine.GRAPH, Engine.GS_GRAPH: PlannerEngine.GRAPH_UNFUSED}[self]


class Attention(Axis):
    SDPA = "sdpa"
    EAGER = "eager"
    GS_GQA = "gs-gqa"


class WorkloadKind(Axis):
    MICRO = "micro"
    INFER = "infer"
    TRAIN = "train"
    TRAIN_DIST = "train-dist"
    COLLECTIVE = "collective"  # the store's kind for a collective point (`bench collectives`)
    COMPRESSION = "compression"
    HOST = "host"  # a calibration's host-cost fits (`hardware calibrate --host`)
    SERVE = "serve"  # a serving run under continuous batching (`bench serve`)
    DIFFUSION = "diffusion"  # one point of image or video generation (`bench diffusion`)
