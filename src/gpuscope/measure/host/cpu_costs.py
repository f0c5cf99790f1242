"""What eager PyTorch costs per op on a CPU, measured once with this host's ceilings (pipeline/host_ceilings.py) for
the planner's CPU model (estimate/cpu.py). On a CPU the host runs every kernel itself, so a forward is the sum
over its ops of the op's dispatch (Python, the transformers module, the dispatcher) and its compute; nothing
overlaps. Measured here, in a few seconds on a 2-core host:

- ``op_s``, ``forward_s``: a tiny Llama's (measure/models/tiny.TINY, hidden 64: its compute is negligible) decode
  forward at 1, 2 and 4 layers, fitted as forward_s + layers x layer_s; layer_s over the kernels the planner counts
  in one layer is the host cost per kernel the planner prices (host_launch_s on a GPU host, measured the same way
  by `hardware calibrate --host`). ``gpt2_op_s``, ``gpt2_forward_s``: the same on tiny GPT-2s, whose modules run
  more Python per kernel the planner counts (3x a Llama's on a 2-core Xeon and on the EPYC). ``step_s``,
  ``setup_s``: generate's own work per token and per call on the Llamas (measure/host/overhead.measure_family's
  definitions).
- ``gemm_rows`` / ``gemm_tflops``: the fp32 GEMM rate of F.linear (what nn.Linear runs) by rows M (tokens), at a
  1024 x 4096 weight, rotating over weights larger together than the CPU's caches (``stream_bytes``) so each call
  streams its weight from memory as a model's forward does. Small-M GEMMs run far below the large-GEMM peak (on a 2-core Xeon: 20
  GFLOP/s at M = 1, a weight stream at ~20 GB/s, 150 at M = 32, 225 at M = 128, against 264 for a 2048 cube:
  research/results/2026-12-02-cpu/README.md).
- ``elementwise_cache_gbs`` / ``elementwise_dram_gbs``: an in-place multiply (read + write) over 1 MiB and over
  ``stream_bytes``: activations of a short sequence stay in cache, optimizer passes over the weights do not.
  ``first_touch_gbs``: what a freshly allocated large tensor costs on its first write (``elementwise``).

Each measurement stops at its time budget (``budget_s`` in all, split over the parts) and records how many repeats
ran. Torch is imported here; the planner side (estimate/cpu.py) never imports it.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

GEMM_ROWS = (1, 4, 16, 64, 256)
GEMM_K, GEMM_N = 1024, 4096  # a 16 MiB fp32 weight: a decoder layer's MLP matrix of a ~1B model
# The weights the GEMMs rotate over, and the elementwise buffer "from memory": twice the last-level cache the
# kernel reports (a VM's 2 cores may sit on a socket's whole L3: 300 MiB on the Xeon measured, where a 160 MiB
# rotation read weights at 30.6 GB/s against the 18-22 a 0.5 GB GPT-2 decode streamed them at), at least
# MIN_STREAM_BYTES, at most MAX_STREAM_BYTES.
MIN_STREAM_BYTES, MAX_STREAM_BYTES = 160 * 2**20, 1024 * 2**20
TINY_LAYERS = (1, 2, 4)


def last_level_cache_bytes() -> int | None:
    """The largest cache of cpu0 (Linux sysfs: ``.../cache/index*/size``, e.g. "32768K", "300M"), or None."""
    from pathlib import Path

    sizes = []
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (d / "size").read_text().strip().upper()
            sizes.append(int(text[:-1]) * {"K": 2**10, "M": 2**20, "G": 2**30}[text[-1]])
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return max(sizes) if sizes else None


def stream_bytes() -> int:
    """Bytes that stream from memory, not from the caches (see MIN_STREAM_BYTES), and at most an eighth of the
    memory free here (MemAvailable)."""
    from pathlib import Path

    llc = last_level_cache_bytes() or 0
    free = float("inf")
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(max(16 * 2**20, min(MAX_STREAM_BYTES, free / 8, max(MIN_STREAM_BYTES, 2 * llc))))


def _median_within(fn, n_min: int, budget_s: float) -> tuple[float, int]:
    """(median seconds of fn(), calls timed): one untimed call, then at least ``n_min`` (at least 2) timed calls
    and more until ``budget_s`` has passed."""
    fn()
    ts: list[float] = []
    t_end = time.perf_counter() + budget_s
    while len(ts) < max(2, n_min) or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if len(ts) >= 200:
            break
    return statistics.median(ts), len(ts)


def gemm_curve(budget_s: float = 2.0) -> dict:
    """fp32 F.linear rate by rows (module docstring): {"gemm_rows", "gemm_tflops", "gemm_calls"}."""
    count = max(2, stream_bytes() // (GEMM_K * GEMM_N * 4))
    w0 = torch.randn(GEMM_N, GEMM_K)
    ws = [w0.clone() for _ in range(count)]  # copies: made at memory speed, each its own memory
    rates, calls = [], []
    for m in GEMM_ROWS:
        x = torch.randn(m, GEMM_K)
        it = iter(range(10**9))

        def call():
            F.linear(x, ws[next(it) % count])
        s, n = _median_within(call, count, budget_s / len(GEMM_ROWS))
        rates.append(2.0 * m * GEMM_N * GEMM_K / s / 1e12)
        calls.append(n)
    return {"gemm_rows": list(GEMM_ROWS), "gemm_tflops": rates, "gemm_calls": calls,
            "gemm_weight": [GEMM_N, GEMM_K]}


def elementwise(budget_s: float = 1.0) -> dict:
    """In-place multiply bandwidth (bytes read + written) in cache (1 MiB) and from memory (128 MiB), and the
    first touch of freshly allocated memory: a new 128 MiB tensor filled, less the same fill in place, per byte
    (``first_touch_gbs``). glibc's malloc maps every block above 32 MiB fresh from the kernel and unmaps it when
    freed (mallopt(3): M_MMAP_THRESHOLD's dynamic ceiling), so each such tensor made again pays a page fault per
    4 KiB page on first write."""
    out = {}
    for key, floats in (("elementwise_cache_gbs", 2**18), ("elementwise_dram_gbs", stream_bytes() // 4)):
        x = torch.ones(floats)
        s, _ = _median_within(lambda: x.mul_(1.0), 5, budget_s / 3)
        out[key] = 8.0 * floats / s / 1e9
    floats = 2**25
    x = torch.empty(floats)
    fill, _ = _median_within(lambda: x.fill_(1.0), 3, budget_s / 6)
    fresh, _ = _median_within(lambda: torch.empty(floats).fill_(1.0), 3, budget_s / 6)
    out["first_touch_gbs"] = 4.0 * floats / max(fresh - fill, 1e-9) / 1e9
    out["stream_bytes"] = stream_bytes()
    return out


def _kernels(family: str, layers: int) -> int:
    """Kernels the planner counts in a tiny ``family`` model's decode forward (8 tokens of cache)."""
    from gpuscope.estimate import ops as opsmod
    from gpuscope.measure.models.tiny import TINY, layers_key
    from gpuscope.specs.hf_config import spec_from_config

    spec = spec_from_config(dict(TINY[family], **{layers_key(TINY[family]): layers}))
    return sum(o.kernels * o.count for o in opsmod.forward_ops(spec, 1, 1, 8, 4.0, 4.0, 4.0, head_tokens=1))


@torch.no_grad()
def dispatch(budget_s: float = 3.0, family: str = "llama", generate: bool = True) -> dict:
    """Per-kernel and per-forward host cost and (``generate``) generate's per-token and per-call work, on tiny
    ``family`` models of TINY_LAYERS layers (module docstring), each depth timed in turn ``rounds`` times
    (measure/host/overhead.py's interleaving: the host's drift lands in the level, not the slope)."""
    from gpuscope.measure.device.device import Device
    from gpuscope.measure.host.overhead import fit_line
    from gpuscope.measure.models.hf_model import build_model, cache_kwarg, out_cache, silence_generation
    from gpuscope.measure.models.tiny import TINY, layers_key

    dev = Device("cpu")
    ids = torch.randint(0, 256, (1, 8))
    mask = torch.ones_like(ids)
    models = []
    for n in TINY_LAYERS:
        m, _ = build_model(dict(TINY[family], **{layers_key(TINY[family]): n}), dev, torch.float32)
        models.append(m.eval())
        silence_generation(m)

    def gen(m, n: int) -> float:
        t0 = time.perf_counter()
        m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        return time.perf_counter() - t0

    fwd: list[list[float]] = [[] for _ in models]
    step, setup = [], []
    t_end, rounds = time.perf_counter() + budget_s, 0
    while rounds < 2 or (time.perf_counter() < t_end and rounds < 20):
        for i, m in enumerate(models):
            cache = out_cache(m(ids, use_cache=True))
            for _ in range(4):
                t0 = time.perf_counter()
                m(ids[:, -1:], use_cache=True, **{cache_kwarg(m): cache})
                fwd[i].append(time.perf_counter() - t0)
            if generate:
                t9, t1 = gen(m, 9), gen(m, 1)
                t0 = time.perf_counter()
                m(ids, use_cache=True)
                prefill = time.perf_counter() - t0
                step.append((t9 - t1) / 8 - statistics.median(fwd[i][-4:]))
                setup.append(t1 - prefill - step[-1])
        rounds += 1
    med = [statistics.median(f) for f in fwd]
    fixed, per_layer = fit_line(list(TINY_LAYERS), med)
    k1, k2 = _kernels(family, 1), _kernels(family, 2)
    op_s = per_layer / (k2 - k1)
    out = {"op_s": op_s, "forward_s": max(0.0, fixed - (k1 - (k2 - k1)) * op_s), "tiny_decode_forward_s": med,
           "tiny_layers": list(TINY_LAYERS), "rounds": rounds}
    if generate:
        out |= {"step_s": max(0.0, statistics.median(step)), "setup_s": max(0.0, statistics.median(setup))}
    return out


def cpu_costs(budget_s: float = 5.0) -> dict:
    """All of the module docstring's measurements, in about ``budget_s`` seconds on an idle host (more on a loaded
    one: each part runs its minimum repeats whatever the budget)."""
    t0 = time.perf_counter()
    out = dispatch(budget_s * 0.25)
    gpt2 = dispatch(budget_s * 0.15, "gpt2", generate=False)  # GPT-2's modules: more Python per planner kernel
    out |= {"gpt2_op_s": gpt2["op_s"], "gpt2_forward_s": gpt2["forward_s"],
            "gpt2_tiny_decode_forward_s": gpt2["tiny_decode_forward_s"]}
    out.update(gemm_curve(budget_s * 0.45))
    out.update(elementwise(budget_s * 0.15))
    out["measure_s"] = time.perf_counter() - t0
    out["threads"] = torch.get_num_threads()
    return out
