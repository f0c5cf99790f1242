"""An eager forward whose host may run only a few kernels ahead of the GPU: the wall time of a kernel sequence.

Kernel i is launched by the host at t_i = max(h, e_{i-d}): when the host is free (h, the previous launch's end) and
fewer than d earlier kernels are still queued or running (e_{i-d}, the end of the kernel d places back; d =
``depth``). A launch keeps the host ``launch_s``; the kernel starts at max(t_i + launch_s, e_{i-1}) and runs its GPU
time. The step's forward ends with its last kernel. Limits: d large, the usual asynchronous launch: wall = max(GPU
time, launches) for a step whose long kernels are spread out; d = 1, a synchronous launch: every kernel costs its
launch + its GPU time; d = 2: a launch overlaps the kernel before it, each kernel ~max(launch_s, its GPU time).
A shallow queue hides the launches of the few kernels after a long one and no more: the short kernels after a long
cluster (the ~40 norms, rotary, GEMMs of a decode batch that follow one layer's SDPA and KV copies) then cost their
launches in full, the GPU idle, although the step's GPU time is the larger.

Why: transformers' continuous batching on the H200's gVisor host has decode steps near GPU + launches and full
batches near max(GPU, launches) (research/results/2026-12-02-h200-c/serve.md); a queue of depth 2 gives both
(profiles.TRANSFORMERS_HOST, launch_depth). A forward is periodic in its layers: two layers are simulated and the
second's period repeated for the rest.
"""

from __future__ import annotations


def queue_wall(layer: list[float], layers: int, depth: int, launch_s: float) -> float:
    """Seconds from the first launch to the end of the last kernel of ``layers`` repeats of ``layer`` (each item
    one kernel's GPU seconds, in launch order), the launch queue ``depth`` deep."""
    if not layer or layers <= 0:
        return 0.0
    depth = max(1, int(depth))
    ends: list[float] = []
    host = last = 0.0
    marks = []
    for _ in range(min(layers, 3)):
        for d in layer:
            i = len(ends)
            t = max(host, ends[i - depth] if i >= depth else 0.0)
            host = t + launch_s
            last = max(host, last) + d
            ends.append(last)
        marks.append(last)
    if layers <= 3:
        return last
    period = marks[2] - marks[1]
    return marks[1] + (layers - 2) * period


def kernels_of(ops: list[tuple[int, float]]) -> list[float]:
    """One kernel duration per kernel: each (kernels, seconds) op split evenly over its kernels."""
    out: list[float] = []
    for k, s in ops:
        if k > 0:
            out.extend([s / k] * k)
    return out
