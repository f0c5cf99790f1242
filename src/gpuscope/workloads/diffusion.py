"""The ``diffusion`` kind: one point of image or video generation (a diffusers pipeline's denoiser step, VAE decode,
text encoders, or the whole pipeline of N steps) on random weights built from the folder's configs, or a local
checkpoint's own (measure/diffusion/). The pipeline is read by specs/diffusion.py: a preset name or a diffusers
folder (model_index.json + component configs); what ``component`` needs must be in it.

Points of one model, dtype and component measured together are built once (measure/diffusion/child.py runs them in
one process; each is still its own stored case with its own key and estimate).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscope.errors import UserError
from gpuscope.specs.axes import InferDtype, WorkloadKind
from gpuscope.workloads.case import Case
from gpuscope.workloads.infer import check_min_time
from gpuscope.workloads.notes import not_ok

GIB = 2**30


def pipeline_spec(model: str):
    from gpuscope.specs.diffusion import load_pipeline

    return load_pipeline(model)


def request(case: "DiffusionCase"):
    """The planner's DiffusionRequest of a case (estimate/diffusion/request.py)."""
    from gpuscope.estimate.diffusion.request import DiffusionRequest

    return DiffusionRequest(model=case.model, batch=case.batch, height=case.height, width=case.width,
                            frames=case.frames, steps=case.steps, cfg=case.cfg, dtype=str(case.dtype),
                            component=case.component, attention=case.attn, vae_tiling=case.vae_tiling,
                            vae_slicing=case.vae_slicing, offload=case.offload)


def check_weights(spec, component: str) -> None:
    """--weights: a local folder whose components that ``component`` runs each hold weight files."""
    from gpuscope.specs.diffusion import COMPONENT_NEEDS, ENCODER_ROLES

    if spec.source.startswith("preset:"):
        raise UserError("--weights needs --model to be a local diffusers folder with its weights, not a preset.")
    roles = {r for need in COMPONENT_NEEDS[component] for r in (ENCODER_ROLES if need == "encoders" else (need,))}
    for c in spec.components.values():
        d = Path(spec.source) / c.name
        if c.role in roles and not any(d.glob("*.safetensors")) and not any(d.glob("*.bin")):
            raise UserError(f"--weights: '{d}' holds no *.safetensors or *.bin weights.")


@dataclass(frozen=True, kw_only=True)
class DiffusionCase(Case):
    KIND = WorkloadKind.DIFFUSION
    ALWAYS = ("model", "batch", "height", "width", "steps", "cfg", "dtype", "component", "repeats")
    FLAGS = {"min_time_s": "min-time", "vae_slicing": "vae-slicing", "vae_tiling": "vae-tiling"}
    HOST_PROBE, TTFT_PROBE = "host_probe_s", None  # the probe around the denoiser's (or the loop's) repeats
    needs_cuda_graphs = False

    model: str
    batch: int = 1
    height: int | None = None  # None: the pipeline's default (estimate/diffusion/request.py), filled in
    width: int | None = None
    frames: int | None = None
    steps: int | None = None
    cfg: bool | None = None
    dtype: InferDtype = InferDtype.FP16
    component: str = "pipeline"
    vae_slicing: bool = False
    vae_tiling: bool = False
    attn: str = "sdpa"
    offload: str = "none"  # diffusers' enable_model_cpu_offload / enable_sequential_cpu_offload (measure/diffusion)
    repeats: int = 5
    warmup: int = 2
    min_time_s: float = 0.0
    profile: bool = False
    weights: bool = False
    device: str | None = None

    def __post_init__(self):
        from gpuscope.estimate.diffusion.request import ATTENTIONS, COMPONENTS, OFFLOADS, resolve

        self.positive("batch", "repeats")
        self.non_negative("warmup")
        check_min_time(self.min_time_s)
        self.axis("dtype", InferDtype)
        for name, allowed in (("component", COMPONENTS), ("attn", ATTENTIONS), ("offload", OFFLOADS)):
            if getattr(self, name) not in allowed:
                raise UserError(f"--{name} '{getattr(self, name)}' is not one of {', '.join(allowed)}.")
        spec = pipeline_spec(self.model)
        den = spec.denoiser
        if self.attn == "math" and den is not None and not den.class_name.startswith("UNet"):
            raise UserError(f"--attn math is measured on UNets only (diffusers' AttnProcessor); {spec.name}'s "
                            f"{den.class_name} runs its own SDPA processors.")
        if self.weights:
            check_weights(spec, self.component)
        r = resolve(request(self), spec)  # the pipeline's defaults, its sizes checked (one sentence each)
        for name, value in (("height", r.height), ("width", r.width), ("steps", r.steps), ("cfg", r.cfg),
                            ("frames", r.frames if r.video else None)):
            self._set(name, value)

    @property
    def name(self) -> str:
        f = f"x{self.frames}f" if self.frames else ""
        steps = f"-s{self.steps}" if self.component == "pipeline" else ""
        opts = "".join(s for s, on in (("-nocfg", not self.cfg), ("-slice", self.vae_slicing),
                                       ("-tile", self.vae_tiling), ("-math", self.attn == "math"),
                                       ("-weights", self.weights),
                                       (f"-offload-{self.offload}", self.offload != "none")) if on)
        label = Path(self.model).name if "/" in self.model else self.model
        size = f"{self.height}x{self.width}{f}"
        return f"diffusion/{label}/{self.component}-b{self.batch}-{size}{steps}-{self.dtype}{opts}"

    @property
    def size_field(self) -> str:
        return "batch"

    @property
    def build_key(self) -> tuple:
        """Points with the same build key share one process and one build of the modules."""
        return (self.model, self.component, str(self.dtype), self.attn, self.offload, self.weights, self.device)


CASE = DiffusionCase


def estimate(case: DiffusionCase, hw):
    """The planner's plan for the same case (docs/diffusion.md), without its search for the largest sizes."""
    from gpuscope.estimate.diffusion import plan_diffusion

    return plan_diffusion(request(case), hw, limits=False)


def run(case: DiffusionCase) -> dict:
    from gpuscope.measure.diffusion.components import folder_of
    from gpuscope.measure.diffusion.run import run_points

    out: list[dict] = []
    run_points([case.to_dict()], folder_of(pipeline_spec(case.model)), lambda c, r: out.append(r))
    return out[0]


def _gib(b) -> str:
    return f", peak {b / GIB:.2f} GiB" if b else ""


def headline(r: dict) -> str:
    bad = not_ok(r)
    if bad is not None:
        return bad
    comp, peak = r.get("component"), _gib(r.get("peak_bytes"))
    if comp == "denoiser":
        cfg = " (2B with CFG)" if r.get("cfg") else ""
        busy = (f", device busy {r['device_busy_s'] * 1e3:.1f} ms" if r.get("device_busy_s") else "")
        return (f"step {r['denoiser_step_s'] * 1e3:.2f} ms at batch {r['denoiser_batch']}{cfg}, host issue "
                f"{r['denoiser_enqueue_s'] * 1e3:.2f} ms{busy}{peak}")
    if comp == "vae-decode":
        return f"decode {r['vae_decode_s'] * 1e3:.2f} ms for {r['batch']}{peak}"
    if comp == "text-encoders":
        return f"text encoders {r['text_encode_s'] * 1e3:.2f} ms at batch {r['batch']}{peak}"
    rate = (f"{r['s_per_clip']:.2f} s per clip" if r.get("s_per_clip") else f"{r['images_per_s']:.3g} images/s")
    j = f", {r['j_per_image']:.0f} J/image" if r.get("j_per_image") else ""
    return (f"total {r['total_s']:.3f} s (text {r['text_encode_s'] * 1e3:.1f} ms, {r['steps']} steps "
            f"{r['denoise_s']:.3f} s, decode {r['vae_decode_s'] * 1e3:.1f} ms), {rate}{j}{peak}")


ROWS = {"denoiser": (("step_s", "denoiser_step_s"),), "vae-decode": (("vae_decode_s", "vae_decode_s"),),
        "text-encoders": (("text_encode_s", "text_encode_s"),),
        "pipeline": (("total_s", "total_s"), ("vae_decode_s", "vae_decode_s"), ("text_encode_s", "text_encode_s"))}


def rows(case: DiffusionCase, est, res: dict) -> list[tuple[str, float, float]]:
    """(metric, estimated, measured): the peak allocated (not on a CPU: no allocator statistics) and the times of
    the component, each where the estimate has it."""
    plan = est.to_json()  # the contract's keys (memory.peak_bytes_per_gpu, time.*)
    peak, times = plan["memory"]["peak_bytes_per_gpu"], plan["time"]
    out = [("peak_bytes", peak, res["peak_bytes"])] if res.get("peak_bytes") else []
    for metric, key in ROWS[case.component]:
        if times.get(metric) is not None and res.get(key) is not None:
            out.append((metric, times[metric], res[key]))
    return out
