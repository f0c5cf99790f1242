#!/usr/bin/env bash
# Issue 26 items 4 (MoE prefill), 3 (plain generate's host per step by batch) and 2 (32B graph-unfused decode at
# batch 16) on one GPU: research/scripts/gpu_moe_generate.py, one part per process, each under its own timeout.
# usage (repo root, on the GPU machine): bash research/scripts/gpu_moe_generate.sh   -> $OUT/gpu_moe_generate/
# CPU check (tiny models, same code):    bash research/scripts/gpu_moe_generate.sh --tiny
# Budget: 170 s in all (timeouts 60 + 60 + 45 s; each part starts no new case past its --budget-s).
set -u
OUT=${OUT:-/tmp/gs_moe_generate}; D=$OUT/gpu_moe_generate; mkdir -p "$D"
export OUT PYTHONPATH=src
TINY=(); [[ "${1:-}" == "--tiny" ]] && TINY=(--tiny)
{ python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv
} > "$D/versions.txt" 2>&1
run() {  # run NAME TIMEOUT ARGS...: the command line beside its output, and its exit status
  local name=$1 t=$2; shift 2
  echo "timeout $t python3 research/scripts/gpu_moe_generate.py $*" > "$D/$name.cmdline"
  timeout "$t" python3 research/scripts/gpu_moe_generate.py "$@" > "$D/$name.out" 2>&1
  echo "exit $?" >> "$D/$name.cmdline"
}
run moe 60 --part moe --budget-s 40 "${TINY[@]}"
run host 60 --part host --budget-s 40 --gen 12 "${TINY[@]}"
run graph32 45 --part graph32 --budget-s 22 "${TINY[@]}"
ls -l "$D"
