#!/bin/bash
# The CPU model's measurements (research/scripts/cpu_op_costs.py) and bench's CPU examples, on two cores of the
# device machine's host, idle (and, with CPU_LOAD=1, beside one CPU-bound process on one of those cores).
# Results under "$OUT/cpu_costs/" (tarred into $OUT/cpu_costs.tgz: one file back). STAGE=data|check picks the part;
# TINY=1: tiny sizes, seconds (the same code paths).
set -u
O="$OUT/cpu_costs"; mkdir -p "$O"
export CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=2 PYTHONPATH=src GPUSCOPE_HOME=/tmp/gscpu/home \
    GPUSCOPE_DB=/tmp/gscpu/db.sqlite TOKENIZERS_PARALLELISM=false
mkdir -p /tmp/gscpu
CORES=${CORES:-0,1}
TINY=${TINY:-0}
lscpu > "$O/lscpu.txt" 2>&1
python3 -c "import torch, transformers, typer, rich; print(torch.__version__, transformers.__version__)" > "$O/versions.txt" 2>&1
run() {  # run NAME LIMIT CMD...: the command line, its stdout/stderr and its wall seconds beside each other
    local name=$1 limit=$2; shift 2
    echo "taskset -c $CORES $*" > "$O/$name.cmd"
    local t0; t0=$(date +%s.%N)
    timeout "$limit" taskset -c "$CORES" "$@" > "$O/$name.out" 2> "$O/$name.err"
    local rc=$?
    echo "rc=$rc wall_s=$(python3 -c "import sys; print(round($(date +%s.%N) - $t0, 1))")" > "$O/$name.time"
}
T=""; [ "$TINY" = 1 ] && T="--tiny"
STAGE=${STAGE:-data}
if [ "$STAGE" = data ]; then
    run costs 240 python3 research/scripts/cpu_op_costs.py "$O/costs.json" $T
    run infer_gpt2 150 python3 -m gpuscope bench infer --model gpt2 --device cpu
    run train_gpt2 200 python3 -m gpuscope bench train --model gpt2 --device cpu
fi
if [ "$STAGE" = check ]; then
    for i in $(seq 1 "${REPEATS:-2}"); do  # each repeat measures the host's ceilings afresh (the first run)
        rm -rf /tmp/gscpu/home
        run "infer_gpt2_$i" 150 python3 -m gpuscope bench infer --model gpt2 --device cpu
        run "train_gpt2_$i" 150 python3 -m gpuscope bench train --model gpt2 --device cpu
        run "infer_llama_$i" 150 python3 -m gpuscope bench infer --model research/scripts/llama_small_cpu.json --device cpu
        run "train_llama_$i" 150 python3 -m gpuscope bench train --model research/scripts/llama_small_cpu.json --device cpu
        cp -r /tmp/gscpu/home "$O/home_$i"
    done
    if [ "${CPU_LOAD:-1}" = 1 ]; then  # one CPU-bound process on one of the two cores
        taskset -c "${CORES%%,*}" yes > /dev/null & YES=$!
        run load_infer_gpt2 150 python3 -m gpuscope bench infer --model gpt2 --device cpu
        run load_train_gpt2 150 python3 -m gpuscope bench train --model gpt2 --device cpu
        run load_calibrate 150 python3 -m gpuscope hardware calibrate --quick --host --out "$O/calibrated_load.toml"
        kill "$YES"
    fi
    run calibrate 150 python3 -m gpuscope hardware calibrate --quick --host --out "$O/calibrated.toml"
fi
tar -czf "$OUT/cpu_costs.tgz" -C "$OUT" cpu_costs && rm -rf "$O"
