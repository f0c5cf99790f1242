#!/usr/bin/env bash
# Issue 26 item 1 on ONE GPU (no two-GPU machine has been lent since 2026-11-29): FSDP2 fully_shard with
# MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), fp32 sharded master weights and AdamW states, world
# size 1, so what the step holds is the planner's FSDP2 optimizer-phase model at N = 1 (the foreach AdamW's
# _foreach_sqrt temporary the size of the local shards) without any collective time. Sizes other than the 7B/8B
# two-GPU cases the issue reported: Llama-3.2-1B mb4 x 2048 and Llama-3.2-3B mb2 x 2048, each with foreach AdamW
# (torch.optim.AdamW(foreach=True): fused=False in the worker's case) and the 3B also fused (the contrast).
# The worker (gpuscope.measure.distributed.train) is launched with torchrun --nproc-per-node 1 and writes one JSON
# line per case to $W/fsdp1.jsonl; everything is packed into ONE file $OUT/gpu_fsdp1/gpu_fsdp1.tgz.
# usage (repo root, GPU machine): bash research/scripts/gpu_fsdp1.sh        CPU check: OUT=/tmp/o bash ... --tiny
# Budget: 100 s (each case under its own timeout; model builds on the GPU ~10 s).
set -u
: "${OUT:?set OUT}"; W=$(mktemp -d); mkdir -p "$OUT/gpu_fsdp1"
export PYTHONPATH=src
TINY=0; [[ "${1:-}" == "--tiny" ]] && TINY=1
pack() { tar czf "$OUT/gpu_fsdp1/gpu_fsdp1.tgz" -C "$W" . ; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > "$W/nvidia-smi.csv" 2>&1
one() {  # one NAME LIMIT CASE_JSON
  local name=$1 t=$2 case=$3
  echo "timeout $t python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m gpuscope.measure.distributed.train --case '$case' --out $W/fsdp1.jsonl" > "$W/$name.cmd"
  timeout "$t" python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m gpuscope.measure.distributed.train \
    --case "$case" --out "$W/fsdp1.jsonl" > "$W/$name.out" 2> "$W/$name.err"
  echo "$name rc=$?" >> "$W/steps.txt"; pack
}
if (( TINY )); then
  C='"model": "research/scripts/llama_small_cpu.json", "device": "cpu", "seq": 128, "steps": 2, "warmup": 1'
  one tiny_foreach 120 "{\"kind\": \"train-dist\", \"strategy\": \"fsdp\", \"precision\": \"amp-bf16\", \"micro_batch\": 1, \"fused\": false, $C}"
else
  B='"kind": "train-dist", "strategy": "fsdp", "precision": "amp-bf16", "seq": 2048, "steps": 3, "warmup": 1'
  one l1b_mb4_foreach 35 "{$B, \"model\": \"llama-3.2-1b\", \"micro_batch\": 4, \"fused\": false}"
  one l3b_mb2_foreach 40 "{$B, \"model\": \"llama-3.2-3b\", \"micro_batch\": 2, \"fused\": false}"
  one l3b_mb2_fused 35 "{$B, \"model\": \"llama-3.2-3b\", \"micro_batch\": 2, \"fused\": true}"
fi
pack
