"""plan diffusion against MLPerf Inference v4.1's SDXL Offline result on 8x H200 (NVIDIA, closed division): the
planned images/s of one H200 within 20% of the published samples/s over 8
(research/tests/published/mlperf_inference_v41_sdxl_h200.toml says where the number comes from).

Assumed, and nothing fitted to this result:
- the benchmark's call: SDXL base at 1024x1024, 20 Euler steps, classifier-free guidance (the UNet sees 2 x 32 = 64
  latents per step, the submission's unet batch size);
- precision: the submission's UNet "FP8-FP16" taken as its GEMMs and convolutions in fp8 at the H200 catalog's fp8
  ceiling, its attention and elementwise kernels in fp16; the text encoders in fp16; the VAE (INT8-FP32 in the
  submission) planned in fp16 (no fp32 upcast), which the planner has no int8 path for;
- the planner's eager-kernel model: every elementwise kernel's traffic counted separately (TensorRT fuses many of
  them), the host launch floor negligible at this batch; the VAE decodes the 32 images at once (the submission: 8).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuscope.estimate.diffusion import DiffusionRequest, plan_diffusion
from gpuscope.specs.hardware import load_hardware

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = tomllib.loads((Path(__file__).parent / "published" / "mlperf_inference_v41_sdxl_h200.toml").read_text())


def test_mlperf_sdxl_offline_per_h200():
    req = DiffusionRequest(model=DATA["model"], batch=DATA["batch"], steps=DATA["steps"], height=DATA["height"],
                           width=DATA["width"], cfg=True, dtype=DATA["dtype"])
    plan = plan_diffusion(req, load_hardware(DATA["gpu"]), limits=False).to_json()
    assert plan["fits"] and plan["inputs"]["denoiser_batch"] == 64
    got = plan["throughput"]["images_per_s"]
    published = DATA["samples_per_s"] / DATA["gpus"]
    assert abs(got / published - 1) <= DATA["tolerance"], f"planned {got:.3f}/s, published {published:.3f}/s"
