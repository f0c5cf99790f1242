"""bench's defaults where the device is a CPU: what is fast there, said on stderr with the reason.

An accelerator's defaults (bf16, a 512-token prompt, 128 generated tokens, 2048-token training sequences) are what
the planner is validated on; on a CPU they do not finish in minutes. fp32 is the dtype every CPU runs at its full
rate: bf16 and fp16 matmuls are fast only where the CPU has the units for them (AVX512-BF16, AMX). On the 2-core
AMD EPYC host these defaults were checked on (AVX512-BF16, no AMX), bench micro read fp32 8.3, bf16 17.1 and fp16
0.87 GFLOP/s under load, and a 4-layer GPT-2 forward of 64 tokens ran faster in bf16 (0.86 against 2.3 s); a CPU
without AVX512-BF16 runs bf16 generate far slower than fp32, and fp16 is slow on both. A 1B model's 128 tokens
take minutes on such a host. So a value not given takes the CPU's default; a value given is kept as given.
"""

from __future__ import annotations

from pathlib import Path

import typer

from gpuscope.cli import options
from gpuscope.errors import UserError

ACCEL = {"dtype": "bf16", "precision": "amp-bf16", "prompt": 512, "gen": 128, "seq": 2048, "micro_dtype": None,
         "steps": 6, "warmup": 2}
# Llama-3.2-1B in fp32 on a 2-core host: a 64-token prefill is ~150 GFLOP (8-60 GFLOP/s there, by load) and a
# decode step reads its 5 GB of weights; a case runs ~14 prefills and ~60 decode steps, so 32 + 8 tokens. A
# training step of GPT-2 (124M) at 256 tokens took 14 s on the loaded host (9 steps a case): 128 tokens, and one
# warm-up and three timed steps (a CPU keeps no allocator pool or kernel plans for a second warm-up to settle; at
# 128 tokens a step read 1.3 s on an idle 2-core Xeon and 10 s on the loaded EPYC: 9 steps took 120 s there)
CPU = {"dtype": "fp32", "precision": "fp32", "prompt": 32, "gen": 8, "seq": 128, "micro_dtype": ["fp32"],
       "steps": 3, "warmup": 1}
# each timed phase of a CPU case ends at this many seconds once two repeats ran (measure/runner/progress.py): a
# loaded host's case stays within minutes, its repeat count recorded
PHASE_BUDGET_S = 20.0
# the inference case's bare decode-step forwards (measure/llm/infer.py, 20 by default): 4 on a CPU
CPU_CASE_KEYS = {"infer": {"decode_iters": 4}}
WHY = ("fp32 runs at full rate on every CPU, bf16/fp16 only where it has the units for them (fp16 matmuls ran "
       "10x slower than fp32 on a 2-core EPYC), and accelerator-sized inputs take minutes")


def on_cpu(device: str | None) -> bool:
    return options.pick_device(device).split(":")[0] == "cpu"


def help_for(key: str) -> str:
    """The '(default X; Y on a CPU)' of an option's help."""
    show = {k: ",".join(v) if isinstance(v, list) else ("all" if v is None else v) for k, v in
            (("accel", ACCEL[key]), ("cpu", CPU[key]))}
    return f"default {show['accel']}, {show['cpu']} on a CPU"


def defaults(command: str, device: str | None, **given) -> tuple[dict, str | None]:
    """(``given`` (flag name -> value, None where not given) with each None replaced by the device's default, the
    line that says the CPU defaults taken, or None). The caller says the line (``say``) once its inputs are
    checked, so a bad input stays one sentence."""
    cpu = on_cpu(device)
    table = CPU if cpu else ACCEL
    taken = {k: table[k] for k, v in given.items() if v is None}
    note = None
    if cpu and taken:
        flags = ", ".join(f"--{k.replace('micro_', '')} {','.join(v) if isinstance(v, list) else v}"
                          for k, v in taken.items())
        note = f"{command} on a CPU: {flags} (the CPU defaults: {WHY}; pass them to choose)"
    return {**given, **taken}, note


def say(note: str | None) -> None:
    if note:
        typer.echo(note, err=True)


def case_keys(kind: str, device: str | None) -> dict:
    """Extra case keys a CPU run takes (fewer bare decode steps), none on an accelerator."""
    return dict(CPU_CASE_KEYS.get(kind, {})) if on_cpu(device) else {}


# A CPU case's memory is the planner's peak for it (weights, gradients and optimizer states, activations, KV
# cache: estimate/; the accelerator entry only stands in for the dtypes and workspace, the bytes are the model's).
# A case above the memory the host has free would swap for many minutes, or be killed by the kernel, instead of
# raising out-of-memory (Llama-3.2-1B, micro-batch 4 x 2048, amp-bf16: planned 48 GB, killed after 6.6 minutes on a
# 24 GB host), so it is refused before it starts.
FREE_FRACTION = 0.9
STAND_IN = "h100"


def host_free_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (Linux), or None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def planned_bytes(case: dict) -> float | None:
    """The planner's peak bytes for a case (None where it cannot plan it: the case's own run says why)."""
    from gpuscope import workloads
    from gpuscope.specs.hardware import load_hardware

    try:
        return float(workloads.estimate_for(case, load_hardware(STAND_IN)).peak_bytes_per_gpu)
    except UserError:
        return None


def fits_host(case: dict, device: str | None) -> None:
    """On a CPU, the planner's peak of the case within FREE_FRACTION of the memory free here (a CPU swaps or is
    killed instead of raising out-of-memory), else one sentence. accelerate's device_map spreads (or offloads) the
    weights itself: not a floor in this host's memory."""
    free = host_free_bytes() if on_cpu(device) and not case.get("device_map") else None
    need = planned_bytes(case) if free else None
    if need and need > FREE_FRACTION * free:
        raise UserError(f"{case.get('model')} on this CPU needs about {need / 1e9:.1f} GB (the planner's peak), more "
                        f"than {FREE_FRACTION:.0%} of the {free / 1e9:.1f} GB of memory free here (it would swap or be "
                        "killed); use smaller sizes, a smaller model, or an accelerator.")


def ready(case: dict, device: str | None, note: str | None, gpu: str | None = None) -> None:
    """Before a case runs, the last checks, then the CPU defaults' line (``say``), so a bad input stays one
    sentence: ``gpu`` a known GPU (options.known_gpu), and on a CPU a planned peak within the memory free here."""
    options.known_gpu(gpu)
    fits_host(case, device)
    say(note)


def phase_budget(device: str | None) -> float | None:
    """The timed-phase budget of a case's process (PHASE_BUDGET_S on a CPU, None elsewhere): handed to the suite,
    which sets it in that process's environment only (measure/runner/suite.child_env), never in this one's."""
    return PHASE_BUDGET_S if on_cpu(device) else None
