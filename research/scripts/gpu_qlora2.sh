#!/usr/bin/env bash
# QLoRA and LoRA where the GPU, not the host, sets the step, on one H200 (issue 20), and where QLoRA's backward host
# time goes. `gpuscope bench train` (peft on a random-weight base; bitsandbytes NF4 with double quantization, bf16
# compute, under --qlora; the estimate beside each run), Llama-3.1-8B at micro-batch 4 x 2048, amp-bf16:
#   1 qlora_8b_r16_mb4_ckpt       QLoRA r16 all-linear, gradient checkpointing (plan: 1.055 s, LoRA's 1.139 s)
#   2 qlora_8b_r16_mb4            QLoRA r16 all-linear, no checkpointing        (plan: 0.744 s, LoRA's 0.806 s)
#   3 trace                       research/scripts/gpu_qlora2_trace.py: per-Linear host time of forward and backward
#                                 for bf16 / NF4 / LoRA / QLoRA layers (1 and 3 decoder layers of Llama-3.1-8B,
#                                 mb1 x 2048), MatMul4Bit.backward's own time, torch.profiler tables and a trace
#   4 lora_8b_r64_attn_mb4_ckpt   LoRA r64 on q,k,v,o_proj, gradient checkpointing (the issue's r64 case at mb4)
#   5 lora_8b_r16_mb4             LoRA r16 all-linear, no checkpointing (QLoRA's step 2 beside it; LoRA mb4 with
#                                 checkpointing is research/results/2026-12-01-h200's, 1.049 s)
# usage (repo root, on the GPU machine, bitsandbytes importable from src/): bash research/scripts/gpu_qlora2.sh
#   -> $OUT/gpu_qlora2/gpu_qlora2.tgz (everything: bench stores, each step's command line, stdout and stderr,
#      qlora2.jsonl exported from the store, the trace's tables) and $OUT/gpu_qlora2/steps.txt
#   on a CPU, to check the script: OUT=/tmp/o bash research/scripts/gpu_qlora2.sh --tiny   (a tiny Llama, seq 64)
# A follow-up for the LoRA steps alone (80 s): GS_QLORA2_ONLY="lora_8b_r64_attn_mb4_ckpt lora_8b_r16_mb4"
#   GS_QLORA2_BUDGET=80 bash research/scripts/gpu_qlora2.sh
# Budget: 140 s in all. Each step runs under `timeout` with min(its cap, what is left of the 140 s less 4 s for the
# export); a step with under 12 s left is skipped and says so. Caps 42, 36, 30, 34, 34 s (the QLoRA mb1 runs of
# research/results/2026-12-02-h200 took 25-34 s, most of it the model's build: 4 timed steps after 1 warm-up).
set -u
W=/tmp/gs_qlora2; rm -rf "$W"; mkdir -p "$W" "$OUT/gpu_qlora2"
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_qlora2.sqlite GPUSCOPE_HOME=$W/home
BUNDLE=gpu_qlora2/gpu_qlora2.tgz
source "$(dirname "$0")/session_lib.sh"
T0=$(date +%s); BUDGET=${GS_QLORA2_BUDGET:-140}
MODEL=llama-3.1-8b; SEQ=2048; DEV=(); TINY=(); CAPS=(42 36 30 34 34)
if [[ "${1:-}" == "--tiny" || "${1:-}" == "--cpu" ]]; then  # the script's own check: a tiny random Llama on the CPU
  python3 -c "import json, sys; sys.path.insert(0, 'src'); from gpuscope.workloads.sets import TINY_LLAMA as T; \
json.dump(T, open('$W/tiny_llama.json', 'w'))"
  MODEL=$W/tiny_llama.json; SEQ=64; DEV=(--device cpu); TINY=(--tiny --iters 3 --warmup 1); BUDGET=600
  CAPS=(120 120 240 120 120)
else
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv > "$W/nvidia-smi.csv"
fi
python3 -c "import bitsandbytes, peft, transformers, torch; print(bitsandbytes.__version__, peft.__version__, \
transformers.__version__, torch.__version__)" > "$W/versions.txt" 2>&1 \
  || { echo "bitsandbytes or peft is not importable: install their wheels first" | tee -a "$W/steps.txt"; \
       tar czf "$OUT/$BUNDLE" -C "$W" .; cp "$W/steps.txt" "$OUT/gpu_qlora2/"; exit 1; }
# bstep NAME CAP CMD...: session_lib's step under min(CAP, the budget's rest less 4 s), its command line in NAME.cmd
# GS_QLORA2_ONLY="NAME ...": run only those steps (a follow-up call for the ones a call left out)
bstep() { local name=$1 cap=$2; shift 2; local left=$(( BUDGET - ($(date +%s) - T0) - 4 ))
  [[ -n "${GS_QLORA2_ONLY:-}" && " $GS_QLORA2_ONLY " != *" $name "* ]] && return
  (( left < 12 )) && { echo "$name skipped: ${left} s left of ${BUDGET}" | tee -a "$W/steps.txt"; return; }
  local limit=$(( cap < left ? cap : left )); printf '%q ' timeout "$limit" "$@" > "$W/$name.cmd"; echo >> "$W/$name.cmd"
  step "$name" "$limit" "$@"; }
RUN=(python3 -m gpuscope bench train --gpu h200 --steps 4 --warmup 1 --json --db "$GPUSCOPE_DB" "${DEV[@]}"
     --model "$MODEL" --micro-batch 4 --seq "$SEQ" --precision amp-bf16)
bstep qlora_8b_r16_mb4_ckpt "${CAPS[0]}" "${RUN[@]}" --lora-r 16 --qlora --recompute full --timeout $(( CAPS[0] - 3 ))
bstep qlora_8b_r16_mb4 "${CAPS[1]}" "${RUN[@]}" --lora-r 16 --qlora --timeout $(( CAPS[1] - 3 ))
bstep trace "${CAPS[2]}" python3 research/scripts/gpu_qlora2_trace.py --out "$W/trace" "${TINY[@]}"
bstep lora_8b_r64_attn_mb4_ckpt "${CAPS[3]}" "${RUN[@]}" --lora-r 64 --lora-targets q_proj,k_proj,v_proj,o_proj \
  --recompute full --timeout $(( CAPS[3] - 3 ))
bstep lora_8b_r16_mb4 "${CAPS[4]}" "${RUN[@]}" --lora-r 16 --timeout $(( CAPS[4] - 3 ))
# the measurements as gpuscope.measurement/1 records (as research/results/2026-12-02-h200/qlora.jsonl), one a line
timeout 10 python3 -c "
import json, sys
from gpuscope.store.db import Store
with open('$W/qlora2.jsonl', 'w') as f:
    for r in Store.open('$GPUSCOPE_DB').all('train'):
        f.write(json.dumps({'schema': 'gpuscope.measurement/1', 'case_id': r['key'], 'case': r['config'],
                            'result': r['result'], 'provenance': r['provenance'], 'run_id': r['run_id']}) + '\n')
" > "$W/export.out" 2>&1; echo "export rc=$? total $(( $(date +%s) - T0 )) s" | tee -a "$W/steps.txt"
tar czf "$OUT/$BUNDLE" -C "$W" . ; cp "$W/steps.txt" "$OUT/gpu_qlora2/steps.txt"
