#!/usr/bin/env bash
# Multi-GPU checks on two GPUs of one host (collectives, DDP/FSDP training, compression hooks); run from the repo root on the GPU machine:
# bash research/scripts/gpu_session_x2.sh [collectives] [ddp_1b] [fsdp_1b] [fsdp_7b] [compression] [ddp_7b] (default: all).
# Every step writes under $W; $OUT/session_x2.tgz is re-bundled after each step (the device returns 8 files).
set -u
W=/tmp/gs_x2; mkdir -p $W
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_x2.sqlite GPUSCOPE_HOME=$W/home NCCL_NVLS_ENABLE=0
BUNDLE=session_x2.tgz
source "$(dirname "$0")/session_lib.sh"
GROUPS_WANTED="${*:-collectives ddp_1b fsdp_1b fsdp_7b compression ddp_7b}"
nvidia-smi topo -m > "$W/topo.txt" 2>&1; nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > "$W/nvidia-smi.csv"
want collectives && step collectives 60 python3 -m gpuscope bench collectives --nproc 2 --dtype bf16 --min-bytes 1K --max-bytes 1G --min-iters 10 --min-time 0.05 --json
want ddp_1b && step ddp_1b 70 python3 -m gpuscope bench train-dist --nproc 2 --strategy ddp --model llama-3.2-1b --micro-batch 4 --seq 2048 --steps 5 --baseline --json
want fsdp_1b && step fsdp_1b 50 python3 -m gpuscope bench train-dist --nproc 2 --strategy fsdp --model llama-3.2-1b --micro-batch 4 --seq 2048 --precision bf16 --steps 5 --baseline --json
want fsdp_7b && step fsdp_7b 70 python3 -m gpuscope bench train-dist --nproc 2 --strategy fsdp --model llama-2-7b --micro-batch 2 --seq 2048 --precision bf16 --steps 4 --json
want compression && step compression 240 python3 -m gpuscope bench compression --nproc 2 --model llama-3.2-1b --micro-batch 2 --seq 1024 --steps 12 --json
want ddp_7b && step ddp_7b 80 python3 -m gpuscope bench train-dist --nproc 2 --strategy ddp --model llama-2-7b --micro-batch 1 --seq 2048 --gradient-as-bucket-view --steps 4 --json
ls -la $W
