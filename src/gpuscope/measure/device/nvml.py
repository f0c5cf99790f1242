"""Power, clocks, utilisation, temperature and throttle reasons sampled through NVML while a benchmark runs.

    with NvmlSampler(interval_s=0.1) as s:
        work()
    s.result()  # {"unavailable": None | "why", "samples": [...], "summary": {...}, "throttled": bool | None}

- A background thread reads one GPU every ``interval_s``: power (W), SM and memory clocks (MHz), GPU and memory
  utilisation (%), temperature (C) and the clock-event ("throttle") reason mask, decoded with
  ``gpuscope.measure.device.provenance.decode_throttle``. A sample is flagged ``throttled`` when a reason that holds the
  clocks down (power cap, thermal or hardware slowdown, power brake) is set; idle and app-clock reasons are not.
- Energy: the device's total-energy counter (mJ, Volta and later) read at start and stop; where there is none,
  the integral of the power samples (trapezoids) with ``energy_source = "power_integral"``.
- Without ``pynvml`` (package ``nvidia-ml-py``), without a driver or without an NVIDIA GPU the sampler is a no-op
  whose result says why in ``unavailable``; it never raises.
- NVML sees the whole machine, so the parent process can sample a GPU used by a child process; the GPU is chosen by
  ``uuid`` or ``index`` (default: the first entry of ``CUDA_VISIBLE_DEVICES``, else 0), as in provenance.

No torch here.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

from gpuscope.measure.device.provenance import THROTTLING, decode_throttle

SCHEMA = "gpuscope.nvml/1"


def _load():
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None, "pynvml not installed (install the `bench` extra: nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # no driver, no NVIDIA GPU
        return None, f"NVML not available ({' '.join(str(e).split())[:120]})"
    return pynvml, None


class NvmlSampler:
    def __init__(self, interval_s: float = 0.1, uuid: str | None = None, index: int | None = None,
                 max_samples: int = 20000):
        self.interval_s = interval_s
        self.uuid, self.index = uuid, index
        self.max_samples = max_samples
        self.samples: list[dict] = []
        self.unavailable: str | None = None
        self._nv = None
        self._h = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._energy0 = self._energy1 = None
        self._t0 = self._t1 = None

    # --- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self) -> "NvmlSampler":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._nv, self.unavailable = _load()
        if self._nv is None:
            return
        try:
            self._h = self._handle()
        except Exception as e:
            self.unavailable = f"NVML has no such GPU ({' '.join(str(e).split())[:120]})"
            self._shutdown()
            return
        self._energy0 = self._energy()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="gpuscope-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._t1 = time.perf_counter()
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
        if self._nv is not None and self._h is not None:
            self._sample()
            self._energy1 = self._energy()
        self._shutdown()

    def _shutdown(self) -> None:
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except Exception:
                pass
        self._nv = None

    def _handle(self):
        nv = self._nv
        if self.uuid:
            u = self.uuid if self.uuid.startswith(("GPU-", "MIG-")) else "GPU-" + self.uuid
            return nv.nvmlDeviceGetHandleByUUID(u)
        idx = self.index
        if idx is None:
            first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
            idx = int(first) if first.isdigit() else 0
        return nv.nvmlDeviceGetHandleByIndex(idx)

    # --- reading -------------------------------------------------------------------------------------------
    def _energy(self) -> float | None:
        try:
            return float(self._nv.nvmlDeviceGetTotalEnergyConsumption(self._h)) / 1e3  # mJ -> J
        except Exception:
            return None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if len(self.samples) >= self.max_samples:
                break
            self._sample()

    def _sample(self) -> None:
        nv, h = self._nv, self._h
        s: dict = {"t_s": time.perf_counter() - self._t0}

        def get(key, fn, *args, conv=lambda v: v):
            try:
                s[key] = conv(fn(h, *args))
            except Exception:
                s[key] = None

        get("power_w", nv.nvmlDeviceGetPowerUsage, conv=lambda mw: mw / 1000.0)
        get("sm_clock_mhz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM)
        get("mem_clock_mhz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM)
        get("gpu_util_pct", nv.nvmlDeviceGetUtilizationRates, conv=lambda u: u.gpu)
        get("mem_util_pct", nv.nvmlDeviceGetUtilizationRates, conv=lambda u: u.memory)
        get("temperature_c", nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU)
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if fn is not None:
            get("throttle_mask", fn, conv=int)
        else:
            s["throttle_mask"] = None
        mask = s["throttle_mask"]
        s["throttle_reasons"] = decode_throttle(mask) if mask is not None else None
        s["throttled"] = bool(set(s["throttle_reasons"]) & THROTTLING) if mask is not None else None
        self.samples.append(s)

    def read_now(self) -> dict | None:
        """Take one sample now (besides the periodic ones) and return it; None when NVML is unavailable. For
        events shorter than the sampling interval, e.g. the SM clock in the middle of a matmul burst."""
        if self._nv is None or self._h is None:
            return None
        self._sample()
        return self.samples[-1]

    # --- result --------------------------------------------------------------------------------------------
    def summary(self) -> dict:
        sm = self.samples
        dur = (self._t1 or time.perf_counter()) - (self._t0 or 0.0)
        out: dict = {"n_samples": len(sm), "duration_s": dur, "interval_s": self.interval_s}

        def col(k):
            return [x[k] for x in sm if isinstance(x.get(k), (int, float)) and not isinstance(x.get(k), bool)]

        for k in ("power_w", "sm_clock_mhz", "mem_clock_mhz", "gpu_util_pct", "mem_util_pct", "temperature_c"):
            v = col(k)
            out[f"{k}_median"] = statistics.median(v) if v else None
            out[f"{k}_max"] = max(v) if v else None
        out["sm_clock_mhz_min"] = min(col("sm_clock_mhz"), default=None)
        flags = [x["throttled"] for x in sm if x.get("throttled") is not None]
        out["throttled_samples"] = sum(flags)
        out["throttled_fraction"] = sum(flags) / len(flags) if flags else None
        out["throttle_reasons_seen"] = sorted({r for x in sm for r in (x.get("throttle_reasons") or [])})
        if self._energy0 is not None and self._energy1 is not None:
            out["energy_j"], out["energy_source"] = self._energy1 - self._energy0, "total_energy_counter"
        else:
            pw = [(x["t_s"], x["power_w"]) for x in sm if x.get("power_w") is not None]
            e = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(pw, pw[1:]))
            out["energy_j"], out["energy_source"] = (e, "power_integral") if len(pw) > 1 else (None, None)
        return out

    def result(self, with_samples: bool = True) -> dict:
        if self.unavailable:
            return {"schema": SCHEMA, "unavailable": self.unavailable, "samples": [], "summary": None,
                    "throttled": None}
        summ = self.summary()
        flagged = summ["throttled_fraction"]
        return {"schema": SCHEMA, "unavailable": None, "samples": self.samples if with_samples else [],
                "summary": summ, "throttled": (summ["throttled_samples"] > 0) if flagged is not None else None}


def device_sampler(dev, interval_s: float = 0.05) -> "NvmlSampler | None":
    """A sampler for the CUDA device ``dev`` (a measure.device.device.Device), found by its UUID so the right GPU is
    read under CUDA_VISIBLE_DEVICES and several GPUs; None on other devices."""
    if getattr(dev, "type", None) != "cuda":
        return None
    import torch

    uuid = str(getattr(torch.cuda.get_device_properties(dev.index()), "uuid", "") or "") or None
    return NvmlSampler(interval_s=interval_s, uuid=uuid)


class PhaseEnergy:
    """Joules the device used inside a ``with`` block (the total-energy counter, else the power integral; ``joules``
    stays None without NVML). The caller synchronises the device before the block ends, so the counter covers the
    work. Used for J/token of a generate phase and J per training step."""

    def __init__(self, dev, interval_s: float = 0.05):
        self.sampler = device_sampler(dev, interval_s)
        self.joules: float | None = None
        self.source: str | None = None

    def __enter__(self) -> "PhaseEnergy":
        if self.sampler is not None:
            self.sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.sampler is None:
            return
        self.sampler.stop()
        s = self.sampler.summary()
        self.joules, self.source = s.get("energy_j"), s.get("energy_source")
