#!/usr/bin/env bash
# Issue 26 item 1 on ONE GPU, second call: FSDP2 fully_shard with MixedPrecisionPolicy(param_dtype=bf16,
# reduce_dtype=fp32), fp32 sharded master weights and AdamW states, world size 1, with torch.optim.AdamW(foreach=True)
# said explicitly (the worker's case key "foreach": true; measure/distributed/optim.py). Call 1 (gpu_fsdp1.sh) ran
# "fused": false, which torch runs as its for-loop (_single_tensor_adam), not foreach. This call measures the
# foreach path's one full-size temporary list (_foreach_sqrt(exp_avg_sqs)) at three sizes, none of them the 7B/8B
# two-GPU cases of the issue: Llama-3.2-1B mb4 x 2048 (call 1's for-loop twin), Llama-3.2-3B mb1 x 2048 (the
# optimizer step is the planned peak there) and Phi-3-mini mb1 x 2048 (another family, untied embeddings).
# Every result names the implementation torch ran (optimizer_impl) and the parameters' type (param_types).
# The worker (gpuscope.measure.distributed.train) is launched with torchrun --nproc-per-node 1 and writes one JSON
# line per case to $W/fsdp2.jsonl; everything is packed into ONE file $OUT/gpu_fsdp2/gpu_fsdp2.tgz.
# usage (repo root, GPU machine): bash research/scripts/gpu_fsdp2.sh        CPU check: OUT=/tmp/o bash ... --tiny
# Budget: 100 s (each case under its own timeout; call 1's cases took ~26 s each, mostly start-up and model build).
set -u
: "${OUT:?set OUT}"; W=$(mktemp -d); mkdir -p "$OUT/gpu_fsdp2"
export PYTHONPATH=src
TINY=0; [[ "${1:-}" == "--tiny" ]] && TINY=1
pack() { tar czf "$OUT/gpu_fsdp2/gpu_fsdp2.tgz" -C "$W" . ; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > "$W/nvidia-smi.csv" 2>&1
one() {  # one NAME LIMIT CASE_JSON
  local name=$1 t=$2 case=$3 t0=$SECONDS
  echo "timeout $t python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m gpuscope.measure.distributed.train --case '$case' --out $W/fsdp2.jsonl" > "$W/$name.cmd"
  timeout "$t" python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m gpuscope.measure.distributed.train \
    --case "$case" --out "$W/fsdp2.jsonl" > "$W/$name.out" 2> "$W/$name.err"
  echo "$name rc=$? $(( SECONDS - t0 )) s" >> "$W/steps.txt"; pack
}
if (( TINY )); then
  C='"model": "research/scripts/llama_small_cpu.json", "device": "cpu", "seq": 128, "steps": 2, "warmup": 1'
  one tiny_foreach 300 "{\"kind\": \"train-dist\", \"strategy\": \"fsdp\", \"precision\": \"amp-bf16\", \"micro_batch\": 1, \"foreach\": true, $C}"
else
  B='"kind": "train-dist", "strategy": "fsdp", "precision": "amp-bf16", "seq": 2048, "steps": 3, "warmup": 1, "foreach": true'
  one l1b_mb4_foreach 28 "{$B, \"model\": \"llama-3.2-1b\", \"micro_batch\": 4}"
  one l3b_mb1_foreach 34 "{$B, \"model\": \"llama-3.2-3b\", \"micro_batch\": 1}"
  one phi3mini_mb1_foreach 38 "{$B, \"model\": \"phi-3-mini\", \"micro_batch\": 1}"
fi
pack
