#!/usr/bin/env bash
# Diffusion on one H200: `gpuscope bench diffusion` (diffusers modules with random weights from the presets'
# configs, fp16, the planner's estimate on h200 beside each point), what issue 25's "done" asks for:
#   SDXL VAE decode at 1024x1024, batch 1;
#   SDXL UNet one step at 512 and 1024 for batches 1, 2, 4, 8 with CFG (the UNet sees 2B), one process for the
#   eight points, each also profiled once for the device's busy time (the launch-bound evidence);
#   SVD-XT UNet one step at 14 and 25 frames of 576x1024, batch 1 with CFG;
#   the full SDXL pipeline (text encoders, 30 steps through EulerDiscreteScheduler, VAE decode) at 1024, batch 1.
# Cheapest first; each step bounded by timeout; results (one SQLite database, each step's --json) bundled into
# $OUT/gpu_diffusion.tgz after every step.
# usage (repo root, on the GPU machine, diffusers installed): bash research/scripts/gpu_diffusion.sh
#        on a CPU, to check the script: OUT=/tmp/o bash research/scripts/gpu_diffusion.sh --cpu   (tiny folders)
# Budget: 290 s in all (50 + 90 + 70 + 80 s), model builds and imports included (the planner: ~35-250 ms a UNet
# step, 0.3-0.5 s an SVD step, 1.2 s the pipeline).
set -u
W=/tmp/gs_diffusion; mkdir -p "$W"
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_diffusion.sqlite GPUSCOPE_HOME=$W/home
BUNDLE=gpu_diffusion.tgz
source "$(dirname "$0")/session_lib.sh"
SDXL=sdxl; SVD=svd-xt; S512=512; S1024=1024; SVD_H=576; SVD_W=1024; FRAMES=14,25; DEV=(--dtype fp16)
LIMITS=(50 90 70 80)
if [[ "${1:-}" == "--cpu" ]]; then  # the script's own check: tiny random folders on the CPU, fp32, tiny sizes
  python3 tests/diffusion_tiny.py "$W/tiny" > /dev/null
  SDXL=$W/tiny/tiny-sdxl; SVD=$W/tiny/tiny-svd; S512=16; S1024=32; SVD_H=16; SVD_W=32; FRAMES=2,4
  DEV=(--dtype fp32 --device cpu); LIMITS=(120 240 120 120)
else
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv > "$W/nvidia-smi.csv"
fi
python3 -c "import diffusers, transformers, torch; print(diffusers.__version__, transformers.__version__, \
torch.__version__)" > "$W/versions.txt" 2>&1 \
  || { echo "diffusers is not importable: install its wheel first" | tee -a "$W/steps.txt"; \
       tar czf "$OUT/$BUNDLE" -C "$W" .; exit 1; }
RUN=(python3 -m gpuscope bench diffusion --gpu h200 --json --db "$GPUSCOPE_DB" "${DEV[@]}")
step sdxl_vae_1024 "${LIMITS[0]}" "${RUN[@]}" --model "$SDXL" --component vae-decode --batch 1 \
  --height "$S1024" --width "$S1024" --repeats 5 --warmup 2
step sdxl_unet_sweep "${LIMITS[1]}" "${RUN[@]}" --model "$SDXL" --component denoiser --batch 1,2,4,8 \
  --height "$S512,$S1024" --width "$S512,$S1024" --cfg --repeats 5 --warmup 2 --profile
step svd_unet_frames "${LIMITS[2]}" "${RUN[@]}" --model "$SVD" --component denoiser --batch 1 \
  --height "$SVD_H" --width "$SVD_W" --frames "$FRAMES" --cfg --repeats 3 --warmup 1 --profile
step sdxl_pipeline_30 "${LIMITS[3]}" "${RUN[@]}" --model "$SDXL" --component pipeline --batch 1 \
  --height "$S1024" --width "$S1024" --steps 30 --cfg --repeats 2 --warmup 1
