"""Device memory of a diffusion pipeline as PyTorch's caching allocator sees it (torch.cuda.max_memory_allocated).

Per component c: weights_c = params_c x bytes(dtype), with two exceptions the loaders make:
- T5 in fp16: transformers keeps every ``wo`` in fp32 (T5PreTrainedModel._keep_in_fp32_modules), +2 bytes each;
- SDXL's VAE in fp16: StableDiffusionXLPipeline upcasts a VAE whose config says force_upcast to fp32 before
  decoding (the fp16 SDXL VAE overflows), so its weights and activations are fp32 in the decode phase.
Activations: the trace's peak (trace.py: what a no_grad forward holds at once) of the component at its batch.

Phases (the allocator's peak is the largest): text encoding, one denoising step (with the prompt embeddings, the
latents and the CFG-doubled model input alive), VAE decode. ``offload``:
- none: every component's weights stay on the GPU throughout;
- model (enable_model_cpu_offload): one component on the GPU at a time (accelerate moves each in when it runs and
  the previous one out), so a phase holds only its own component's weights;
- sequential (enable_sequential_cpu_offload): every leaf module's weights are copied in just before it runs and
  dropped after, so a phase holds the peak of its activations plus the running layer's weights (trace.seq_peak):
  SDXL's UNet at 1024x1024, batch 2, peaks at a 1x1 conv_shortcut (0.4 MB of weights), not with its largest
  layer (59 MB) in; a VAE's encoder never runs in a decode (research/results/2026-12-02-h200-b/diffusion.md).
Plus cuBLAS's workspace (estimate/runtime.CUBLAS_WORKSPACE_BYTES), which comes from the caching allocator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.estimate.runtime import CUBLAS_WORKSPACE_BYTES


@dataclass
class ComponentCost:
    """What one component holds and does in a pipeline call."""

    name: str
    role: str
    class_name: str
    params: int
    weight_bytes: float
    activation_peak_bytes: float
    peak_op: str
    seq_peak_bytes: float  # sequential offload: activations + the running layer's weights at their joint peak
    forward: dict = field(default_factory=dict)  # time.forward_seconds of one forward
    passes: int = 1  # forwards per pipeline call (denoiser: steps; text encoders: 2 with a negative prompt)
    inputs_bytes: float = 0.0  # tensors alive beside its activations (latents, embeddings)
    run_bytes: float = 0.0  # weights of the layers a forward runs (sequential offload copies them in each forward)
    run_tensors: int = 0  # their parameter tensors
    tensors: int = 0  # every parameter tensor of the module (model offload moves each on its own)


def phase_bytes(c: ComponentCost, resident_weights: float, offload: str) -> float:
    """The allocator's peak while ``c`` runs: resident weights (offload none) or its own (model) plus its activation
    peak, or (sequential) the peak of its activations plus the weights of the layer running then (trace.py); its
    inputs and the cuBLAS workspace on top."""
    if offload == "sequential":
        return c.seq_peak_bytes + c.inputs_bytes + CUBLAS_WORKSPACE_BYTES
    w = resident_weights if offload == "none" else c.weight_bytes
    return w + c.activation_peak_bytes + c.inputs_bytes + CUBLAS_WORKSPACE_BYTES


def pipeline_phases(costs: list[ComponentCost], offload: str, vae_upcast_bytes: float = 0.0) -> dict[str, float]:
    """Peak bytes per phase of the pipeline: text encoding (the largest encoder's forward), denoising, decode.
    ``vae_upcast_bytes``: what the VAE's fp32 upcast adds before the decode (its weights are fp16 until then;
    ``.to(float32)`` converts one parameter at a time, so the conversion itself adds nothing that lasts)."""
    resident = sum(c.weight_bytes for c in costs)
    phases: dict[str, float] = {}
    for c in costs:
        key = {"text_encoder": "text_encode", "image_encoder": "text_encode", "denoiser": "denoise",
               "vae": "vae_decode"}[c.role]
        before = 0.0 if c.role == "vae" else vae_upcast_bytes
        phases[key] = max(phases.get(key, 0.0), phase_bytes(c, resident - before, offload))
    return phases
