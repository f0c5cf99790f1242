#!/usr/bin/env bash
# transformers continuous batching on one H200, the runs gpu_serve.sh could not finish or did not have: `gpuscope
# bench serve --model llama-3.1-8b` in-process (as gpu_serve.sh: random weights, token-id prompts, EOS off), `plan
# serve`'s estimate beside each run, each run its own process (imports, 8B build, warm-up ~15 s, then the timed run):
#   n1024  1024 requests 128 in / 128 out, offline        (planned 97.9 s + ~15 s set-up; limit 200 s)
#   rate6   200 requests 512 / 128, Poisson 6 req/s, seed 0 (planned 44.8 s; TTFT p99 0.33 s)
#   rate8   160 requests 512 / 128, Poisson 8 req/s, seed 0 (planned 34.3 s; TTFT p50 0.17, p99 0.74 s: queueing)
#   rate10  128 requests 512 / 128, Poisson 10 req/s, seed 0 (planned 27.6 s; TTFT p50 0.17, p99 0.71 s; gpu_serve4.sh)
#   c64     128 requests 512 / 128, 64 in flight (closed loop; TTFT from each request's send; planned 25.6 s)
# Set-up before the timed run is ~19 s on the H200 machine (1024 run: wall 117.7 s, served 98.6 s); the 200 x rate6
# run timed out at its 65 s (call1 of 2026-12-02-h200-b), so the rate8/c64 runs are smaller with more margin.
# usage (repo root, GPU machine): bash research/scripts/gpu_serve2.sh [GROUPS]  -> $OUT/gpu_serve2.tgz
#   default groups "n1024 rate6", budget 230 s (GS_BUDGET): n1024 first; rate6 only if the time left holds it.
#   research/scripts/gpu_serve3.sh runs "rate8 c64" in 150 s into $OUT/gpu_serve3.tgz.
#   CPU proof (a 2-layer tiny Llama, requests / 16, lengths / 16): OUT=/tmp/o bash research/scripts/gpu_serve2.sh --tiny
# Every run under `timeout LIMIT` with LIMIT = min(its cap, time left - 5 s); a run whose minimum no longer fits is
# skipped (steps.txt says so); each run's own --timeout is LIMIT - 10 so an overrun is stored as a timeout.
set -u
T0=$(date +%s); BUDGET=${GS_BUDGET:-230}; BUNDLE=${GS_BUNDLE:-gpu_serve2.tgz}
W=$(mktemp -d /tmp/gs_serve2.XXXXXX)
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_serve.sqlite GPUSCOPE_HOME=$W/home
source "$(dirname "$0")/session_lib.sh"
L8=llama-3.1-8b; DEV=(); GPU=(--gpu h200); K=1
TINY=0; [ "${1:-}" = "--tiny" ] && { TINY=1; shift; }
GROUPS_WANTED="${*:-n1024 rate6}"
if [ $TINY = 1 ]; then
  python3 -c "import json; from gpuscope.measure.models.tiny import TINY; \
json.dump(dict(TINY['llama'], num_hidden_layers=2, max_position_embeddings=4096), open('$W/tiny.json', 'w'))"
  L8=$W/tiny.json; DEV=(--device cpu --dtype fp32); GPU=(); K=16
else
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv > "$W/nvidia-smi.csv"
fi
python3 -c "import transformers, torch; print(transformers.__version__, torch.__version__)" > "$W/versions.txt" 2>&1
git rev-parse HEAD > "$W/git.txt" 2>/dev/null
RUN=(python3 -m gpuscope bench serve --json "${GPU[@]}" "${DEV[@]}" --model "$L8")
# serve NAME CAP NEED N P G [ARRIVAL FLAGS]: one run, if NEED s still fit in the budget
serve() { local name=$1 cap=$2 need=$3 n=$4 p=$5 g=$6; shift 6
  local left=$(( BUDGET - ($(date +%s) - T0) - 5 )) limit
  if (( left < need )); then echo "$name skipped: $left s left < $need s" | tee -a "$W/steps.txt"; return; fi
  limit=$(( cap < left ? cap : left ))
  local cmd=("${RUN[@]}" --requests $(( n / K )) --prompt $(( p / K )) --gen $(( g / K )) "$@" --timeout $(( limit - 10 )))
  echo "timeout $limit ${cmd[*]}" > "$W/$name.cmd"
  step "$name" "$limit" "${cmd[@]}"; }
want n1024 && serve serve_8b_n1024_p128_g128 200 150 1024 128 128
want rate6 && serve serve_8b_n200_p512_g128_rate6 75 65 200 512 128 --rate 6 --seed 0
want rate8 && serve serve_8b_n160_p512_g128_rate8 80 60 160 512 128 --rate 8 --seed 0
want rate10 && serve serve_8b_n128_p512_g128_rate10 85 55 128 512 128 --rate 10 --seed 0
want c64 && serve serve_8b_n128_p512_g128_c64 65 50 128 512 128 --concurrency $(( 64 / K ))
python3 -m gpuscope results list --kind serve > "$W/results_list.txt" 2>&1
tar czf "$OUT/$BUNDLE" -C "$W" .
