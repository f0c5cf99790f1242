"""launch_queue.queue_wall (a host at most `depth` kernels ahead of the GPU) and the step model that uses it."""

from __future__ import annotations

import pytest

from gpuscope.estimate.serve import ServeRequest
from gpuscope.estimate.serve.api import prepare
from gpuscope.estimate.serve.launch_queue import kernels_of, queue_wall
from gpuscope.estimate.serve.step_time import _interp
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

TAU = 45e-6


def _brute(layer, layers, depth, tau):
    """Every layer simulated (queue_wall repeats the second layer's period instead)."""
    ends, host, last = [], 0.0, 0.0
    for _ in range(layers):
        for d in layer:
            i = len(ends)
            t = max(host, ends[i - depth] if i >= depth else 0.0)
            host = t + tau
            last = max(host, last) + d
            ends.append(last)
    return last


# one layer of a decode step: 20 short kernels, one long cluster (attention), 20 short
DECODE = [5e-6] * 20 + [0.4e-3, 0.8e-3] + [5e-6] * 20


@pytest.mark.parametrize("depth", [1, 2, 4, 50])
def test_steady_state_matches_the_full_simulation(depth):
    assert queue_wall(DECODE, 32, depth, TAU) == pytest.approx(_brute(DECODE, 32, depth, TAU), rel=1e-9)
    assert queue_wall(DECODE, 2, depth, TAU) == pytest.approx(_brute(DECODE, 2, depth, TAU), rel=1e-12)


def test_depth_one_is_launch_plus_gpu_depth_two_about_their_max_per_kernel():
    layers = 8
    assert queue_wall(DECODE, layers, 1, TAU) == pytest.approx(layers * sum(TAU + d for d in DECODE), rel=1e-9)
    two = queue_wall(DECODE, layers, 2, TAU)
    per_kernel_max = layers * sum(max(TAU, d) for d in DECODE)
    assert per_kernel_max <= two < per_kernel_max + layers * 2 * TAU


def test_deep_queue_is_max_of_gpu_and_launches():
    """With the long kernels hiding the launches after them, a deep queue gives max(GPU, launches) plus the tail."""
    layers = 32
    gpu = layers * sum(DECODE)
    launches = layers * len(DECODE) * TAU
    wall = queue_wall(DECODE, layers, 10_000, TAU)
    assert max(gpu, launches) <= wall < max(gpu, launches) + 2e-3


def test_a_shallow_queue_lies_between_max_and_sum():
    layers = 32
    gpu, launches = layers * sum(DECODE), layers * len(DECODE) * TAU
    walls = [queue_wall(DECODE, layers, d, TAU) for d in (1, 2, 4, 16, 64)]
    assert walls == sorted(walls, reverse=True)  # deeper queues never slower
    assert max(gpu, launches) < walls[1] < gpu + launches


def test_kernels_of_splits_each_op():
    assert kernels_of([(2, 1.0), (0, 5.0), (1, 0.5)]) == [0.5, 0.5, 0.5]


def test_transformers_steps_go_through_the_queue_vllm_steps_do_not():
    hw = load_hardware("h200")
    m = load_model("llama-3.1-8b")
    step = prepare(ServeRequest(m, 64, 512, 128), hw)[-1]
    assert step.engine.serial_launches and step.engine.launch_depth == 2
    kv = 64 * 600
    gpu = step.attention_s(64, kv, kv)
    launches = step.kernels * step.launch_s
    fwd = step.serial_s(64, 64, kv, kv)
    assert max(gpu, launches) < fwd < gpu + launches + 0.02  # a decode batch of 64: the queue exposes launches
    # at 8192 prefill tokens most ops outlast their launches: the queue adds little to the GPU time
    big = step.serial_s(8192, 64, 8192 + kv, 8192 + kv)
    gpu_big = (_interp(step.xs, step.linear_s, 8192) + _interp(step.xs, step.head_s, 64)
               + step.attention_s(8192, 8192 + kv, 8192 + kv))
    assert gpu_big < big < 1.05 * gpu_big
    vstep = prepare(ServeRequest(m, 64, 512, 128, engine="vllm"), hw)[-1]
    assert not vstep.engine.serial_launches
