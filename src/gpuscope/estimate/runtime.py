"""Device memory the framework uses beyond what its caching allocator reports as allocated.

``torch.cuda.max_memory_allocated`` (what our peak estimates target) excludes:
- the runtime's context (CUDA's context, cuBLAS/cuDNN handles and loaded kernels): 1.27 GB on an H200 with torch
  2.11 / CUDA 13 (NVML's used memory minus torch's reserved after init and one GEMM,
  research/results/2026-11-29-h200/gpu_facts.json); it varies with the driver, the libraries loaded and
  CUDA_MODULE_LOADING (LAZY by default since CUDA 11.7). ROCm's HIP runtime, Intel's Level Zero and Gaudi's HPU
  runtime are assumed to take the same (none measured; estimate/platform.py names each and says so);
- the allocator's slack: reserved segments above the allocated bytes (block rounding to 2 MiB segments for large
  allocations, fragmentation between differently sized tensors). We budget 3% of the peak plus 256 MiB.
A plan ``fits`` when peak + these overheads <= the memory the runtime reports as the device's total.
"""

from __future__ import annotations

GIB = 2**30
CUDA_CONTEXT_BYTES = 1.27e9
ALLOCATOR_SLACK_FRACTION = 0.03
ALLOCATOR_SLACK_FIXED = 256 * 2**20
# cuBLAS workspaces come from PyTorch's caching allocator (so they count as allocated): 32 MiB per handle on
# Hopper (CublasHandlePool.cpp; measured: memory_allocated grew by exactly 33,554,432 bytes at the first GEMM).
# Training also runs GEMMs on autograd's backward thread, which gets its own handle: two workspaces.
CUBLAS_WORKSPACE_BYTES = 32 * 2**20
TRAIN_WORKSPACE_BYTES = 2 * CUBLAS_WORKSPACE_BYTES


def runtime_overheads(peak_bytes: float) -> dict[str, float]:
    return {
        "runtime_context": CUDA_CONTEXT_BYTES,  # the platform's (estimate/platform.py): measured under CUDA
        "allocator_slack": ALLOCATOR_SLACK_FRACTION * peak_bytes + ALLOCATOR_SLACK_FIXED,
    }
