#!/usr/bin/env bash
# Serving under transformers' continuous batching on one H200: `gpuscope bench serve --model M` (in-process
# init_continuous_batching, random weights, random token-id prompts, EOS off, offline arrivals), `plan serve`'s
# estimate beside each run (issue 21's "done means": output tokens/s, TTFT p50 and TPOT p50 within 15%):
#   Llama-3.1-8B  256 requests  512 in / 128 out
#   Llama-3.1-8B   64 requests 2048 in / 256 out
#   Llama-3.1-8B 1024 requests  128 in / 128 out
#   Qwen2.5-32B   128 requests  512 in / 128 out
# run cheapest first by `plan serve`'s H200 durations of the timed runs (40.3, 43.2, 57.5, 92.3 s); each step is its
# own process: imports, model build, engine warm-up (CUDA graphs), 8 untimed short requests, the timed run.
# usage (repo root, on the GPU machine): bash research/scripts/gpu_serve.sh [32b n256 n64 n1024]  -> $OUT/gpu_serve.tgz
#        (default: all four; name some to run only those, e.g. n1024 alone in a later call)
#        (here, on a CPU, to prove it runs):  OUT=/tmp/o bash research/scripts/gpu_serve.sh --tiny
# Budget 270 s in all: every step under its own `timeout` (60 + 62 + 78 + 70 s), each run's --timeout 10 s less
# so an overrun is stored as a timeout rather than lost. If the planner is right the last (1024 requests, ~105 s
# with its set-up) does not fit: run `bash research/scripts/gpu_serve.sh n1024` with 120 s more to have it.
set -u
W=$(mktemp -d /tmp/gs_serve.XXXXXX)  # its own folder: two runs at once do not share files
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_serve.sqlite GPUSCOPE_HOME=$W/home
BUNDLE=gpu_serve.tgz
source "$(dirname "$0")/session_lib.sh"
L8=llama-3.1-8b; Q32=qwen2.5-32b; DEV=(); GPU=(--gpu h200); K=1; T=(60 62 78 70)
TINY=0; [ "${1:-}" = "--tiny" ] && { TINY=1; shift; }
GROUPS_WANTED="${*:-32b n256 n64 n1024}"
[ "$GROUPS_WANTED" = "n1024" ] && T[3]=120  # alone: the 1024-request run gets the time the planner says it needs
if [ $TINY = 1 ]; then  # a CPU proof: a 2-layer Llama of hidden 64 for both models, sizes / 16
  python3 -c "import json; from gpuscope.measure.models.tiny import TINY; \
json.dump(dict(TINY['llama'], num_hidden_layers=2, max_position_embeddings=4096), open('$W/tiny.json', 'w'))"
  L8=$W/tiny.json; Q32=$W/tiny.json; DEV=(--device cpu --dtype fp32); GPU=(); K=16; T=(60 60 60 60)
else
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv > "$W/nvidia-smi.csv"
fi
python3 -c "import transformers, torch; print(transformers.__version__, torch.__version__)" > "$W/versions.txt" 2>&1
git rev-parse HEAD > "$W/git.txt" 2>/dev/null
RUN=(python3 -m gpuscope bench serve --json "${GPU[@]}" "${DEV[@]}")
serve() { local name=$1 limit=$2 model=$3 n=$4 p=$5 g=$6
  step "$name" "$limit" "${RUN[@]}" --model "$model" --requests $((n / K)) --prompt $((p / K)) --gen $((g / K)) \
    --timeout $((limit - 10)); }
want 32b && serve serve_32b_n128_p512_g128 "${T[0]}" "$Q32" 128 512 128
want n256 && serve serve_8b_n256_p512_g128 "${T[1]}" "$L8" 256 512 128
want n64 && serve serve_8b_n64_p2048_g256 "${T[2]}" "$L8" 64 2048 256
want n1024 && serve serve_8b_n1024_p128_g128 "${T[3]}" "$L8" 1024 128 128
python3 -m gpuscope results list --kind serve > "$W/results_list.txt" 2>&1
tar czf "$OUT/$BUNDLE" -C "$W" .
