#!/usr/bin/env bash
# Diffusion on one H200, the third set (after research/results/2026-12-02-h200-b/diffusion.md and
# research/results/2026-12-02-h200-c/diffusion.md): an independent check of the norm / elementwise / convolution
# re-split (GroupNorm's moments kernel at one block per (image, group) row, the non-vectorized TensorIterator path,
# convolutions priced from their own kernels), at sizes none of its constants was set on. All through
# `gpuscope bench diffusion` (diffusers modules with random weights from the presets' configs, fp16, the planner's
# estimate on h200 beside each point), each with --profile (torch.profiler: device busy time, top 25 kernels):
#   SVD-XT UNet at 20 frames of 576x1024, CFG (the re-split was set on 14 frames; 25 frames has no kernel table):
#     its temporal GroupNorms see 64 rows of 20 frames each, its spatial ones 1,280 rows (2.4 waves of 528);
#   SDXL VAE decode at 768x768, batch 2 (set on batch 1 at 1024: 32 rows; here 64, the rate per row should double);
#   SDXL UNet at 768x768, batch 1, CFG (no SDXL UNet kernel table exists yet: its convolutions, norms at 64 rows);
#   SDXL VAE decode at 1024x1024 in fp32 (what SDXL's force_upcast runs inside the pipeline: 122.1 ms measured in
#     the first set, no kernel table; the re-split plans it far longer): GroupNorm's moments at 4-byte elements,
#     TF32 convolutions and the wide-head attention's fp32 kernel, cut at its limit if the others ran long.
#   alloc (call 3, asked by name): model offload's allocator cost without the pipeline: the SDXL UNet (random
#     weights, fp16, 1,680 tensors, 5.13 GB) moved out and back in with PyTorch's cache kept, then out, the cache
#     emptied (what accelerate's CpuOffload.pre_forward does between two modules) and in again; each move timed
#     around a synchronize, three rounds (alloc_probe.json): a cudaFree / cudaMalloc per tensor is what
#     estimate/diffusion/offload.ALLOC_LAUNCHES prices (10.7 launches of 45.05 us = 0.48 ms a tensor, set by the
#     model-offload pipeline's denoising phase, research/results/2026-12-02-h200-c/diffusion.md).
# Each step bounded by timeout (the bench's own --timeout a few seconds inside it, so a stalled point is stored as a
# timeout); results (one SQLite database, each step's --json, its command line) bundled into
# $OUT/gpu_diffusion3/gpu_diffusion3.tgz after every step.
# usage (repo root, on the GPU machine, diffusers installed): bash research/scripts/gpu_diffusion3.sh [STEP ...]
#        (STEP: svd vae unet vae32 alloc; default: svd vae unet vae32; call 3: `vae32 alloc`, 30 + 40 s)
#        on a CPU, to check the script: OUT=/tmp/o bash research/scripts/gpu_diffusion3.sh --tiny   (tiny folders)
# Budget: 120 s in all (34 + 26 + 28 + 30 s), imports and model builds included (the second set's steps took
# 18-26 s, most of it before the first point).
set -u
: "${OUT:?set OUT to the results folder}"
W=/tmp/gs_diffusion3; rm -rf "$W"; mkdir -p "$W" "$OUT/gpu_diffusion3"
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_diffusion3.sqlite GPUSCOPE_HOME=$W/home
BUNDLE=gpu_diffusion3/gpu_diffusion3.tgz
source "$(dirname "$0")/session_lib.sh"
SDXL=sdxl; SVD=svd-xt; S=768; S32=1024; SVD_H=576; SVD_W=1024; FRAMES=20; DEV=(); DT=fp16
LIMITS=(34 26 28 30 40); TINY=0; [[ "${1:-}" == "--tiny" ]] && { TINY=1; shift; }
GROUPS_WANTED="${*:-svd vae unet vae32}"
if [[ $TINY == 1 ]]; then  # the script's own check: tiny random folders on the CPU, fp32, tiny sizes
  python3 tests/diffusion_tiny.py "$W/tiny" > /dev/null
  SDXL=$W/tiny/tiny-sdxl; SVD=$W/tiny/tiny-svd; S=32; S32=32; SVD_H=16; SVD_W=32; FRAMES=4
  DEV=(--device cpu); DT=fp32; LIMITS=(90 60 60 60 60)
else
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv \
    > "$W/nvidia-smi.csv" 2>&1
fi
python3 -c "import diffusers, transformers, torch; print(diffusers.__version__, transformers.__version__, \
torch.__version__)" > "$W/versions.txt" 2>&1 \
  || { echo "diffusers not importable: install the wheels first" | tee -a "$W/steps.txt"; \
       tar czf "$OUT/$BUNDLE" -C "$W" .; exit 1; }
RUN=(python3 -m gpuscope bench diffusion --gpu h200 --json --db "$GPUSCOPE_DB" ${DEV[@]+"${DEV[@]}"})
# run NAME LIMIT ARGS...: one bench step, its command line written beside its output
run() { local name=$1 limit=$2; shift 2
  echo "timeout $limit ${RUN[*]} $* --timeout $((limit - 4))" > "$W/$name.cmd"
  step "$name" "$limit" "${RUN[@]}" "$@" --timeout $((limit - 4)); }
if want svd; then run svd_unet20_profile "${LIMITS[0]}" --model "$SVD" --component denoiser --batch 1 \
  --height "$SVD_H" --width "$SVD_W" --frames "$FRAMES" --cfg --repeats 2 --warmup 1 --profile --dtype "$DT"; fi
if want vae; then run sdxl_vae768_b2_profile "${LIMITS[1]}" --model "$SDXL" --component vae-decode --batch 2 \
  --height "$S" --width "$S" --repeats 3 --warmup 1 --profile --dtype "$DT"; fi
if want unet; then run sdxl_unet768_profile "${LIMITS[2]}" --model "$SDXL" --component denoiser --batch 1 \
  --height "$S" --width "$S" --cfg --repeats 3 --warmup 1 --profile --dtype "$DT"; fi
if want vae32; then run sdxl_vae1024_fp32_profile "${LIMITS[3]}" --model "$SDXL" --component vae-decode --batch 1 \
  --height "$S32" --width "$S32" --repeats 3 --warmup 1 --profile --dtype fp32; fi
if want alloc; then  # the script's own python: SDXL's UNet moved with the cache kept, then after empty_cache
  echo "timeout ${LIMITS[4]} python3 - $SDXL $DT (alloc probe, inline in gpu_diffusion3.sh)" > "$W/alloc_probe.cmd"
  step alloc_probe "${LIMITS[4]}" python3 - "$SDXL" "$DT" <<'PY'
import json, sys, time
from pathlib import Path

import torch

from gpuscope.measure.diffusion import build as b
from gpuscope.specs.diffusion import PRESET_DIR, load_pipeline

arg, dt = sys.argv[1], sys.argv[2]
folder = Path(arg) if Path(arg).is_dir() else PRESET_DIR / load_pipeline(arg).name
cuda = torch.cuda.is_available()
dev = torch.device("cuda" if cuda else "cpu")
sync = torch.cuda.synchronize if cuda else (lambda: None)
empty = torch.cuda.empty_cache if cuda else (lambda: None)
m = b.build(folder, "unet", dev, getattr(torch, {"fp16": "float16", "fp32": "float32"}[dt]))
out = {"tensors": len(list(m.parameters())), "bytes": b.param_bytes(m), "device": str(dev), "rounds": []}


def timed(fn) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


for _ in range(3):
    r = {"d2h_cache_kept_s": timed(lambda: m.to("cpu")), "h2d_cached_blocks_s": timed(lambda: m.to(dev)),
         "d2h_s": timed(lambda: m.to("cpu")), "empty_cache_s": timed(empty), "h2d_fresh_blocks_s": timed(lambda: m.to(dev))}
    r["alloc_per_tensor_s"] = (r["h2d_fresh_blocks_s"] - r["h2d_cached_blocks_s"]) / out["tensors"]
    r["free_per_tensor_s"] = r["empty_cache_s"] / out["tensors"]
    out["rounds"].append(r)
print(json.dumps(out, indent=1))
PY
  cp "$W/alloc_probe.out" "$W/alloc_probe.json" 2>/dev/null; tar czf "$OUT/$BUNDLE" -C "$W" .
fi
exit 0
