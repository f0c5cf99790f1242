"""CPU offload as diffusers' pipelines apply it, on the modules of one build (measure/diffusion/components.Loaded).

- ``model`` (DiffusionPipeline.enable_model_cpu_offload): every module moved to the CPU, then accelerate's
  ``cpu_offload_with_hook`` on each in the pipeline's ``model_cpu_offload_seq`` order (text encoders, image encoder,
  denoiser, VAE), each hook chained to the one before: a module is moved to the GPU when its forward (or a diffusers
  ``decode``, through ``apply_forward_hook``) is called, and the module before it is moved back first. At the end of
  a pipeline call ``maybe_free_model_hooks`` moves every module back to the CPU (``free``).
- ``sequential`` (enable_sequential_cpu_offload): accelerate's ``cpu_offload`` on each module, buffers too where the
  module holds parameters of its own (``offload_buffers = len(model._parameters) > 0``, as diffusers passes): the
  weights stay in a CPU state dict (pageable memory, as diffusers leaves them), each leaf module's copied to the
  GPU just before it runs and dropped after.
"""

from __future__ import annotations

MODES = ("none", "model", "sequential")


def _modules(mods) -> list:
    return [m for m in (*mods.encoders.values(), mods.denoiser, mods.vae) if m is not None]


def apply(mods, mode: str, device) -> list:
    """Offload the build's modules; the hooks ``free`` resets (model offload; none for the other modes)."""
    if mode == "none":
        return []
    from accelerate import cpu_offload, cpu_offload_with_hook

    hooks, hook = [], None
    for m in _modules(mods):
        if mode == "model":
            _, hook = cpu_offload_with_hook(m, device, prev_module_hook=hook)  # moves m to the CPU
            hooks.append(hook)
        else:
            cpu_offload(m, device, offload_buffers=len(m._parameters) > 0)
    return hooks


def free(hooks: list) -> None:
    """What a pipeline call ends with under model offload (maybe_free_model_hooks): every module back on the CPU."""
    for h in hooks:
        h.offload()


def link_probe(mods, dev) -> dict:
    """Model offload: the largest module moved to the device and back once, each way timed around a synchronize
    (pageable host memory, as the hooks move it): the rates the offload's transfers ran at, and their bytes."""
    import time

    from gpuscope.measure.diffusion.build import param_bytes

    if not mods.hooks:
        return {}
    m = max(_modules(mods), key=param_bytes)
    n = param_bytes(m)
    out = {}
    for way, target in (("h2d", dev.torch_device), ("d2h", "cpu")):
        dev.synchronize()
        t0 = time.perf_counter()
        m.to(target)
        dev.synchronize()
        s = time.perf_counter() - t0
        out[f"offload_{way}_s"], out[f"offload_{way}_gbs"] = s, n / s / 1e9 if s > 0 else None
    return {**out, "offload_probe_bytes": n, "offload_probe_module": type(m).__name__}
