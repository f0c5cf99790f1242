"""The ``train`` kind: one LLM training step on one device (random weights, AdamW by default), timed per step with
its memory per phase (measure/llm/train.py)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.specs.axes import MEASURED_RECOMPUTE, TRAIN_PRECISIONS, Optimizer, Precision, Recompute, WorkloadKind
from gpuscope.workloads.case import Case, model_name, model_spec
from gpuscope.workloads.infer import check_min_time
from gpuscope.workloads.notes import host_moved, joules, not_ok, stolen

PHASES = (("forward", "peak_forward_bytes"), ("backward", "peak_backward_bytes"),
          ("optimizer", "peak_optimizer_bytes"))


@dataclass(frozen=True, kw_only=True)
class TrainCase(Case):
    KIND = WorkloadKind.TRAIN
    ALWAYS = ("model", "micro_batch", "seq", "precision", "optimizer", "fused", "recompute", "steps", "warmup")
    FLAGS = {"min_time_s": "min-time"}
    HALF = ("precision", "amp-fp16", "amp-bf16")  # the field a device without bf16 sets to fp16, and its default
    HOST_PROBE, TTFT_PROBE = "host_probe_train_s", None  # a step follows the training probe (forward + backward)
    needs_cuda_graphs = False

    model: str
    micro_batch: int
    seq: int
    precision: Precision = Precision.AMP_BF16
    optimizer: Optimizer = Optimizer.ADAMW
    fused: bool = True
    recompute: Recompute = Recompute.NONE
    steps: int = 6
    warmup: int = 2
    config: dict | None = None
    grad_accum: int = 1
    device: str | None = None
    min_time_s: float = 0.0
    lora_r: int | None = None  # LoRA (peft) on a frozen base when set; these are omitted from the dict when unset
    lora_alpha: float | None = None
    lora_targets: str | None = None
    lora_dropout: float = 0.0
    qlora: bool = False  # the base's decoder Linear layers in bitsandbytes NF4 (measure/llm/lora.py); needs lora_r

    def __post_init__(self):
        self.positive("micro_batch", "seq", "steps", "grad_accum")
        if self.lora_r is not None:
            self.positive("lora_r")
        self.non_negative("warmup")
        self.axis("precision", Precision, among=TRAIN_PRECISIONS)
        if self.lora_r is not None and self.precision is Precision.BF16_MASTER:
            raise UserError("--precision bf16-master is for full training: LoRA takes amp-bf16, amp-fp16, bf16 or "
                            "fp32.")
        self.axis("recompute", Recompute, among=MEASURED_RECOMPUTE)
        self.axis("optimizer", Optimizer)
        if self.qlora and (self.lora_r is None or self.precision is Precision.FP32):
            raise UserError("--qlora needs --lora-r and a 16-bit --precision (amp-bf16, amp-fp16 or bf16).")
        check_min_time(self.min_time_s)

    @property
    def name(self) -> str:
        ga = f"-ga{self.grad_accum}" if int(self.grad_accum) > 1 else ""
        lora = f"-{'q' if self.qlora else ''}lora_r{self.lora_r}" if self.lora_r is not None else ""
        return (f"train/{model_name(self)}/mb{self.micro_batch}{ga}-s{self.seq}-{self.precision}"
                f"-rc_{self.recompute}{lora}")

    @property
    def size_field(self) -> str:
        return "micro_batch"


CASE = TrainCase


def estimate(case: TrainCase, hw, **dist):
    from gpuscope.estimate.train import estimate_train

    if case.lora_r is not None:
        return _estimate_lora(case, hw)

    return estimate_train(model_spec(case), hw, micro_batch=case.micro_batch, seq=case.seq,
                          precision=case.precision.value, optimizer=case.optimizer.value,
                          recompute=case.recompute.value, fused=case.fused, grad_accum=int(case.grad_accum),
                          # bench runs AdamW(fused=False) when not fused: torch's for-loop, not foreach
                          # (measure/distributed/optim.py's docstring; estimate/adamw.py prices each path)
                          adamw_impl=None if case.fused else "for-loop", **dist)


def _estimate_lora(case: TrainCase, hw):
    from gpuscope.estimate.lora import ALL_LINEAR, lora_shape
    from gpuscope.estimate.lora_train import estimate_lora_train

    m = model_spec(case)
    shape = lora_shape(m, int(case.lora_r), case.lora_targets or ALL_LINEAR, float(case.lora_dropout))
    return estimate_lora_train(m, hw, shape, micro_batch=case.micro_batch, seq=case.seq,
                               precision=case.precision.value, optimizer=case.optimizer.value,
                               recompute=case.recompute.value, fused=case.fused, grad_accum=int(case.grad_accum),
                               alpha=case.lora_alpha, qlora=bool(case.qlora))


def run(case: TrainCase) -> dict:
    from gpuscope.measure.llm.train import run_train

    return run_train(case.to_dict())


def headline(r: dict) -> str:
    bad = not_ok(r)
    if bad is not None:
        return bad
    return (f"step {r['step_s'] * 1e3:.2f} ms, {r['tokens_per_s']:.0f} tok/s{joules(r)}"
            f"{stolen(r.get('host_load_steps'))}{host_moved(r, 'host_probe_train')}")


def rows(case, est, res: dict) -> list[tuple[str, float, float]]:
    """(metric, estimated, measured): peak memory of the timed steps, the step, and the peak of each phase."""
    out = [("peak_bytes", est.peak_bytes_per_gpu, res["peak_bytes"]), ("step_s", est.time["step_s"], res["step_s"])]
    for phase, key in PHASES:
        if res.get(key):
            out.append((f"{phase}_peak_bytes", est.phases_bytes[phase], res[key]))
    return out
