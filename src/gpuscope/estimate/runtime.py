"""Device memory the framework uses beyond what its caching allocator reports as allocated.

``torch.cuda.max_memory_allocated`` (what our peak estimates target) excludes:
- the CUDA context, cuBLAS/cuDNN handles and loaded kernels: about 0.5 GiB on Hopper with PyTorch 2.x (varies with
  the driver and lazy module loading; CUDA_MODULE_LOADING=LAZY is the default since CUDA 11.7);
- the allocator's slack: reserved segments above the allocated bytes (block rounding to 2 MiB segments for large
  allocations, fragmentation between differently sized tensors). We budget 3% of the peak plus 256 MiB.
A plan ``fits`` when peak + these overheads <= the memory the runtime reports as the device's total.
"""

from __future__ import annotations

GIB = 2**30
CUDA_CONTEXT_BYTES = 0.5 * GIB
ALLOCATOR_SLACK_FRACTION = 0.03
ALLOCATOR_SLACK_FIXED = 256 * 2**20
# cuBLAS workspaces come from PyTorch's caching allocator (so they count as allocated): on Hopper PyTorch sizes
# the cuBLAS workspace at 32 MiB per handle (CublasHandlePool.cpp, getChosenWorkspaceSize) and cuBLASLt likewise.
CUBLAS_WORKSPACE_BYTES = 2 * 32 * 2**20


def runtime_overheads(peak_bytes: float) -> dict[str, float]:
    return {
        "cuda_context": CUDA_CONTEXT_BYTES,
        "allocator_slack": ALLOCATOR_SLACK_FRACTION * peak_bytes + ALLOCATOR_SLACK_FIXED,
    }
