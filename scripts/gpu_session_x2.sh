#!/usr/bin/env bash
# Issue 4 acceptance runs on two GPUs of one host (nvidia-h200-x2); run from the repo root on the GPU machine.
# Every step writes under $W; $OUT/session_x2.tgz is re-bundled after each step (the device returns 8 files).
set -u
W=/tmp/gs_x2; mkdir -p $W
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_x2.sqlite GPUSCOPE_HOME=$W/home NCCL_NVLS_ENABLE=0
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$W/$name.out" 2> "$W/$name.err"; local rc=$?
  echo "$name rc=$rc $(python3 -c "print(f'{$(date +%s.%N)-$t0:.1f}')")s" | tee -a "$W/steps.txt"
  tar czf "$OUT/session_x2.tgz" -C "$W" . ; }
nvidia-smi topo -m > "$W/topo.txt" 2>&1; nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > "$W/nvidia-smi.csv"
step collectives 60 python3 -m gpuscope bench collectives --nproc 2 --dtype bf16 --min-bytes 1K --max-bytes 1G --min-iters 10 --min-time 0.05 --json
step ddp_1b 70 python3 -m gpuscope bench train-dist --nproc 2 --strategy ddp --model llama-3.2-1b --micro-batch 4 --seq 2048 --steps 5 --baseline --json
step fsdp_1b 50 python3 -m gpuscope bench train-dist --nproc 2 --strategy fsdp --model llama-3.2-1b --micro-batch 4 --seq 2048 --precision bf16 --steps 5 --baseline --json
step fsdp_7b 70 python3 -m gpuscope bench train-dist --nproc 2 --strategy fsdp --model llama-2-7b --micro-batch 2 --seq 2048 --precision bf16 --steps 4 --json
step compression 60 python3 -m gpuscope bench compression --nproc 2 --model llama-3.2-1b --micro-batch 2 --seq 1024 --steps 10 --hooks none,fp16,powersgd1,sign --json
step ddp_7b 80 python3 -m gpuscope bench train-dist --nproc 2 --strategy ddp --model llama-2-7b --micro-batch 1 --seq 2048 --gradient-as-bucket-view --steps 4 --json
ls -la $W
