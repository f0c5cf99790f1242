"""The ``infer`` kind: one LLM inference run (HF generate or gpuscope's graph loop, random weights or a local
checkpoint's), timed as TTFT, TPOT and tokens/s with its peak memory (measure/llm/infer.py)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.specs.axes import Attention, Engine, InferDtype, WorkloadKind
from gpuscope.workloads.case import Case, model_name, model_spec
from gpuscope.workloads.notes import host_moved, joules, not_ok, stolen

MAX_MIN_TIME_S = 600
# E2E repeats spread beyond this fraction of their median: the headline says the run is noisy (an eager
# Llama-3.1-8B p2048 run read 1.58 / 2.32 / 2.78 s, research/results/2026-11-30-h200/README.md)
NOISY_SPREAD = 0.2
MANY_REPEATS = 20  # from this many E2E repeats the spread (max - min) is the host's tails, not the median's doubt


@dataclass(frozen=True, kw_only=True)
class InferCase(Case):
    KIND = WorkloadKind.INFER
    ALWAYS = ("model", "batch", "prompt", "gen", "dtype", "attn", "repeats")
    FLAGS = {"min_time_s": "min-time", "decode_iters": "decode-iters"}
    HALF = ("dtype", "fp16", "bf16")  # the field a device without bf16 sets to fp16, and its default
    HOST_PROBE, TTFT_PROBE = "host_probe_s", "host_probe_ttft_s"  # the probes around its E2E and TTFT repeats

    model: str
    batch: int
    prompt: int
    gen: int
    dtype: InferDtype = InferDtype.BF16
    attn: Attention = Attention.SDPA
    repeats: int = 5
    config: dict | None = None
    engine: Engine = Engine.HF_EAGER
    fuse_proj: bool = False
    defer_stop: bool = False
    gc_freeze: bool = False
    device: str | None = None
    min_time_s: float = 0.0
    decode_iters: int | None = None
    weights: bool = False
    device_map: str | None = None
    max_memory: dict | None = None

    def __post_init__(self):
        self.positive("batch", "prompt", "gen", "repeats")
        if self.decode_iters is not None:
            self.positive("decode_iters")
        self.axis("dtype", InferDtype)
        self.axis("engine", Engine)
        self.axis("attn", Attention)
        check_min_time(self.min_time_s)
        if self.fuse_proj and self.device_map:
            raise UserError("--fuse-proj cannot be combined with --device-map: accelerate's offload hooks hold "
                            "the separate q/k/v and gate/up weights it would replace.")
        if (self.device_map or self.max_memory) and not self.weights:
            raise UserError("--device-map and --max-memory need --weights (a local checkpoint's own weights).")
        if self.max_memory and not self.device_map:
            raise UserError("--max-memory needs --device-map.")

    @property
    def name(self) -> str:
        eng = "" if self.engine is Engine.HF_EAGER else f"-{self.engine}"
        eng += "" if self.attn is Attention.SDPA else f"-{self.attn}"
        eng += "-fused" if self.fuse_proj else ""
        eng += "-defer" if self.defer_stop else ""
        eng += "-gcfreeze" if self.gc_freeze else ""
        return f"infer/{model_name(self)}/b{self.batch}-p{self.prompt}-g{self.gen}-{self.dtype}{eng}"

    @property
    def size_field(self) -> str:
        """The field a smaller device halves first (pipeline/fit.py)."""
        return "batch"

    @property
    def needs_cuda_graphs(self) -> bool:
        return self.engine is not Engine.HF_EAGER


CASE = InferCase


def check_min_time(seconds) -> None:
    if not (0 <= seconds <= MAX_MIN_TIME_S):
        raise UserError(f"--min-time must be between 0 and {MAX_MIN_TIME_S} seconds, not {seconds}.")


def estimate(case: InferCase, hw):
    from gpuscope.estimate.infer import estimate_infer

    return estimate_infer(model_spec(case), hw, batch=case.batch, prompt=case.prompt, gen=case.gen,
                          dtype=case.dtype.value, engine=case.engine.planner(case.defer_stop).value,
                          gqa_fold=case.attn is Attention.GS_GQA, fuse_proj=case.fuse_proj,
                          # generate's decode on a GPU switches MoE experts to batched_mm (estimate/ops.py)
                          moe_batched=case.engine.hf_generate and case.device != "cpu")


def run(case: InferCase) -> dict:
    from gpuscope.measure.llm.infer import run_infer

    return run_infer(case.to_dict())


def headline(r: dict) -> str:
    bad = not_ok(r)
    if bad is not None:
        return bad
    if r.get("tpot_s") is None:  # one generated token (no decode step), or decode below the noise
        why = f"; tpot unresolved: {r['tpot_unresolved']}" if r.get("tpot_unresolved") else ""
        return f"ttft {r['ttft_s'] * 1e3:.2f} ms{joules(r)}{why}"
    # a tiny model's weights stream at well under 1 GB/s: three significant figures, never "0 GB/s"
    gbs = f", weights read at {r['decode_weights_gbs']:.3g} GB/s" if r.get("decode_weights_gbs") else ""
    if (r.get("moe_routing") or {}).get("imbalance_median"):
        gbs += f"; busiest expert {r['moe_routing']['imbalance_median']:.2f}x the mean rows (median layer)"
    spread, n = r.get("e2e_spread"), r.get("e2e_repeats") or r.get("repeats") or 0
    fix = f"the median of {n} is kept" if n >= MANY_REPEATS else "more --repeats or --min-time, a quiet host"
    noisy = (f"; noisy: E2E repeats spread {spread:.0%} of their median ({fix})"
             if spread is not None and spread > NOISY_SPREAD else "")
    notes = stolen(r.get("host_load_generate")) + host_moved(r, "host_probe")
    return (f"ttft {r['ttft_s'] * 1e3:.2f} ms, tpot {r['tpot_s'] * 1e3:.2f} ms, "
            f"{r['decode_tokens_per_s']:.1f} tok/s decode{gbs}{joules(r)}{noisy}{notes}")


def rows(case: InferCase, est, res: dict) -> list[tuple[str, float, float]]:
    """(metric, estimated, measured) of a measured run: peak memory (not for a device_map run, which spreads or
    offloads its weights), TTFT, and TPOT where the run resolved it."""
    out = [] if case.device_map else [("peak_bytes", est.peak_bytes_per_gpu, res["peak_generate_bytes"])]
    out.append(("prefill_s", est.time["prefill_s"], res["ttft_s"]))
    if res.get("tpot_s"):  # none for one generated token, or a decode below the run-to-run noise
        out.append(("decode_s_per_token", est.time["decode_s_per_token"], res["tpot_s"]))
    return out
