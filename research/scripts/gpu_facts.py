"""Facts about this GPU + framework that the planner's runtime model uses (run on the device; prints JSON).

- total memory as the runtime reports it (device_total_bytes)
- CUDA context size: device memory in use (NVML) minus what PyTorch reserved, after init and one matmul
- cuBLAS workspace: memory_allocated after the first bf16 matmul minus the operands
- ceilings: device-to-device copy bandwidth (bytes read + written) and an 8192^3 bf16 matmul on random data
"""

import json
import sys

import torch


def main() -> None:
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    out = {"name": props.name, "total_memory": props.total_memory, "sm_count": props.multi_processor_count,
           "torch": torch.__version__, "cuda": torch.version.cuda}
    torch.cuda.init()
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    before = torch.cuda.memory_allocated()
    c = a @ b
    torch.cuda.synchronize()
    out["workspace_after_first_matmul_bytes"] = torch.cuda.memory_allocated() - before - c.numel() * 2
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        used = pynvml.nvmlDeviceGetMemoryInfo(h).used
        out["nvml_used_bytes"] = used
        out["context_bytes_estimate"] = used - torch.cuda.memory_reserved()
    except Exception as exc:  # noqa: BLE001
        out["nvml_error"] = str(exc)
    # matmul ceiling
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        s.record(); a @ b; e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    out["bf16_matmul_8192_tflops"] = 2 * 8192**3 / times[len(times) // 2] / 1e12
    # copy bandwidth
    x = torch.randn(2 * 1024**3 // 4, device=dev)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    times = []
    for _ in range(10):
        s.record(); y.copy_(x); e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    out["copy_gbs_read_plus_write"] = 2 * x.numel() * 4 / times[len(times) // 2] / 1e9
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
