#!/usr/bin/env bash
# LoRA fine-tuning on one H200: `gpuscope bench train --lora-r ...` (peft on a random-weight base, the estimate
# beside each run), the configurations the LoRA planner is held to (estimate/lora_train.py):
#   Llama-3.1-8B r16 all-linear, micro-batch 4 x 2048 with checkpointing, and micro-batch 1 x 2048 without;
#   Llama-3.1-8B r64 on q_proj,k_proj,v_proj,o_proj, micro-batch 1 x 2048;
#   Qwen2.5-32B r16 all-linear, micro-batch 1 x 2048 with checkpointing.
# usage (repo root, on the GPU machine): bash research/scripts/gpu_lora.sh   -> $OUT/gpu_lora.tgz
# Needs peft importable next to torch and transformers (a pure-Python wheel). QLoRA is not measured (bitsandbytes).
# Bounded to under 8 minutes: 4 steps after 1 warm-up each, every step under its own timeout (460 s in all).
set -u
W=/tmp/gs_lora; mkdir -p $W
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_lora.sqlite GPUSCOPE_HOME=$W/home
BUNDLE=gpu_lora.tgz
source "$(dirname "$0")/session_lib.sh"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv > "$W/nvidia-smi.csv"
python3 -c "import peft, transformers, torch; print(peft.__version__, transformers.__version__, torch.__version__)" \
  > "$W/versions.txt" 2>&1 || { echo "peft is not importable: install its wheel first" | tee -a "$W/steps.txt"; tar czf "$OUT/$BUNDLE" -C "$W" .; exit 1; }
RUN=(python3 -m gpuscope bench train --gpu h200 --steps 4 --warmup 1 --json)
step lora_8b_r16_mb4_ckpt 110 "${RUN[@]}" --model llama-3.1-8b --micro-batch 4 --seq 2048 --recompute full --lora-r 16
step lora_8b_r16_mb1 90 "${RUN[@]}" --model llama-3.1-8b --micro-batch 1 --seq 2048 --lora-r 16
step lora_8b_r64_attn 90 "${RUN[@]}" --model llama-3.1-8b --micro-batch 1 --seq 2048 --lora-r 64 \
  --lora-targets q_proj,k_proj,v_proj,o_proj
step lora_32b_r16_ckpt 170 "${RUN[@]}" --model qwen2.5-32b --micro-batch 1 --seq 2048 --recompute full --lora-r 16
