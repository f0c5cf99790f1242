#!/usr/bin/env bash
# GPU checks on one GPU, by group (research/README.md: what each group measures); usage: bash research/scripts/gpu_session_a.sh [infer] [validate] [doctor] [loader] [train] [accum] [profile] [fuse] [fusedoc] [loaderdoc] [mamf] [moe] [moeprefill] [moerouting] [tinytrain] [trainhost] [hosttrain] [ttft] [ttftfix] [calib] [hfgraph] [hfgraph2] [hfbench] [calsame] [hfpair] [final] [defer] [defer2] [realhost] [probe] [gc] [final2] [gpt2doc] [trainwidth] [probe2] [final3] [track] [doctor7] [track2] [final8] [final8b] [final8c] [final9] [final9b] [final9c] [final10] [final10b] [final10c] [final10d] [final10e] [benchall] [ceilings]
# (run from the repo root on the GPU machine; writes under $OUT).
# Each step is bounded by `timeout` so one failure never ends the batch; stderr of each goes to <step>.err.
set -u
# The device returns at most 8 files: every step writes under $W, bundled into $OUT/session_a.tgz at the end.
W=/tmp/gs_session; mkdir -p $W
export PYTHONPATH=src GPUSCOPE_DB=$W/gpu_a.sqlite GPUSCOPE_HOME=$W/home
BUNDLE=session_a.tgz
source "$(dirname "$0")/session_lib.sh"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv > "$W/nvidia-smi.csv"
GROUPS_WANTED="${*:-infer validate doctor loader train accum benchall ceilings}"
if want infer; then
# 1. gs-graph: capture works and decodes (quick), then the validation cases (1B and 8B, b1, 128 tokens)
step gs_smoke 150 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 128 --gen 32 --engine gs-graph --json
fi
if want validate; then
step gs_validate 340 python3 research/scripts/gpu_validate.py --set families --only b1-p --skip hf-graph --skip mixtral --out "$W/gs.jsonl" --timeout 200 --budget 330
fi
if want doctor; then
# 2. doctor on plain generate (launch-bound) and on the fix
step doctor_eager_1b 150 python3 -m gpuscope doctor infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --json
step doctor_gs_1b 150 python3 -m gpuscope doctor infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --engine gs-graph --json
fi
if want loaderdoc; then  # the doctor's verdicts with the profiler's cost measured per step (--bare-run)
step doctor_loader_slow_bare 200 python3 -m gpuscope doctor --bare-run --json -- python3 examples/train_slow_loader.py --steps 15 --warmup 3
step doctor_loader_fixed_bare 200 python3 -m gpuscope doctor --bare-run --json -- python3 examples/train_slow_loader.py --steps 15 --warmup 3 --workers 8 --pin-memory --prefetch 4
fi
if want loader; then
step loader_slow_plain 120 python3 examples/train_slow_loader.py
step loader_fixed_plain 120 python3 examples/train_slow_loader.py --workers 8 --pin-memory --prefetch 4
# 3. slow data loader: diagnosed, then the fix measured
step doctor_loader_slow 150 python3 -m gpuscope doctor --json -- python3 examples/train_slow_loader.py --steps 15 --warmup 3
step doctor_loader_fixed 150 python3 -m gpuscope doctor --json -- python3 examples/train_slow_loader.py --steps 15 --warmup 3 --workers 8 --pin-memory --prefetch 4
fi
if want train; then
# 4. the recommended 7B training configuration (gpuscope tune plan --model llama-2-7b --gpu h200) and plain AMP
step tune_plan_7b 60 python3 -m gpuscope tune plan --model llama-2-7b --gpu h200 --json
step train_7b_bf16_mb4 240 python3 -m gpuscope bench train --model llama-2-7b --micro-batch 4 --seq 2048 --precision bf16 --steps 5 --warmup 2 --json
step train_7b_amp_mb1 200 python3 -m gpuscope bench train --model llama-2-7b --micro-batch 1 --seq 2048 --precision amp-bf16 --steps 5 --warmup 2 --json
fi
if want accum; then  # the recommended configuration with its gradient accumulation (optimizer step amortised)
step train_7b_bf16_mb4_ga8 240 python3 -m gpuscope bench train --model llama-2-7b --micro-batch 4 --grad-accum 8 --seq 2048 --precision bf16 --steps 3 --warmup 1 --json
fi
if want profile; then
# the GQA-folding attention (no repeat_kv under the static cache's mask) beside the stock one, same session
step gqa_fold_8b 150 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 2048 --gen 128 --engine gs-compile --attn gs-gqa --json
step gqa_stock_8b 150 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 2048 --gen 128 --engine gs-compile --json
# where the 8B graph-engine decode step spends its time (kernel table in the JSON)
step doctor_gscompile_8b 140 python3 -m gpuscope doctor infer --model llama-3.1-8b --batch 1 --prompt 2048 --gen 64 --engine gs-compile --attn gs-gqa --json
step doctor_gsgraph_8b 130 python3 -m gpuscope doctor infer --model llama-3.1-8b --batch 1 --prompt 2048 --gen 64 --engine gs-graph --json
fi
if want fuse; then  # fused projections (q|k|v, gate|up) toward 70% of copy bandwidth at batch 1; copy measured beside
step micro_quick 90 python3 -m gpuscope bench micro --quick --dtype bf16 --json
step fuse_8b_p2048 110 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 2048 --gen 128 --engine gs-compile --fuse-proj --repeats 2 --json
step fuse_8b_p128 110 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine gs-compile --fuse-proj --repeats 2 --json
step stock_8b_p128 110 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine gs-compile --repeats 2 --json
step fuse_7b_p128 110 python3 -m gpuscope bench infer --model llama-2-7b --batch 1 --prompt 128 --gen 256 --engine gs-compile --fuse-proj --repeats 2 --json
step stock_7b_p128 110 python3 -m gpuscope bench infer --model llama-2-7b --batch 1 --prompt 128 --gen 256 --engine gs-compile --repeats 2 --json
fi
if want fusedoc; then  # the fused 8B decode's kernel table
step doctor_fuse_8b 100 python3 -m gpuscope doctor infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 64 --engine gs-compile --fuse-proj --json
step doctor_eager_1b 150 python3 -m gpuscope doctor infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --json
fi
if want mamf; then  # issue 3's 760 TFLOP/s: sustained (queued median) and achievable (mamf-finder v4's MAMF: bursts
# after an idle gap, median of the 5 fastest) at the public table's best shapes and this GPU's one-wave shapes, then
# the thorough sweep (which now holds the wave-quantised shapes for this SM count)
step micro_mamf 200 python3 -m gpuscope bench micro --dtype bf16 --shapes 2048x2048x13312,6144x17920x2816,1024x15360x4096,11264x19712x1536,1536x2816x6144,2816x1536x6144,1536x2816x12288,8192x8192x8192 --iters 100 --warmup 50 --json
step micro_thorough 240 python3 -m gpuscope bench micro --thorough --dtype bf16 --json
fi
if want moeprefill; then  # Mixtral's eager prefill alone (gen 1): where the -46% goes
step doctor_mixtral_prefill 150 python3 -m gpuscope doctor infer --model mixtral-8x7b --batch 1 --prompt 1024 --gen 1 --json
fi
if want moerouting; then  # the random-weight router's rows per expert, and grouped_mm with them vs equal groups
step moe_routing 150 python3 research/scripts/gpu_moe_routing.py --out "$W/moe_routing.json"
fi
if want moe; then  # the MoE prefill miss (-46%): where Mixtral's prefill spends its time
step doctor_mixtral 200 python3 -m gpuscope doctor infer --model mixtral-8x7b --batch 1 --prompt 1024 --gen 16 --json
# generate's batched_mm MoE decode at batch 8: the planner says GPU-bound at ~136 ms/token (16 gathered expert copies)
step mixtral_b8 200 python3 -m gpuscope bench infer --model mixtral-8x7b --batch 8 --prompt 128 --gen 32 --repeats 2 --json
fi
if want tinytrain; then  # bench all's host-bound tiny training steps (planner -22..-57%): where the host time goes
python3 -c "import json,sys; from gpuscope.workloads.sets import TINY_LLAMA, TINY_GPT2; json.dump(TINY_LLAMA, open('$W/tiny_llama.json','w')); json.dump(TINY_GPT2, open('$W/tiny_gpt2.json','w'))"
step doctor_tiny_llama_amp 120 python3 -m gpuscope doctor train --config "$W/tiny_llama.json" --micro-batch 2 --seq 64 --precision amp-bf16 --steps 10 --json
step doctor_tiny_gpt2_fp32_full 120 python3 -m gpuscope doctor train --config "$W/tiny_gpt2.json" --micro-batch 2 --seq 64 --precision fp32 --recompute full --steps 10 --json
step train_tiny_llama_amp 120 python3 -m gpuscope bench train --model "$W/tiny_llama.json" --micro-batch 2 --seq 64 --precision amp-bf16 --steps 30 --warmup 5 --json
step train_tiny_gpt2_fp32_full 120 python3 -m gpuscope bench train --model "$W/tiny_gpt2.json" --micro-batch 2 --seq 64 --precision fp32 --recompute full --steps 30 --warmup 5 --json
fi
if want trainhost; then  # host time per training phase on tiny models (the planner's training host model)
step train_host 200 python3 research/scripts/gpu_train_host.py --out "$W/train_host.json"
fi
if want hosttrain; then  # host-bound training steps of real-sized small models: the training host model out of its fit
step train_1b_s128 100 python3 -m gpuscope bench train --model llama-3.2-1b --micro-batch 1 --seq 128 --precision amp-bf16 --steps 20 --warmup 5 --json
step train_1b_s128_full 100 python3 -m gpuscope bench train --model llama-3.2-1b --micro-batch 1 --seq 128 --precision amp-bf16 --recompute full --steps 20 --warmup 5 --json
step train_gpt2_s128 100 python3 -m gpuscope bench train --model gpt2 --micro-batch 2 --seq 128 --precision fp32 --steps 20 --warmup 5 --json
step train_gpt2_s128_full 100 python3 -m gpuscope bench train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --recompute full --steps 20 --warmup 5 --json
fi
if want ttft; then  # the graph engines' TTFT at a short prompt (planned 26 ms, measured 27-49): its kernel table and host
step doctor_ttft_gscompile_8b 150 python3 -m gpuscope doctor infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 1 --engine gs-compile --json
step doctor_ttft_eager_8b 120 python3 -m gpuscope doctor infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 1 --json
fi
if want ttftfix; then  # after the fix: TTFT inside the kept cache; the issue-3 decode at p128 again
step gs_gen2 120 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 128 --gen 2 --engine gs-compile --repeats 3 --json
step gs_gen3_graph 120 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 128 --gen 3 --engine gs-graph --repeats 3 --json
step fuse_8b_p128_ttftfix 150 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine gs-compile --fuse-proj --repeats 3 --json
fi
if want calib; then  # the calibrated TOML with queued matmul timing (bf16/fp16/fp8 quick shapes, copy, host link)
step calibrate 150 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16,fp16,fp8 --out "$W/h200_calibrated.toml"
fi
if want hfgraph; then  # HF's static-cache compiled generate: did compile/CUDA graphs run, and what each decode token launches
step hf_graph_1b 280 python3 research/scripts/gpu_hf_graph.py --model llama-3.2-1b --prompt 512 --gen 128 --out "$W/hf_graph_1b.json"
step hf_graph_8b 280 python3 research/scripts/gpu_hf_graph.py --model llama-3.1-8b --prompt 2048 --gen 128 --variants default,user_cache --out "$W/hf_graph_8b.json"
fi
if want hfgraph2; then  # the same without debug logs: TPOT per later generate call, and host per step against layers
step hf_trend_1b 200 python3 research/scripts/gpu_hf_graph.py --model llama-3.2-1b --prompt 512 --gen 128 --variants default,user_cache --trend 12 --prof-gen 16 --out "$W/hf_trend_1b.json"
step hf_layers 240 python3 research/scripts/gpu_hf_graph.py --model llama-3.2-1b --small --layers 2,8,32 --prompt 128 --gen 64 --variants default,user_cache --trend 4 --prof-gen 16 --out "$W/hf_layers.json"
step hf_trend_8b 200 python3 research/scripts/gpu_hf_graph.py --model llama-3.1-8b --prompt 2048 --gen 128 --variants default,user_cache --trend 6 --prof-gen 16 --out "$W/hf_trend_8b.json"
fi
if want hfbench; then  # hf-graph through bench/doctor (the planner's hf-graph engine), the host fits of calibrate
step hfg_1b_p512 150 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --engine hf-graph --repeats 3 --json
step hfg_8b_p2048 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 2048 --gen 128 --engine hf-graph --repeats 3 --json
step hfg_8b_p128 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine hf-graph --repeats 3 --json
step doctor_hfg_8b 170 python3 -m gpuscope doctor infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 64 --engine hf-graph --json
step calibrate_host 200 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16 --out "$W/h200_calibrated.toml"
step doctor_train_1b_s128 120 python3 -m gpuscope doctor train --model llama-3.2-1b --micro-batch 1 --seq 128 --precision amp-bf16 --steps 10 --json
fi
if want calsame; then  # calibrated planner against workloads measured in the same session (host-bound ones foremost)
step calibrate_same 200 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16 --out "$W/h200_calibrated_same.toml"
step eager_1b_p512 120 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 64 --repeats 3 --json
step eager_8b_p2048 150 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 2048 --gen 64 --repeats 3 --json
step train_1b_s128_same 100 python3 -m gpuscope bench train --model llama-3.2-1b --micro-batch 1 --seq 128 --precision amp-bf16 --steps 20 --warmup 5 --json
step train_gpt2_full_same 100 python3 -m gpuscope bench train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --recompute full --steps 20 --warmup 5 --json
step train_1b_s2048_same 120 python3 -m gpuscope bench train --model llama-3.2-1b --micro-batch 4 --seq 2048 --precision amp-bf16 --steps 10 --warmup 3 --json
step hfg_1b_p512_again 150 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --engine hf-graph --repeats 3 --json
fi
if want hfpair; then  # the same compiled step with and without generate's per-token wait, one session; hf-graph's TTFT
step pair_gs_8b_p128 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine gs-compile --repeats 3 --json
step pair_hfg_8b_p128 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine hf-graph --repeats 3 --json
step doctor_hfg_ttft_8b 150 python3 -m gpuscope doctor infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 1 --engine hf-graph --json
fi
if want final; then  # the final tree: bench all's time; the hf-graph script and bench on one case, back to back
step bench_all_final 150 python3 -m gpuscope bench all --json
step hf_script_1b 70 python3 research/scripts/gpu_hf_graph.py --model llama-3.2-1b --prompt 512 --gen 128 --variants default --trend 6 --prof-gen 0 --out "$W/hf_script_1b.json"
step hf_bench_1b 70 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --engine hf-graph --repeats 3 --json
fi
if want defer; then  # generate without its per-token wait: transformers' DeferredStopCheck on CUDA (--defer-stop)
step defer_diag_1b 240 python3 research/scripts/gpu_hf_graph.py --model llama-3.2-1b --prompt 128 --gen 128 --variants default,defer,eager,eager_defer --prof-gen 16 --out "$W/defer_diag_1b.json"
step defer_8b_hfg 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine hf-graph --defer-stop --repeats 3 --json
step defer_8b_hfg_fused 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine hf-graph --defer-stop --fuse-proj --repeats 3 --json
fi
if want defer2; then  # the same session's references: hf-graph as HF runs it, gs-compile fused, the copy ceiling
step micro_quick 120 python3 -m gpuscope bench micro --quick --dtype bf16 --json
step defer2_8b_hfg 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine hf-graph --repeats 3 --json
step defer2_8b_gs_fused 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine gs-compile --fuse-proj --repeats 3 --json
step defer2_1b_eager_d 100 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --defer-stop --repeats 3 --json
step defer2_1b_hfg_d 100 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --engine hf-graph --defer-stop --repeats 3 --json
fi
if want realhost; then  # calibrate --host with the real-width fit, then host-bound workloads in the same call
step cal_real_1 150 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16 --out "$W/cal_real_1.toml"
step rh_eager_1b_p512 120 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --repeats 3 --json
step rh_eager_8b_p128 150 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 64 --repeats 3 --json
step rh_hfgd_1b_p512 120 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --engine hf-graph --defer-stop --repeats 3 --json
step rh_train_1b_s128 100 python3 -m gpuscope bench train --model llama-3.2-1b --micro-batch 1 --seq 128 --precision amp-bf16 --steps 20 --warmup 5 --json
step rh_train_gpt2_full 100 python3 -m gpuscope bench train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --recompute full --steps 20 --warmup 5 --json
step cal_real_2 150 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16 --out "$W/cal_real_2.toml"
fi
if want probe; then  # the host's speed between passes and calls; why eager forwards slow down after compile
step cal_a 150 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16 --out "$W/cal_a.toml"
step host_passes 150 python3 -c "import json; from gpuscope.measure.host.costs import host_costs; print(json.dumps(host_costs(passes=5), default=str))"
step probes_1b 300 python3 research/scripts/gpu_hf_graph.py --model llama-3.2-1b --prompt 512 --gen 128 --variants default,defer --probes --prof-gen 0 --repeats 5 --out "$W/probes_1b.json"
step cal_b 150 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16 --out "$W/cal_b.toml"
fi
if want gc; then  # Python's collector in hf-graph runs: pauses per token, and --gc-freeze
step gc_8b_hfg 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine hf-graph --repeats 3 --json
step gc_8b_hfg_freeze 170 python3 -m gpuscope bench infer --model llama-3.1-8b --batch 1 --prompt 128 --gen 256 --engine hf-graph --gc-freeze --repeats 3 --json
step gc_1b_hfg_freeze 120 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --engine hf-graph --gc-freeze --repeats 3 --json
step gc_1b_hfg 120 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 512 --gen 128 --engine hf-graph --repeats 3 --json
fi
if want final2; then  # the final tree of session 6: bench all planning on its own calibration (host included)
step bench_all_cal 330 python3 -m gpuscope bench all --json
fi
if want gpt2doc; then  # for the next session: GPT-2 with full recompute is planned ~30% short; its profile
step doctor_gpt2_full 100 python3 -m gpuscope doctor train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --recompute full --steps 5 --json
step doctor_gpt2_none 80 python3 -m gpuscope doctor train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --steps 5 --json
fi
if want trainwidth; then  # session 7: training host time per phase at tiny and real widths, kernels per phase,
# decode host fits per family, and the real GPT-2 / Llama-3.2-1B steps, all against one calibration of this call
step cal_tw 150 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16 --out "$W/cal_tw.toml"
step train_width 300 python3 research/scripts/gpu_train_width.py --out "$W/train_width.json"
step decode_families 120 python3 -c "import json; from gpuscope.measure.host.overhead import measure_host; json.dump(measure_host(), open('$W/decode_families.json', 'w'), indent=1)"
step tw_gpt2_none 90 python3 -m gpuscope bench train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --steps 10 --json
step tw_gpt2_full 90 python3 -m gpuscope bench train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --recompute full --steps 10 --json
step tw_1b_none 90 python3 -m gpuscope bench train --model llama-3.2-1b --micro-batch 2 --seq 128 --precision amp-bf16 --steps 10 --json
fi
if want probe2; then  # session 7: the suite with host probes (bench all on its own calibration), the interleaved
# training fits, host-bound training workloads after it, and a second calibration: does the probe follow the host?
step bench_all_p 400 python3 -m gpuscope bench all --json
step train_width_i 300 python3 research/scripts/gpu_train_width.py --out "$W/train_width_i.json"
step pw_gpt2_none 90 python3 -m gpuscope bench train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --steps 10 --json
step pw_gpt2_full 90 python3 -m gpuscope bench train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --recompute full --steps 10 --json
step pw_1b_none 90 python3 -m gpuscope bench train --model llama-3.2-1b --micro-batch 2 --seq 128 --precision amp-bf16 --steps 10 --json
step pw_eager_1b 90 python3 -m gpuscope bench infer --model llama-3.2-1b --batch 1 --prompt 128 --gen 64 --json
step cal_end 150 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16 --out "$W/cal_end.toml"
fi
if want final3; then  # session 7's final tree: bench all twice (each on its own calibration), separate stores
step bench_all_1 400 python3 -m gpuscope bench all --json
step bench_all_2 400 env GPUSCOPE_DB=$W/gpu_b.sqlite python3 -m gpuscope bench all --json
fi
if want track; then  # session 7: does the host probe follow the host at a workload's timescale? and the host
# passes of one calibration, each with its probe (can the passes be normalised to one host speed?)
step probe_track 200 python3 research/scripts/gpu_probe_track.py --out "$W/probe_track.json" --rounds 150
step host_passes_p 200 python3 -c "import json; from gpuscope.measure.host.costs import host_costs; json.dump(host_costs(passes=5), open('$W/host_passes_probe.json', 'w'), default=str, indent=1)"
step probe_track_2 200 python3 research/scripts/gpu_probe_track.py --out "$W/probe_track_2.json" --rounds 150
fi
if want doctor7; then  # session 7: the doctor's estimate beside the bare run; doctor infer --defer-stop on a GPU
step doctor7_gpt2 100 python3 -m gpuscope doctor train --model gpt2 --micro-batch 2 --seq 128 --precision amp-bf16 --steps 5 --json
step doctor7_defer_1b 150 python3 -m gpuscope doctor infer --model llama-3.2-1b --batch 1 --prompt 128 --gen 64 --engine hf-graph --defer-stop --json
fi
if want track2; then  # session 7: which training phase the probe follows, and a probe that runs backward too
step probe_track_phases 300 python3 research/scripts/gpu_probe_track.py --out "$W/probe_track_phases.json" --rounds 150 --phases
fi
if want final8; then  # session 8: calibration with the probe between its rounds, costs at the passes' median probe;
# the suite twice (separate stores), then one five-pass host calibration with every pass's probe kept
step bench_all_1 400 python3 -m gpuscope bench all --json
step bench_all_2 400 env GPUSCOPE_DB=$W/gpu_b.sqlite python3 -m gpuscope bench all --json
step host_passes_5 200 python3 -c "import json; from gpuscope.measure.host.costs import host_costs; json.dump(host_costs(passes=5), open('$W/host_passes_5.json', 'w'), default=str, indent=1)"
fi
if want final8b; then  # session 8: the suite three times, each workload timed for at least 2 s (min_time_s)
step bench_all_1 200 python3 -m gpuscope bench all --json
step bench_all_2 200 env GPUSCOPE_DB=$W/gpu_b.sqlite python3 -m gpuscope bench all --json
step bench_all_3 190 env GPUSCOPE_DB=$W/gpu_c.sqlite python3 -m gpuscope bench all --json
fi
if want final8c; then  # session 8: the suite twice on calibrations whose every round is taken to a reference speed
step bench_all_1 200 python3 -m gpuscope bench all --json
step bench_all_2 200 env GPUSCOPE_DB=$W/gpu_b.sqlite python3 -m gpuscope bench all --json
fi
if want final9; then  # session 9: the suite twice on calibrations whose training fits are taken to the training probe
# read during the decode passes (040c5dd), then each training phase per family and precision at one probe speed
step bench_all_1 200 python3 -m gpuscope bench all --json
step bench_all_2 200 env GPUSCOPE_DB=$W/gpu_b.sqlite python3 -m gpuscope bench all --json
step train_phases 150 python3 research/scripts/gpu_train_phases.py --out "$W/train_phases.json" --sweeps 2
fi
if want final9b; then  # session 9: the suite twice with the checkpoint priced per layer and the per-call costs whole;
# then the training fits in a fresh process, after the decode passes, after gc.freeze(), fresh again
step bench_all_1 200 python3 -m gpuscope bench all --json
step bench_all_2 200 env GPUSCOPE_DB=$W/gpu_b.sqlite python3 -m gpuscope bench all --json
step train_context 170 python3 research/scripts/gpu_train_context.py --out "$W/train_context.json"
fi
if want final9c; then  # session 9: the suite three times on the final tree, then one sweep of the training phases
step bench_all_1 185 python3 -m gpuscope bench all --json
step bench_all_2 185 env GPUSCOPE_DB=$W/gpu_b.sqlite python3 -m gpuscope bench all --json
step bench_all_3 185 env GPUSCOPE_DB=$W/gpu_c.sqlite python3 -m gpuscope bench all --json
step train_phases 60 python3 research/scripts/gpu_train_phases.py --out "$W/train_phases.json" --sweeps 1
fi
if want final10; then  # session 10: bench all's GPU-sized quick set (8B hf-graph decode, two 1B training steps), twice
step bench_all_1 290 python3 -m gpuscope bench all
step bench_all_2 290 python3 -m gpuscope bench all --json
fi
if want final10b; then  # session 10: the fused 8B prefill against the plain one, then the suite twice more into the
# same store as call 1's two runs (carried in), so the last calibration meets three earlier ones (its history check)
step prefill_fused 100 python3 research/scripts/gpu_prefill_fused.py --out "$W/prefill_fused.json"
step bench_all_3 240 python3 -m gpuscope bench all --json
step bench_all_4 240 python3 -m gpuscope bench all --json
fi
if want final10c; then  # session 10: the suite twice more into call 2's store (carried in): runs 5 and 6
step bench_all_5 250 python3 -m gpuscope bench all --json
step bench_all_6 250 python3 -m gpuscope bench all --json
fi
if want final10d; then  # session 10: what generate adds to the prompt's forward before its first token
step ttft_overhead 150 python3 research/scripts/gpu_ttft_overhead.py --out "$W/ttft_overhead.json"
fi
if want final10e; then  # session 10: the suite once on the final tree (the StaticCache's creation priced in hf-graph TTFT)
step bench_all_7 290 python3 -m gpuscope bench all --json
fi
if want benchall; then
step bench_all_quick 400 python3 -m gpuscope bench all --json
fi
if want ceilings; then
# 5. ceilings: the thorough bf16 matmul sweep, calibration, MoE/attention rates
step micro_thorough 200 python3 -m gpuscope bench micro --thorough --dtype bf16 --json
step calibrate 150 python3 -m gpuscope hardware calibrate --quick --host --dtype bf16,fp16,fp8 --out "$W/h200_calibrated.toml"
step moe_attn 120 python3 research/scripts/gpu_moe_attn_check.py --out "$W/moe_attn.json"
fi
ls -la "$W"
