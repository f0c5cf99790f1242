"""``--defer-stop``: HF ``generate`` without its per-token host wait, through transformers' own DeferredStopCheck.

Why: every decode token, ``generate`` reads ``unfinished_sequences.max() == 0`` on the host
(``StopCheck.__call__``), a ``cudaStreamSynchronize``. The host cannot queue token t+1 while the GPU runs token t, so
the host's work per token (generate's own bookkeeping; under ``cache_implementation="static"`` also Dynamo's guards
and the CUDA-graph tree's checks before each replay) is added to the GPU's time instead of hidden under it. Measured
on an H200 (research/results/2026-11-30-h200/README.md, research/scripts/gpu_hf_graph.py): one sync per token,
0.94-1.52 ms of host time in series with a compiled step.

transformers (5.17 and later) already has the fix: ``DeferredStopCheck`` copies the flag to pinned memory without
blocking and reads it one token later, waiting only for the token before (an event), so the host runs one token
ahead; the one extra forward it runs at the end is undone (``finish``), so the output is the same tokens. Its
``is_supported`` switches it on for MPS only ("we should enable it for cuda if we observe perf gains", the source
says). ``deferred_stop()`` lets it apply to CUDA and XPU as well, for the duration of one ``generate`` call, and
keeps every other condition transformers sets (no assistant model; a returned cache must be croppable): the patched
rule asks transformers' own ``is_supported`` with the device type it allows. CPU has no device events
(``torch.Event`` raises there) and nothing runs ahead of the host, so the option is refused for it.
"""

from __future__ import annotations

from contextlib import contextmanager

from gpuscope.measure.choices import HF_ENGINES  # the engines that run HF generate (the others never wait)

DEVICE_TYPES = ("cuda", "xpu", "mps")  # devices with events, where the host can run ahead


def problem(engine: str, device_type: str) -> str | None:
    """Why --defer-stop cannot apply to this engine on this device, or None (also: a transformers without it)."""
    if engine not in HF_ENGINES:
        return (f"applies to HF generate (engine {' or '.join(HF_ENGINES)}); {engine}'s loop never waits for the "
                "GPU")
    if device_type not in DEVICE_TYPES:
        return (f"needs a device with events ({', '.join(DEVICE_TYPES)}); on {device_type} nothing runs ahead of "
                "the host")
    try:
        stop_check_class()
    except ValueError as e:
        return str(e)
    return None


def stop_check_class():
    """transformers' DeferredStopCheck, or a ValueError that says which transformers lacks it."""
    import transformers
    from transformers.generation import utils as gen_utils

    cls = getattr(gen_utils, "DeferredStopCheck", None)
    if cls is None or not isinstance(cls.__dict__.get("is_supported"), staticmethod):
        raise ValueError(f"defer_stop: transformers {transformers.__version__} has no DeferredStopCheck.is_supported "
                         "(transformers 5.17 and later have it)")
    return cls


@contextmanager
def deferred_stop(used: list | None = None):
    """Within the block, generate defers its stop check on every device in DEVICE_TYPES. ``used`` (a list) gets one
    bool per decode loop generate ran: whether the deferred check applied (transformers' other conditions hold)."""
    import torch

    cls = stop_check_class()
    original = cls.__dict__["is_supported"]
    rule = original.__func__

    def is_supported(device, cache, cache_is_returned, is_assistant):
        as_mps = torch.device("mps") if torch.device(device).type in DEVICE_TYPES else device
        ok = bool(rule(as_mps, cache, cache_is_returned, is_assistant))
        if used is not None:
            used.append(ok)
        return ok

    cls.is_supported = staticmethod(is_supported)
    try:
        yield cls
    finally:
        cls.is_supported = original
