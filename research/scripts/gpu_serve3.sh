#!/usr/bin/env bash
# Llama-3.1-8B under arrivals on one H200 (transformers continuous batching in-process, plan serve beside): Poisson
# 8 req/s (160 x 512/128, limit 80 s) and a closed loop of 64 (128 x 512/128, limit 65 s), in 150 s -> $OUT/gpu_serve3.tgz. The runs and
# their limits are gpu_serve2.sh's groups rate8 and c64 (its header). CPU proof:
#   OUT=/tmp/o bash research/scripts/gpu_serve3.sh --tiny
GS_BUDGET=${GS_BUDGET:-150} GS_BUNDLE=gpu_serve3.tgz exec bash "$(dirname "$0")/gpu_serve2.sh" "$@" rate8 c64
