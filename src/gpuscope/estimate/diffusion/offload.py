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
  Nothing moves during the denoising steps (the denoiser stays in). A move out is ``module.to("cpu")``: one
  synchronous pageable copy per tensor into a new host tensor (glibc malloc), slower than one large copy:
  MODULE_D2H_FACTOR, the SDXL UNet's 1,680 tensors moved out as a module (8.9 GB/s) over its three largest tensors
  moved alone (12.75 GB/s), both into resident host memory, same probe (research/results/2026-12-02-h200-d/
  offload.md). Priced as the steady state: once the host allocator holds the bytes the modules leave when they move
  in, every move out reuses resident pages. The first calls after loading do not: a move out into pages the
  process has not touched takes a page fault each 4 KiB (FAULT_S each, the same probe: a gVisor VM) on top of the
  copy; fresh_bytes_bound gives the most a call can meet (every byte it moves out), first_calls_note the line.
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
MODULE_D2H_FACTOR = 8.9 / 12.75  # module.to("cpu") / its largest tensors alone, both into resident host memory
# a page fault's cost inside a pageable D2H copy into untouched host memory, per 4 KiB page: (move time - bytes at
# the resident rate) / minor faults over the SDXL moves of that probe's first two calls, 3.7-4.1 us (median 3.9)
FAULT_S = 3.9e-6
PAGE_BYTES = 4096
# untimed calls a model-offload pipeline needs before it runs in that steady state: SDXL at 1024 under `bench
# diffusion` on an H200 read 1.45x this plan after two, within 8% after four (2026-12-02-h200-d/offload.md)
STEADY_WARMUP_CALLS = 4
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
        d2h *= MODULE_D2H_FACTOR
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


def fresh_bytes_bound(costs: list, offload: str) -> float:
    """The bytes a model-offload call moves out (every module once): all of them land in fresh host pages on the
    first call after loading at most (the probe's first call met 3.6 of 6.9 GB, its second 2.0, its third 0.2)."""
    return sum(c.weight_bytes for c in costs) if offload == "model" else 0.0


def first_calls_note(costs: list, offload: str) -> str | None:
    fresh = fresh_bytes_bound(costs, offload)
    if not fresh:
        return None
    return (f"model offload planned in the steady state (moves out into host memory the allocator already holds); "
            f"the first calls after loading are slower: a move out into untouched pages costs "
            f"{FAULT_S * 1e6:.1f} us a 4 KiB page (an H200 gVisor VM), up to +{fresh / PAGE_BYTES * FAULT_S:.1f} s "
            f"a call if all {fresh / 1e9:.1f} GB moved out were fresh (measured: SDXL +3.4 s on the first call, "
            f"+2.0 s on the second, +0.2 s on the third); warm up {STEADY_WARMUP_CALLS} calls before timing (bench "
            f"diffusion: within 8% of this plan after four, 1.45x after two)")
