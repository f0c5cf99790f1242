#!/usr/bin/env bash
# LoRA r16 on all linear layers of Llama-3.1-8B at micro-batch 4 x 2048 WITHOUT gradient checkpointing, on one H200
# (issue 20): `gpuscope bench train` (peft on a random-weight bf16 base, amp-bf16, torch AdamW on the fp32
# adapters; the estimate beside the run). The step research/scripts/gpu_qlora2.sh ran last in
# research/results/2026-12-02-h200-c/call1 and cut at 28 s (the model's build, 1 warm-up and 4 timed steps at about
# 0.8 s did not finish in it); its QLoRA twin is research/results/2026-12-02-h200-b/qlora.md's mb4 no-checkpointing row.
# usage (repo root, on the GPU machine, peft importable from src/): bash research/scripts/gpu_lora3.sh
#   -> $OUT/gpu_lora3/gpu_lora3.tgz (the bench store, the step's command line, stdout and stderr, lora3.jsonl
#      exported from the store, nvidia-smi and versions) and $OUT/gpu_lora3/steps.txt
#   on a CPU, to check the script: OUT=/tmp/o bash research/scripts/gpu_lora3.sh --tiny   (a tiny Llama, seq 64)
# Budget: 60 s (GS_LORA3_BUDGET). The step runs under `timeout` with what is left of it less 4 s for the export.
set -u
W=/tmp/gs_lora3; rm -rf "$W"; mkdir -p "$W" "$OUT/gpu_lora3"
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_lora3.sqlite GPUSCOPE_HOME=$W/home
BUNDLE=gpu_lora3/gpu_lora3.tgz
source "$(dirname "$0")/session_lib.sh"
T0=$(date +%s); BUDGET=${GS_LORA3_BUDGET:-60}
MODEL=llama-3.1-8b; SEQ=2048; DEV=()
if [[ "${1:-}" == "--tiny" || "${1:-}" == "--cpu" ]]; then  # the script's own check: a tiny random Llama on the CPU
  python3 -c "import json, sys; sys.path.insert(0, 'src'); from gpuscope.workloads.sets import TINY_LLAMA as T; \
json.dump(T, open('$W/tiny_llama.json', 'w'))"
  MODEL=$W/tiny_llama.json; SEQ=64; DEV=(--device cpu); BUDGET=300
else
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv > "$W/nvidia-smi.csv"
fi
python3 -c "import peft, transformers, torch; print(peft.__version__, transformers.__version__, torch.__version__)" \
  > "$W/versions.txt" 2>&1 \
  || { echo "peft is not importable: install its wheel first" | tee -a "$W/steps.txt"; \
       tar czf "$OUT/$BUNDLE" -C "$W" .; cp "$W/steps.txt" "$OUT/gpu_lora3/"; exit 1; }
LIMIT=$(( BUDGET - ($(date +%s) - T0) - 4 ))
RUN=(python3 -m gpuscope bench train --gpu h200 --steps 4 --warmup 1 --json --db "$GPUSCOPE_DB" "${DEV[@]}"
     --model "$MODEL" --micro-batch 4 --seq "$SEQ" --precision amp-bf16 --lora-r 16 --timeout $(( LIMIT - 2 )))
printf '%q ' timeout "$LIMIT" "${RUN[@]}" > "$W/lora_8b_r16_mb4.cmd"; echo >> "$W/lora_8b_r16_mb4.cmd"
step lora_8b_r16_mb4 "$LIMIT" "${RUN[@]}"
# the measurement as gpuscope.measurement/1 records (as research/results/2026-12-02-h200/qlora.jsonl), one a line
timeout 10 python3 -c "
import json
from gpuscope.store.db import Store
with open('$W/lora3.jsonl', 'w') as f:
    for r in Store.open('$GPUSCOPE_DB').all('train'):
        f.write(json.dumps({'schema': 'gpuscope.measurement/1', 'case_id': r['key'], 'case': r['config'],
                            'result': r['result'], 'provenance': r['provenance'], 'run_id': r['run_id']}) + '\n')
" > "$W/export.out" 2>&1; echo "export rc=$? total $(( $(date +%s) - T0 )) s" | tee -a "$W/steps.txt"
tar czf "$OUT/$BUNDLE" -C "$W" . ; cp "$W/steps.txt" "$OUT/gpu_lora3/steps.txt"
