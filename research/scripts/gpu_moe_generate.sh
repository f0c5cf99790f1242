#!/usr/bin/env bash
# Issue 26 items 4 (MoE prefill), 3 (plain generate's host per step by batch) and 2 (32B graph-unfused decode at
# batch 16) on one GPU: research/scripts/gpu_moe_generate.py, one part per process, each under its own timeout.
# usage (repo root, on the GPU machine): bash research/scripts/gpu_moe_generate.sh [PART...]   (default: moe host
#   graph32) -> everything packed into ONE file, $OUT/gpu_moe_generate/gpu_moe_generate.tgz (the device returns at
#   most 8 files a call; 2026-12-02-h200-b call2 lost moe.json and host.json that way)
# CPU check (tiny models, same code):    bash research/scripts/gpu_moe_generate.sh --tiny [PART...]
# Budget: timeouts moe 50 s, host 45 s, graph32 45 s (each part starts no new case past its --budget-s).
set -u
OUT=${OUT:-/tmp/gs_moe_generate}; D=$OUT/gpu_moe_generate; W=$(mktemp -d); R=$W/gpu_moe_generate; mkdir -p "$D" "$R"
TINY=(); [[ "${1:-}" == "--tiny" ]] && { TINY=(--tiny); shift; }
PARTS=("$@"); [[ ${#PARTS[@]} -eq 0 ]] && PARTS=(moe host graph32)
export PYTHONPATH=src
# (torch and transformers versions: in each part's JSON)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv \
  > "$R/versions.txt" 2>&1
run() {  # run NAME TIMEOUT ARGS...: the command line beside its output, and its exit status
  local name=$1 t=$2; shift 2
  echo "timeout $t python3 research/scripts/gpu_moe_generate.py $*" > "$R/$name.cmdline"
  OUT=$W timeout "$t" python3 research/scripts/gpu_moe_generate.py "$@" > "$R/$name.out" 2>&1
  echo "exit $?" >> "$R/$name.cmdline"
}
for p in "${PARTS[@]}"; do
  case $p in
    moe) run moe 50 --part moe --budget-s 35 "${TINY[@]}" ;;
    host) run host 45 --part host --budget-s 32 --gen 12 "${TINY[@]}" ;;
    graph32) run graph32 45 --part graph32 --budget-s 22 "${TINY[@]}" ;;
    *) echo "unknown part $p" >> "$R/parts.err" ;;
  esac
done
tar -czf "$D/gpu_moe_generate.tgz" -C "$W" gpu_moe_generate
ls -l "$R" > "$D/listing.txt"; rm -rf "$W"
