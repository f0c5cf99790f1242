#!/usr/bin/env bash
# Issue 26 items 4 and 3, second set (independent checks at other sizes; research/results/2026-12-02-h200-c
# moe_generate.md): research/scripts/gpu_moe_generate.py with new arguments, one part per process, each under its
# own timeout.
#   moe   DeepSeek-V2-Lite (4 layers: the dense first + 3 MoE; MLA, 64 routed experts of 1,408 + 2 shared, top-6)
#         prefill kernel tables at b4 p1024 (the stored miss's size), b8 p512, b1 p2048, b1 p512; Mixtral-8x7B at
#         b4 p1024 and b1 p4096, Qwen1.5-MoE-A2.7B at b2 p4096 and b1 p512 (sizes not in call 1; the p512 cases run
#         grouped_mm's small-tile kernel, <= 128 rows an expert); per case also the host time until the forward
#         returns (no sync after it) and that host time by block (attention, MLP / MoE; hooks); no grouped_mm probe.
#   host  plain generate on the full Llama-3.1-8B (32 layers; call 1 ran 16): b1 p1024 first and last (the host
#         level of this call, before and after), b8 p2048 (the check), b16 p1024, b4 p2048, b1 p2048;
#         profiled (record_shapes host table, kernel table) at b8 p2048 and b1 p2048.
#   host7 the same on Qwen2.5-7B (28 layers, biased q/k/v): b1 p1024, b8 p2048, b1 p1024.
#   hostmix (call 3, not in the default) prefill (1 x 512) and decode-step host time of Llama-3.1-8B, DeepSeek-V2-Lite,
#         Qwen1.5-MoE and Mixtral at 4 layers in one process, 4 interleaved rounds (60 s): is the MoE prefill's host
#         level its own, or prefill's, against the decode step's at the same moment?
#   newlen (call 3, not in the default) Llama-3.1-8B at 16 layers, batch 1 / 4 / 16 at 1,024 tokens: decode steps at KV
#         lengths not seen before against the same lengths again, and with cuDNN's SDPA off (45 s): does each new
#         length cost a cuDNN graph build on the host (2026-12-02-h200 call 4's warm-up covered 3 steps of 31)?
# usage (repo root, on the GPU machine): bash research/scripts/gpu_moe_generate2.sh [PART...] (default: moe host
#   host7) -> everything packed into ONE file, $OUT/gpu_moe_generate2/gpu_moe_generate2.tgz
# CPU check (tiny models, same code):    bash research/scripts/gpu_moe_generate2.sh --tiny [PART...]
# Budget: 120 s (timeouts moe 40 s, host 50 s, host7 30 s; each part starts no new case past its --budget-s).
set -u
OUT=${OUT:-/tmp/gs_moe_generate2}; D=$OUT/gpu_moe_generate2; W=$(mktemp -d); R=$W/gpu_moe_generate2
mkdir -p "$D" "$R"
TINY=(); [[ "${1:-}" == "--tiny" ]] && { TINY=(--tiny); shift; }
PARTS=("$@"); [[ ${#PARTS[@]} -eq 0 ]] && PARTS=(moe host host7)
export PYTHONPATH=src
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
    moe) run moe 40 --part moe --layers 4 --budget-s 25 --no-probe \
           --moe-specs "deepseek-v2-lite:4x1024,8x512,1x2048,1x512;mixtral-8x7b:4x1024,1x4096;qwen1.5-moe-a2.7b:2x4096,1x512" \
           "${TINY[@]}" ;;
    host) run host 50 --part host --layers 32 --budget-s 36 --gen 12 \
            --host-sizes 1x1024,8x2048,16x1024,4x2048,1x2048,1x1024 --prof-cases 1,4 "${TINY[@]}" ;;
    newlen) run newlen 45 --part newlen --layers 16 --budget-s 30 --gen 12 "${TINY[@]}" ;;
    hostmix) run hostmix 60 --part hostmix --layers 4 --budget-s 40 --mix-prompt 512 "${TINY[@]}" ;;
    host7) run host7 30 --part host --tag 7b --host-model qwen2.5-7b --layers 28 --budget-s 18 --gen 12 \
             --host-sizes 1x1024,8x2048,1x1024 --prof-cases "" "${TINY[@]}" ;;
    *) echo "unknown part $p" >> "$R/parts.err" ;;
  esac
done
mv "$W"/gpu_moe_generate/* "$R"/ 2>/dev/null
tar -czf "$D/gpu_moe_generate2.tgz" -C "$W" gpu_moe_generate2
ls -l "$R" > "$D/listing.txt"; rm -rf "$W"
