"""Time of diffusers' CPU offload (DiffusionPipeline.enable_model_cpu_offload / enable_sequential_cpu_offload, as
accelerate runs them), per phase of a pipeline call.

Both keep the weights in pageable host memory (accelerate moves a module with ``module.to("cpu")`` and keeps
sequential offload's state dict as ``p.to("cpu")`` copies: nothing is pinned), so every copy runs at the host's
pageable rate, not its pinned one: CUDA stages a pageable copy through a pinned bounce buffer, one host memcpy
behind the DMA. ``pageable_gbs``: a TOML's measured ``h2d_pageable_gbs`` / ``d2h_pageable_gbs`` (`bench micro`'s
transfer h2d-pageable / d2h-pageable), else the host link's pinned rate (estimate/train.host_link_gbs) x
PAGEABLE_FRACTION, the ratio `bench micro` measured on an H200 (research/results/2026-12-02-h200-b/call1/
micro_lowp.json, the same session as the offload runs: pinned 54.0 GB/s both ways, pageable H2D 6.0, D2H 14.3;
the day before, 2026-12-02-h200/call3: pinned 55.4, pageable 9.4 and 16.6). That host is a gVisor VM; a bare-metal host's pageable copies
are likely faster (not measured here).

- model: a module moves in (its weights at the H2D rate) when it runs, and the module before it moves out just
  before that; at the end of the call maybe_free_model_hooks moves the last one out. So a phase holds its own
  components' moves in, and the moves out of the module before each; the VAE's phase also its own move out.
  Nothing moves during the denoising steps (the denoiser stays in). A move out is ``module.to("cpu")``: every
  tensor lands in freshly allocated pageable host memory, slower than `bench micro`'s pageable copy into a
  reused buffer: FRESH_D2H_FACTOR (the bench's own probe of that move, the SDXL UNet's 5.13 GB at 8.42 GB/s,
  against micro's 14.3). Not modelled: on an H200 (a gVisor VM) each phase of SDXL under model offload took
  0.3-1.2 s more than its copies at those rates and its forwards (research/results/2026-12-02-h200-c/
  diffusion.md). Not the allocator: accelerate's hook empties PyTorch's cache between two modules
  (CpuOffload.pre_forward: clear_device_cache()), but emptying the UNet's 1,680 tensors took 15 ms and moving it
  in afterwards no longer than with the cache kept (that run's alloc probe). The same probe's first moves out,
  into host memory the process had not touched, ran at 1.1-1.6 GB/s against 9.8 once resident: first-touch of
  host pages is the candidate, and whether a move meets fresh pages depends on the host allocator's reuse.
- sequential: each layer's weights are copied in just before it runs, one tensor at a time, and dropped after,
  at every forward: the weights of the layers that run (a VAE decode runs its decoder only) at the H2D rate, plus
  TENSOR_LAUNCHES host launch costs per tensor (accelerate's set_module_tensor_to_device: the copy call, the
  new Parameter, then the tensor set back to meta after the forward). The copies are synchronous (pageable) and
  on the compute stream, so they add to the forward instead of hiding under it. TENSOR_LAUNCHES 4.4 is set by
  SDXL's text encoders under sequential offload on an H200 (442.8 ms for 713 tensors, 1.635 GB, at 6.0 GB/s and
  45.05 us a launch: research/results/2026-12-02-h200-b/diffusion.md); checked by the SDXL UNet step there.
"""

from __future__ import annotations

from gpuscope.estimate.train import host_link_gbs

PAGEABLE_FRACTION = {"h2d": 6.0 / 54.0, "d2h": 14.3 / 54.0}
TENSOR_LAUNCHES = 4.4
FRESH_D2H_FACTOR = 8.42 / 14.3  # module.to("cpu") into new host memory / a pageable copy into a reused buffer
PHASE = {"text_encoder": "text_encode", "image_encoder": "text_encode", "denoiser": "denoise", "vae": "vae_decode"}
ORDER = ("text_encoder", "image_encoder", "denoiser", "vae")  # diffusers' model_cpu_offload_seq


def pageable_gbs(hw, way: str) -> float:
    measured = (getattr(hw, "measured", None) or {}).get(f"{way}_pageable_gbs")
    return float(measured) if measured else host_link_gbs(hw) * PAGEABLE_FRACTION[way]


def moves(costs: list, offload: str, hw, launch_s: float) -> dict[str, float]:
    """Seconds of offload copies per phase of one call ("text_encode", "denoise", "vae_decode") and "per_step"
    (sequential: the denoiser's copies at each step, on top of its forward)."""
    out = {"text_encode": 0.0, "denoise": 0.0, "vae_decode": 0.0, "per_step": 0.0}
    if offload == "none" or not costs:
        return out
    h2d, d2h = pageable_gbs(hw, "h2d") * 1e9, pageable_gbs(hw, "d2h") * 1e9
    ordered = sorted(costs, key=lambda c: ORDER.index(c.role))
    if offload == "model":
        d2h *= FRESH_D2H_FACTOR
        for i, c in enumerate(ordered):
            out[PHASE[c.role]] += c.weight_bytes / h2d + (ordered[i - 1].weight_bytes / d2h if i else 0.0)
        last = ordered[-1]
        out[PHASE[last.role]] += last.weight_bytes / d2h
        return out
    for c in ordered:
        per_forward = c.run_bytes / h2d + c.run_tensors * TENSOR_LAUNCHES * launch_s
        if c.role == "denoiser":
            out["per_step"] += per_forward
        else:
            out[PHASE[c.role]] += per_forward * c.passes
    return out
