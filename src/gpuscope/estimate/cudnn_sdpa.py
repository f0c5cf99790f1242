"""Which SDPA backend torch runs a decode step's attention on, and the host cost of cuDNN's per-shape graph build.

Backend choice: torch's ``select_sdp_backend`` (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, read at
pytorch/pytorch 001f694) walks a priority order and takes the first backend whose checks pass.
- The order: flash, efficient, math, cuDNN by default; cuDNN first (then flash, efficient, math) when
  ``check_prefer_cudnn_attention()`` holds: the env var TORCH_CUDNN_SDPA_DEPRIORITIZED unset, a runtime cuDNN
  > 9.15.0 (``cudnn_version > 91500``: the seq_len-not-divisible-by-128 fix of pytorch#169849 is in 9.15.1) and a
  device of major 9 or 10 (sm90 H100/H200/H20, sm100 B200, sm103 B300; wheels built with CUDA < 13 only minor 0 or
  3). History: 2.5.0 put cuDNN first on H100 and 2.5.1 made it opt-in again (pytorch#138522: cuDNN last, behind
  math, so never picked unless the others are turned off); pytorch#162073 enabled it by default on sm90/sm100 for
  2.9; the cuDNN gate is in 2.10 (huggingface/transformers#48163's review, which also says 2.11's bundled cuDNN
  is the first to cross it: 2.11.0+cu130 ships 9.19, what every H200 run of this repository had). Torch 2.9 is
  taken as 2.10 here (its own gate was not read).
- cuDNN's checks (``can_use_cudnn_attention``) that a decode step can fail: ``enable_cudnn_sdp(False)``;
  deterministic algorithms on; a dtype other than fp16 / bf16; a device outside sm80-sm121; head dims above
  128 (192 for q/k with 128 for v on sm90/sm10x from cuDNN 9.11: MLA; 256 on sm90/sm10x from cuDNN > 9.22 with
  cudnn_frontend >= 1.24) or not a multiple of 8. A mask does not rule it out (``check_attn_mask_shape`` only
  checks its shape); it does rule flash out (``check_for_attn_mask``), so with cuDNN off a masked step runs the
  efficient kernel, an unmasked one flash.

The build: torch's cuDNN MHA (aten/src/ATen/native/cudnn/MHA.cpp) caches one execution graph per ``MHAParams``
(b, h, s_q, s_kv, d_qk, d_v, the q/k/v and bias dims and strides). HF ``generate`` over a DynamicCache gives every
decode step a KV length (s_kv) one longer than the last, so each step of a generate at lengths the process has not
run builds a graph on the host before the first layer's SDPA (all layers share the shape): one build a step, in
series with the rest of the step. The static-cache engines (hf-graph, gs-graph, gs-compile) attend over a fixed
prompt + gen slots and replay the step from a CUDA graph: one shape, built once at capture, never per step. The
prefill pays one build per new prompt shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Host seconds of one cuDNN SDPA execution-graph build: research/results/2026-12-02-h200-c/call2/gpu_serve5 (probe
# trace of three transformers CB decode steps, 64 requests at 33k KV tokens, the H200's gVisor host): 37.1, 41.8 and
# 48.8 ms with no CUDA call before the first layer's SDPA launch, the GPU idle: their mean. A host CPU cost; another
# host's may differ. Checked (set nothing): call3/gpu_moe_generate2 newlen, HF generate at new KV lengths less the
# same lengths again, 65.0 / 52.5 / 44.5 ms at batch 1 / 4 / 16 (research/tests/test_h200_dec02c_cudnn.py).
GRAPH_BUILD_S = 42.6e-3


@dataclass(frozen=True)
class TorchStack:
    """The software a case runs under, as far as the SDPA backend choice reads it."""

    torch: tuple[int, int, int] = (2, 11, 0)
    cudnn: int = 91900  # runtime cuDNN as torch.backends.cudnn.version() reports it (9.19.0)
    cuda_major: int = 13  # the CUDA the wheel was built with (cu130)
    cudnn_sdp_enabled: bool = True  # torch.backends.cuda.enable_cudnn_sdp
    deprioritized: bool = False  # TORCH_CUDNN_SDPA_DEPRIORITIZED=1
    deterministic: bool = False  # torch.use_deterministic_algorithms(True) (not warn_only)
    frontend_d256: bool = False  # cudnn_frontend >= 1.24 compiled in (pytorch#185554)


# The stack the planner's H200 measurements ran (every research/results/2026-12-02-h200* folder's versions).
DEFAULT_STACK = TorchStack()

# Compute capability by the words of a device's name (catalog names and user TOMLs built on them).
_CAPABILITY = (
    (r"\bgh?200\b|\bh(100|200|800|20)\b", (9, 0)),
    (r"\bg?b(100|200)\b", (10, 0)),
    (r"\bg?b300\b", (10, 3)),
    (r"\ba(100|800|30)\b", (8, 0)),
    (r"\bl40s?\b|\bl4\b|\b4090\b|\bada\b", (8, 9)),
    (r"\b3090\b|\ba6000\b|\ba10g?\b", (8, 6)),
    (r"\b5090\b", (12, 0)),
    (r"\bt4\b", (7, 5)),
    (r"\bv100\b", (7, 0)),
)


def compute_capability(hw) -> tuple[int, int] | None:
    """(major, minor) of an NVIDIA entry, read from its name and key; None for other vendors or unknown names."""
    if getattr(hw, "vendor", "") != "NVIDIA":
        return None
    text = f"{hw.name} {hw.key}".lower().replace("_", " ").replace("-", " ")
    for pattern, cc in _CAPABILITY:
        if re.search(pattern, text):
            return cc
    return None


def cudnn_first(cc: tuple[int, int] | None, stack: TorchStack = DEFAULT_STACK) -> bool:
    """Whether torch's priority order puts cuDNN first (``check_prefer_cudnn_attention`` and its history)."""
    if cc is None or stack.deprioritized or cc[0] not in (9, 10):
        return False
    if stack.cuda_major < 13 and cc[1] not in (0, 3):
        return False
    if stack.torch[:3] == (2, 5, 0):
        return cc[0] == 9  # 2.5.0: cuDNN first on H100-class devices, reverted in 2.5.1
    return stack.torch[:2] >= (2, 9) and stack.cudnn > 91500


def cudnn_accepts(cc: tuple[int, int] | None, d_qk: int, d_v: int, dtype: str,
                  stack: TorchStack = DEFAULT_STACK) -> bool:
    """``can_use_cudnn_attention``'s checks a dense decode step can fail."""
    if cc is None or not stack.cudnn_sdp_enabled or stack.deterministic or dtype not in ("bf16", "fp16"):
        return False
    if not (8, 0) <= cc <= (12, 1) or stack.cudnn < 90000:
        return False
    sm9x_10x = cc == (9, 0) or cc[0] == 10
    limit_qk = limit_v = 128
    if sm9x_10x and stack.cudnn > 92200 and stack.frontend_d256 and cc != (10, 7):
        limit_qk = limit_v = 256
    elif sm9x_10x and stack.cudnn >= 91100 and (d_qk, d_v) == (192, 128):
        limit_qk = 192
    return d_qk <= limit_qk and d_v <= limit_v and d_qk % 8 == 0 and d_v % 8 == 0


def head_dims(m) -> tuple[int, int]:
    """(d_qk, d_v) of the SDPA call: MLA's nope + rope query/key width and its value width, else head_dim."""
    if m.mla:
        return m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim, m.mla.v_head_dim
    return m.head_dim, m.head_dim


def sdpa_backend(cc, d_qk: int, d_v: int, dtype: str, masked: bool, stack: TorchStack = DEFAULT_STACK) -> str:
    """cudnn | flash | efficient | math: the first of torch's priority order whose checks pass (for the fused
    kernels the checks here are the arch, dtype, head dim and mask ones); n/a off CUDA (``cc`` None)."""
    if cc is None:
        return "n/a"
    if cudnn_first(cc, stack) and cudnn_accepts(cc, d_qk, d_v, dtype, stack):
        return "cudnn"
    half = dtype in ("bf16", "fp16") and (dtype == "fp16" or cc >= (8, 0))
    if not masked and half and (8, 0) <= cc <= (12, 1) and d_qk == d_v <= 256:
        return "flash"
    if (5, 0) <= cc <= (12, 1) and d_qk % 8 == 0 and d_v % 8 == 0 and (dtype != "bf16" or cc >= (8, 0)):
        return "efficient"
    return "math"


# Planner engines whose decode steps each call SDPA eagerly at a new KV length (HF generate over a DynamicCache).
PER_STEP_SHAPE_ENGINES = ("eager",)


@dataclass(frozen=True)
class DecodeAttention:
    backend: str
    per_step_build: bool  # a graph build every decode step of a generate at KV lengths new to the process
    build_s: float  # seconds of one build when on that path, else 0

    @property
    def step_s(self) -> float:
        return self.build_s if self.per_step_build else 0.0


def decode_attention(m, hw, engine: str, compute_dtype: str, *, attn: str = "sdpa",
                     stack: TorchStack = DEFAULT_STACK) -> DecodeAttention:
    """The decode step's SDPA backend for this case and whether each step pays a cuDNN graph build. ``attn``:
    sdpa / gs-gqa (SDPA, the GQA fold too) or eager (matmul + softmax: no SDPA). HF generate passes its attention
    mask to every SDPA call (``masked``); fp8 and int8/int4 weights compute attention in bf16."""
    if attn == "eager":
        return DecodeAttention("none (eager attention)", False, 0.0)
    dtype = "fp16" if compute_dtype == "fp16" else "fp32" if compute_dtype == "fp32" else "bf16"
    d_qk, d_v = head_dims(m)
    backend = sdpa_backend(compute_capability(hw), d_qk, d_v, dtype, masked=True, stack=stack)
    on_path = backend == "cudnn" and engine in PER_STEP_SHAPE_ENGINES
    return DecodeAttention(backend, on_path, GRAPH_BUILD_S if on_path else 0.0)


def cold_line(warm_s: float, build_s: float, cc: tuple[int, int] | None = (9, 0)) -> str:
    """The assumption line of a plan on the per-step build path."""
    arch = f"sm{cc[0]}{cc[1]}" if cc else "this GPU"
    return (f"decode attention: SDPA runs on cuDNN here ({arch}, torch >= 2.10 with cuDNN > 9.15), which builds a "
            f"graph on the host for each new KV length: a generate at lengths this process has not run pays one a "
            f"step, {(warm_s + build_s) * 1e3:.2f} ms/token cold (+{build_s * 1e3:.1f} ms, an H200 host's) vs "
            f"{warm_s * 1e3:.2f} warm; avoid: torch.backends.cuda.enable_cudnn_sdp(False), a warm-up generate over "
            "the same lengths, or --engine hf-graph / graph")
