"""The software platform a hardware entry runs under (by its catalog ``vendor``): the names the advice uses for
its runtime, its context and its graph capture, and which of the planner's host and runtime figures were measured
on it and which are assumed from the one platform measured (an H200 host under CUDA).

What each figure rests on:
- CUDA (NVIDIA): the per-kernel launch and per-token host costs (engines.py), the training host model
  (engines.TrainHost) and the 1.27 GB runtime context (runtime.py) were measured on an H200 host
  (research/results/2026-11-29-h200 and the later h200 folders). Measured.
- ROCm (AMD): known: PyTorch's ``torch.cuda`` API runs on HIP there, so ``torch.cuda.graphs`` capture HIP graphs
  and torch.compile's ``reduce-overhead`` mode uses them (PyTorch's ROCm notes: "HIP graphs" stand in for CUDA
  graphs). Assumed: an H200 host's launch costs and the CUDA context's size for the HIP runtime (none measured).
- XPU (Intel GPUs, Level Zero): known: PyTorch runs them as the ``xpu`` device. Assumed: that a step can be
  captured and replayed as an XPU graph as a CUDA graph is (newer PyTorch releases only), an H200 host's launch
  costs, the context's size.
- Gaudi (Intel Habana, HPU): known: the Gaudi bridge replays captured steps as HPU graphs
  (``habana_frameworks.torch.hpu.graphs``), and its lazy mode accumulates ops into graphs instead of launching
  each kernel. Assumed: an H200 host's per-kernel costs for eager mode (lazy mode batches them, so it is an upper
  bound there), the context's size.
- TPU (Google, XLA): every step is an XLA-compiled graph; assumed: the host and context figures.
- CPU (a host's own ceilings, pipeline/host_ceilings.py): no graphs and no device context; every op runs on the
  host after its dispatch (estimate/cpu.py). Measured on the host: the GEMM rate by rows, the elementwise and
  first-touch bandwidths, the cost per kernel and per forward, generate's per-token and per-call work. Assumed:
  training's autograd and optimizer costs per kernel as an H200 host's ratios to its launch cost
  (engines.TrainHost), unless `hardware calibrate --host` measured them on this CPU.
Pure Python: no torch here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    name: str  # the runtime: CUDA, ROCm, XPU, Gaudi HPU
    graphs: str  # what its captured, replayed steps are called
    context: str  # the runtime's own device memory (context, handles, loaded kernels)
    measured: bool  # host costs and the context size measured on this platform
    assumed: str = ""  # what is taken from the CUDA measurements, said beside each estimate

    def to_dict(self) -> dict:
        return {"name": self.name, "graphs": self.graphs, "context": self.context,
                "host_costs": "measured" if self.measured else "assumed", "assumed": self.assumed or None}


_FROM_H200 = "an H200 host's launch and per-token host costs and the CUDA context's 1.27 GB"
PLATFORMS = {
    "NVIDIA": Platform("CUDA", "CUDA graphs", "CUDA context", True),
    "AMD": Platform("ROCm", "HIP graphs", "HIP runtime context", False,
                    f"ROCm: HIP graphs (PyTorch's torch.cuda graph API on HIP) replay a captured step; assumed: "
                    f"{_FROM_H200} (not measured on ROCm)"),
    "Intel": Platform("XPU", "XPU graphs", "Level Zero context", False,
                      f"XPU: assumed: graph capture as XPU graphs (newer PyTorch only), {_FROM_H200} (not measured "
                      "on an Intel GPU)"),
    "Intel (Habana)": Platform("Gaudi HPU", "HPU graphs", "HPU runtime context", False,
                               f"Gaudi: HPU graphs replay a captured step (lazy mode also batches ops into graphs); "
                               f"assumed for eager kernels: {_FROM_H200} (an upper bound under lazy mode; not "
                               "measured on Gaudi)"),
    "Google": Platform("XLA (TPU)", "XLA-compiled graphs", "TPU runtime", False,
                       f"TPU: every step is an XLA-compiled graph; assumed: {_FROM_H200} (not measured on a TPU)"),
}
OTHER = Platform("the device's runtime", "device graphs", "runtime context", False,
                 f"assumed: {_FROM_H200} (this device's vendor was not measured)")


CPU = Platform("CPU (eager PyTorch)", "no graphs (eager)", "process memory", True,
               "CPU: each op's compute at this host's measured GEMM rate by rows and elementwise bandwidth, in series "
               "with its dispatch (measured per kernel on tiny models); training's autograd and optimizer host costs "
               "per kernel: an H200 host's ratios to that cost, unless `hardware calibrate --host` measured them here")


def platform_for(hw) -> Platform:
    """The platform of a HardwareSpec (its ``vendor``; a CPU entry by its measured per-op costs, estimate/cpu.py); a
    device of another vendor gets OTHER (all assumed)."""
    from gpuscope.estimate.cpu import cpu_costs

    if cpu_costs(hw) is not None:
        return CPU
    return PLATFORMS.get(str(getattr(hw, "vendor", "") or ""), OTHER)
