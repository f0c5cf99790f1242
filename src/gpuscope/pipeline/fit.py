"""bench all's GPU set fitted to the device it runs on: a graph engine only where CUDA graphs exist, fp16 where
the device has no bf16, and each case's batch halved, then its model made smaller, until the planner fits it."""

from __future__ import annotations

from dataclasses import replace

from gpuscope import workloads

# the next smaller model once batch 1 does not fit (Llama, then Qwen)
SMALLER = {"llama-3.1-8b": "llama-3.2-3b", "llama-3.2-3b": "llama-3.2-1b", "llama-3.2-1b": "qwen2.5-0.5b"}


def _fits(case: dict, hw) -> bool:
    return workloads.estimate_for(case, hw).fits


def _size(case: dict) -> str:
    return workloads.from_dict(case).size_field


def _fit_one(case: dict, hw) -> dict | None:
    """The case with its batch halved (then its model made smaller) until the planner fits it on ``hw``, or None."""
    size = _size(case)
    c = dict(case)
    while True:
        while c[size] > 1 and not _fits(c, hw):
            c[size] //= 2
        if _fits(c, hw):
            return c
        if c["model"] not in SMALLER:
            return None
        c = dict(c, model=SMALLER[c["model"]], **{size: case[size]})


def _device_kind_notes(c: dict, dev_type: str, notes: list[str]) -> None:
    if workloads.from_dict(c).needs_cuda_graphs and dev_type != "cuda":
        c.pop("defer_stop", None)
        c["engine"] = "hf-eager"
        notes.append(f"{c['model']}: plain generate on {dev_type} (the graph engines need CUDA graphs)")


def _no_bf16(c: dict, hw, notes: list[str]) -> None:
    key, fp16, bf16 = workloads.case_class(c["kind"]).HALF
    if c.get(key, bf16) != fp16:
        notes.append(f"{c['model']} ({c['kind']}): {fp16}, {hw.name} has no bf16")
        c[key] = fp16


def fit_cases(cases: list[dict], hw, dev_type: str) -> tuple[list[dict], list[str]]:
    """The accelerator quick set (workloads/sets.gpu_quick_cases) for one device; a case nothing fits is left out.
    ``hw``'s ``device_total_bytes`` is the device's measured total; ``hw`` None (a device the catalog does not
    know): sizes as they are. Returns the cases and one sentence per change."""
    out, notes = [], []
    for case in cases:
        c = dict(case)
        _device_kind_notes(c, dev_type, notes)
        if hw is None:
            out.append(c)
            continue
        if not hw.supports("bf16"):
            _no_bf16(c, hw, notes)
        fitted = _fit_one(c, hw)
        gib = f"{hw.device_total_bytes / 2**30:.0f} GiB"
        if fitted is None:
            notes.append(f"{c['model']} ({c['kind']}) left out: planned not to fit {gib} even at batch 1 of "
                         f"{c['model']} or a smaller model")
            continue
        if fitted != c:
            size = _size(c)
            notes.append(f"{c['model']} ({c['kind']}, {size} {c[size]}) -> {fitted['model']}, {size} "
                         f"{fitted[size]}: planned to fit {gib}")
        out.append(fitted)
    return out, notes


def fit_to_device(s, cases: list[dict], gpu: str | None, device: str | None) -> list[dict]:
    """fit_cases on this run's device, planned on ``gpu`` (the run's calibration) or the device's catalog entry;
    each change said on the session."""
    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.pipeline.estimate import hardware_for_estimate

    dev = Device(pick_device(device))
    hw, why = hardware_for_estimate(gpu, dev.device_name())
    if hw is None:
        s.note(f"the quick set runs as sized for an 80 GB GPU: {why}")
    elif dev.total_memory():
        hw = replace(hw, device_total_bytes=dev.total_memory())
    cases, notes = fit_cases(cases, hw, dev.type)
    for n in notes:
        s.note(n)
    return cases
