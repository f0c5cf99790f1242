#!/usr/bin/env bash
# Diffusion on one H200, the second set (after research/results/2026-12-02-h200/diffusion.md): what that run left
# unmeasured or unexplained, all through `gpuscope bench diffusion` (diffusers modules with random weights from the
# presets' configs, fp16, the planner's estimate on h200 beside each point):
#   SDXL pipeline at 1024x1024 with model CPU offload (4 steps) and with sequential offload (2 steps: every layer's
#     weights cross the host link at every step), batch 1, CFG; the model-offload point also times the UNet moved in
#     and out once (offload_h2d_gbs / offload_d2h_gbs: the pageable host link the hooks use);
#   kernel tables (--profile: torch.profiler, top 25 kernels by device time, top host ops) of the SVD-XT UNet at 14
#     frames of 576x1024 (planned -15%) and the SDXL VAE decode at 1024 (its wide-head attention was attributed by
#     elimination);
#   SDXL's text encoders at batch 1 (planned +29% on the run host): each encoder's time and host issue time, both
#     run back to back as the pipeline does (text_encode_together_s), and a profile of each (kernel count, device
#     busy/idle, host ops: whether it is launch cost, the encoders' order, or an fp32 op).
# Each step bounded by timeout (the bench's own --timeout a few seconds inside it, so a stalled point is stored as a
# timeout); results (one SQLite database, each step's --json, its command line) bundled into $OUT/gpu_diffusion2.tgz
# after every step.
# usage (repo root, on the GPU machine, diffusers installed): bash research/scripts/gpu_diffusion2.sh [STEP ...]
#        (STEP: offload_model offload_sequential svd vae text; default all)
#        on a CPU, to check the script: OUT=/tmp/o bash research/scripts/gpu_diffusion2.sh --tiny   (tiny folders)
# Budget: 160 s in all (38 + 40 + 32 + 25 + 25 s), imports and model builds included (call1's steps took 20-26 s
# before their first point). That first run (2026-12-02-h200-b/call1) stopped model offload at 34 s and the VAE
# profile at 21 s; their rerun, `bash research/scripts/gpu_diffusion2.sh offload_model vae`, gives them 50 + 30 s
# (model offload: 2 steps, one warm-up and one timed call, each moving 7.1 GB in from pageable memory and out).
set -u
: "${OUT:?set OUT to the results folder}"
W=/tmp/gs_diffusion2; rm -rf "$W"; mkdir -p "$W" "$OUT/gpu_diffusion2"
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_diffusion2.sqlite GPUSCOPE_HOME=$W/home
BUNDLE=gpu_diffusion2/gpu_diffusion2.tgz
source "$(dirname "$0")/session_lib.sh"
SDXL=sdxl; SVD=svd-xt; S=1024; SVD_H=576; SVD_W=1024; FRAMES=14; DEV=(--dtype fp16)
LIMITS=(38 40 32 25 25); TINY=0; [[ "${1:-}" == "--tiny" ]] && { TINY=1; shift; }
GROUPS_WANTED="${*:-offload_model offload_sequential svd vae text}"
MODEL_REPEATS=2; MODEL_STEPS=4; MODEL_WARMUP=${GS_MODEL_WARMUP:-1}  # GS_MODEL_*: another run (e.g. the steady state: GS_MODEL_WARMUP=2)
if [[ $# -gt 0 ]]; then LIMITS=(50 40 32 30 25); MODEL_REPEATS=1; MODEL_STEPS=2; fi  # a rerun: what call1 showed
MODEL_REPEATS=${GS_MODEL_REPEATS:-$MODEL_REPEATS}; MODEL_STEPS=${GS_MODEL_STEPS:-$MODEL_STEPS}
[[ -n "${GS_MODEL_LIMIT:-}" && $TINY == 0 ]] && LIMITS[0]=$GS_MODEL_LIMIT
if [[ $TINY == 1 ]]; then  # the script's own check: tiny random folders on the CPU, fp32, tiny sizes
  python3 tests/diffusion_tiny.py "$W/tiny" > /dev/null
  SDXL=$W/tiny/tiny-sdxl; SVD=$W/tiny/tiny-svd; S=32; SVD_H=16; SVD_W=32; FRAMES=4
  DEV=(--dtype fp32 --device cpu); LIMITS=(90 90 90 60 60)
else
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,\
pcie.link.width.current --format=csv > "$W/nvidia-smi.csv" 2>&1
fi
python3 -c "import diffusers, transformers, torch, accelerate; print(diffusers.__version__, transformers.__version__, \
torch.__version__, accelerate.__version__)" > "$W/versions.txt" 2>&1 \
  || { echo "diffusers/accelerate not importable: install the wheels first" | tee -a "$W/steps.txt"; \
       tar czf "$OUT/$BUNDLE" -C "$W" .; exit 1; }
RUN=(python3 -m gpuscope bench diffusion --gpu h200 --json --db "$GPUSCOPE_DB" "${DEV[@]}")
# run NAME LIMIT ARGS...: one bench step, its command line written beside its output
run() { local name=$1 limit=$2; shift 2
  echo "timeout $limit ${RUN[*]} $* --timeout $((limit - 4))" > "$W/$name.cmd"
  step "$name" "$limit" "${RUN[@]}" "$@" --timeout $((limit - 4)); }
want offload_model && run sdxl_offload_model "${LIMITS[0]}" --model "$SDXL" --component pipeline --batch 1 --height "$S" --width "$S" \
  --steps "$MODEL_STEPS" --cfg --offload model --repeats "$MODEL_REPEATS" --warmup "$MODEL_WARMUP"
want offload_sequential && run sdxl_offload_sequential "${LIMITS[1]}" --model "$SDXL" --component pipeline --batch 1 --height "$S" \
  --width "$S" --steps 2 --cfg --offload sequential --repeats 1 --warmup 1
want svd && run svd_unet14_profile "${LIMITS[2]}" --model "$SVD" --component denoiser --batch 1 --height "$SVD_H" \
  --width "$SVD_W" --frames "$FRAMES" --cfg --repeats 2 --warmup 1 --profile
want vae && run sdxl_vae_profile "${LIMITS[3]}" --model "$SDXL" --component vae-decode --batch 1 --height "$S" --width "$S" \
  --repeats 3 --warmup 1 --profile
want text && run sdxl_text_profile "${LIMITS[4]}" --model "$SDXL" --component text-encoders --batch 1 --repeats 5 --warmup 2 \
  --profile
