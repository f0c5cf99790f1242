#!/bin/bash
# bench's four CPU checks of the planner's CPU model (research/results/2026-12-02-cpu/README.md): GPT-2 and
# research/scripts/llama_small_cpu.json, bench infer and bench train at the CPU defaults, in two rounds, each in an
# empty gpuscope home (its first run measures the host's ceilings); one line per run with its wall time, the
# 1-minute load average before and after, and the estimate errors. Results under $OUT (default /tmp/cpu_validate).
# Run from the repository root with gpuscope installed (or PYTHONPATH=src).
set -u
O=${OUT:-/tmp/cpu_validate}; mkdir -p "$O"; L="$O/log.txt"; : > "$L"
for r in 1 2; do
  export GPUSCOPE_HOME="$O/home$r" GPUSCOPE_DB="$O/db$r.sqlite"
  rm -rf "$GPUSCOPE_HOME" "$GPUSCOPE_DB"
  for c in "bench infer --model gpt2" "bench train --model gpt2" \
           "bench infer --model research/scripts/llama_small_cpu.json" \
           "bench train --model research/scripts/llama_small_cpu.json"; do
    t0=$(date +%s.%N); l0=$(cut -d' ' -f1 /proc/loadavg)
    timeout 300 python3 -m gpuscope $c > "$O/out.txt" 2> "$O/err.txt"; rc=$?
    rows=$(tr '\r' '\n' < "$O/err.txt" | grep -E "│ (prefill_s|decode_s_per_token|step_s) " |
           awk -F'│' '{gsub(/ /,"",$2);gsub(/ /,"",$5); printf "%s=%s ", $2, $5}')
    head=$(tr '\r' '\n' < "$O/err.txt" | grep -E "^\[" | head -1 | cut -c1-160)
    echo "r$r rc=$rc wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))") load=$l0-$(cut -d' ' -f1 /proc/loadavg) :: $c :: $rows :: $head" >> "$L"
  done
done
echo DONE >> "$L"
