#!/usr/bin/env bash
# QLoRA fine-tuning on one H200: `gpuscope bench train --qlora --lora-r 16` (bitsandbytes NF4 with double
# quantization, bf16 compute, on a random-weight base; peft adapters fp32; the estimate beside each run), the shapes
# the QLoRA planner (estimate/lora_memory.py, estimate/lora_train.py) is held to:
#   Llama-3.1-8B QLoRA r16 all-linear, micro-batch 1 x 2048 with gradient checkpointing;
#   Llama-3.1-8B QLoRA r16 all-linear, micro-batch 1 x 2048 without (what bitsandbytes' MatMul4Bit saves).
# usage (repo root, on the GPU machine, bitsandbytes installed): bash research/scripts/gpu_qlora.sh -> $OUT/gpu_qlora.tgz
#        on a CPU, to check the script: OUT=/tmp/o bash research/scripts/gpu_qlora.sh --cpu   (a tiny Llama config)
# Budget: 120 s in all (two steps bounded by timeout: 55 + 50 s; a LoRA 8B run took 25-32 s on the H200 of
# research/results/2026-12-01-h200; 4 timed steps after 1 warm-up each), plus the
# planner's own estimate of each shape (`plan train --json`, a second each, no GPU).
set -u
W=/tmp/gs_qlora; mkdir -p "$W"
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_qlora.sqlite GPUSCOPE_HOME=$W/home
BUNDLE=gpu_qlora.tgz
source "$(dirname "$0")/session_lib.sh"
MODEL=llama-3.1-8b; SEQ=2048; DEV=(); LIMITS=(55 50)
if [[ "${1:-}" == "--cpu" ]]; then  # the script's own check: a tiny random Llama on the CPU
  python3 -c "import json, sys; sys.path.insert(0, 'src'); from gpuscope.workloads.sets import TINY_LLAMA as T; \
json.dump(T, open('$W/tiny_llama.json', 'w'))"
  MODEL=$W/tiny_llama.json; SEQ=64; DEV=(--device cpu); LIMITS=(120 120)
else
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv > "$W/nvidia-smi.csv"
fi
python3 -c "import bitsandbytes, peft, transformers, torch; print(bitsandbytes.__version__, peft.__version__, \
transformers.__version__, torch.__version__)" > "$W/versions.txt" 2>&1 \
  || { echo "bitsandbytes or peft is not importable: install their wheels first" | tee -a "$W/steps.txt"; \
       tar czf "$OUT/$BUNDLE" -C "$W" .; exit 1; }
SHAPE=(--model "$MODEL" --micro-batch 1 --seq "$SEQ" --precision amp-bf16 --lora-r 16 --qlora)
RUN=(python3 -m gpuscope bench train --gpu h200 --steps 4 --warmup 1 --json --db "$GPUSCOPE_DB" "${DEV[@]}")
PLAN=(python3 -m gpuscope plan train --gpu h200 --json "${SHAPE[@]}")
"${PLAN[@]}" --recompute full > "$W/plan_qlora_8b_r16_mb1_ckpt.json" 2>&1
"${PLAN[@]}" > "$W/plan_qlora_8b_r16_mb1.json" 2>&1
step qlora_8b_r16_mb1_ckpt "${LIMITS[0]}" "${RUN[@]}" "${SHAPE[@]}" --recompute full
step qlora_8b_r16_mb1 "${LIMITS[1]}" "${RUN[@]}" "${SHAPE[@]}"
