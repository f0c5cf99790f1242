"""Where a measurement came from: versions, device, clocks, power limit, throttle reasons, host, argv, git sha.

``provenance(device=None)`` never initialises a GPU context by itself (the suite's parent process calls it without
a device so that it holds no GPU memory); pass the ``Device`` a workload ran on to add torch/CUDA facts. NVML
(``pynvml`` from the ``nvidia-ml-py`` package) is optional and imported lazily; every NVML field is best effort.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

BENCHMARK_VERSION = "gpuscope.measure/1"

# NVML clock-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason* / nvmlClocksThrottleReason*).
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the clocks were held below what the workload asked for.
THROTTLING = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


def decode_throttle(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit] + (
        [f"unknown_0x{mask & ~sum(THROTTLE_BITS):x}"] if mask & ~sum(THROTTLE_BITS) else []
    )


def git_sha() -> dict:
    root = Path(__file__).resolve().parents[3]
    out = {"git_sha": None, "git_dirty": None}
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=3)
        if sha.returncode == 0:
            out["git_sha"] = sha.stdout.strip()
            st = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=3)
            out["git_dirty"] = bool(st.stdout.strip()) if st.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def nvml_sample(uuid: str | None = None, index: int | None = None) -> dict | None:
    """Driver, name, clocks, power and throttle reasons of one GPU via NVML; None when NVML is unavailable."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as e:  # no driver, no GPU
        return {"error": f"nvmlInit: {e}"}
    out: dict = {}
    try:
        h = None
        if uuid:
            try:
                h = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
            except Exception:
                h = None
        if h is None:
            idx = index or 0
            if index is None and os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].isdigit():
                idx = int(os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0])
            h = pynvml.nvmlDeviceGetHandleByIndex(idx)

        def get(key, fn, *args, conv=lambda v: v):
            try:
                out[key] = conv(fn(*args))
            except Exception:
                out[key] = None

        def s(v):
            return v.decode() if isinstance(v, bytes) else v

        get("driver_version", pynvml.nvmlSystemGetDriverVersion, conv=s)
        get("gpu_name", pynvml.nvmlDeviceGetName, h, conv=s)
        get("gpu_uuid", pynvml.nvmlDeviceGetUUID, h, conv=s)
        get("sm_clock_mhz", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
        get("mem_clock_mhz", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM)
        get("sm_clock_max_mhz", pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM)
        get("mem_clock_max_mhz", pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_MEM)
        get("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit, h, conv=lambda mw: mw / 1000.0)
        get("power_draw_w", pynvml.nvmlDeviceGetPowerUsage, h, conv=lambda mw: mw / 1000.0)
        get("temperature_c", pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
        get("memory_total_bytes", pynvml.nvmlDeviceGetMemoryInfo, h, conv=lambda m: int(m.total))
        get("memory_used_bytes", pynvml.nvmlDeviceGetMemoryInfo, h, conv=lambda m: int(m.used))
        fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        get("throttle_mask", fn, h, conv=int) if fn else out.setdefault("throttle_mask", None)
        mask = out.get("throttle_mask")
        out["throttle_reasons"] = decode_throttle(mask) if mask is not None else None
        out["throttled"] = bool(set(out["throttle_reasons"]) & THROTTLING) if mask is not None else None
    except Exception as e:
        out["error"] = str(e)[:200]
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out


def torch_facts(dev=None) -> dict:
    """Versions of torch and its libraries, and (with a Device) facts about that device."""
    import torch

    out: dict = {"torch": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}
    try:
        import transformers

        out["transformers"] = transformers.__version__
    except ImportError:
        out["transformers"] = None
    out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    out["nccl"] = None
    if dev is not None and dev.type == "cuda":
        try:
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            pass
    out["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    out["cuda_matmul_allow_tf32"] = quiet(lambda: bool(torch.backends.cuda.matmul.allow_tf32))
    out["cudnn_allow_tf32"] = quiet(lambda: bool(torch.backends.cudnn.allow_tf32))
    out["num_threads"] = torch.get_num_threads()
    if dev is not None:
        out["device"] = dev.name
        out["device_name"] = dev.device_name()
        out["device_total_memory_bytes"] = dev.total_memory()
        out["timer"] = dev.timer_kind
        if dev.type == "cuda":
            p = torch.cuda.get_device_properties(dev.index())
            out["compute_capability"] = f"{p.major}.{p.minor}"
            out["multiprocessor_count"] = p.multi_processor_count
            uuid = str(getattr(p, "uuid", "") or "") or None
            out["nvml"] = nvml_sample(uuid=uuid, index=None)
    return out


def quiet(fn):
    """``fn()`` with its warnings silenced, or None where it raises (a best-effort fact)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    except Exception:
        return None


def provenance(dev=None, with_torch: bool = True) -> dict:
    """The provenance dict. ``with_torch=False`` avoids importing torch (and never touches a GPU)."""
    out = {
        "benchmark_version": BENCHMARK_VERSION,
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "argv": list(sys.argv),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    out.update(git_sha())
    if with_torch:
        out.update(torch_facts(dev))
    return out
