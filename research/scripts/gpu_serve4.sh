#!/usr/bin/env bash
# call3 of 2026-12-02-h200-b (150 s in all, one archive $OUT/gpu_serve4/gpu_serve4.tgz: a call returns <= 8 files):
# 1. why transformers CB decode steps of 20-180 requests take longer than plan serve says (the c64 waves of call2
#    and the offline runs' drains; research/results/2026-12-02-h200-b/serve.md): is the GPU busy for the whole step,
#    or does it wait on the host? Full Llama-3.1-8B (32 layers, random bf16, paged|sdpa as bench serve runs it), two
#    offline workloads with the same KV read at decode, 64 x 512/24 and 16 x 2048/24: every step's phases timed
#    (gpu_serve_cb.py's instrument: prepare, forward + sync, update), 8 decode steps in the middle under
#    torch.profiler (CUDA activity only): their kernel time summed (GPU busy) against the steps' wall, top kernels.
#    Limit 55 s.
# 2. then gpu_serve2.sh's rate10 (Poisson 10 req/s, 128 x 512/128, bench serve in-process; planned 27.6 s + ~19 s
#    set-up) in the time left (<= 85 s).
# usage (GPU machine): bash research/scripts/gpu_serve4.sh     CPU proof: OUT=/tmp/o bash research/scripts/gpu_serve4.sh --tiny
set -u
T0=$(date +%s); BUDGET=150
W=$(mktemp -d /tmp/gs_serve4.XXXXXX); mkdir -p "$W/prof" "$OUT/gpu_serve4"
TINY=0; [ "${1:-}" = "--tiny" ] && TINY=1
pack() { tar czf "$OUT/gpu_serve4/gpu_serve4.tgz" -C "$W" . ; }
echo "timeout 55 python3 - (gpu_serve4.sh's profile probe) tiny=$TINY" > "$W/prof/cmd.txt"
TINY=$TINY PROF_OUT=$W/prof PYTHONPATH=src:research/scripts timeout 55 python3 - > "$W/prof/run.out" 2>&1 <<'EOF'
import json, os, statistics, time
import torch
from gpu_serve_cb import build, instrument
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig
from transformers.generation.continuous_batching.utils import WorkloadHints

tiny = os.environ["TINY"] == "1"
dev = "cpu" if tiny else "cuda"
out = os.path.join(os.environ["PROF_OUT"], "prof.json")
model, cfg = build(dev, 32, tiny)
res = {"versions": [torch.__version__, __import__("transformers").__version__], "layers": cfg.num_hidden_layers,
       "workloads": []}
# CUDA activity only on the GPU (recording CPU ops would slow the host it measures); the other steps, unprofiled,
# are in step_records for comparison
acts = [torch.profiler.ProfilerActivity.CPU if tiny else torch.profiler.ProfilerActivity.CUDA]


def run(n, p, g, prof_from=8, prof_steps=8):
    cb = ContinuousBatchingConfig(num_blocks=n * ((p + g) // 256 + 2), max_batch_tokens=512) if tiny else \
        ContinuousBatchingConfig()
    m = model.init_continuous_batching(generation_config=GenerationConfig(max_new_tokens=g, do_sample=False,
                                                                          eos_token_id=-1),
                                       continuous_batching_config=cb, workload_hints=WorkloadHints(p, g, n))
    rec, prof = [], torch.profiler.profile(activities=acts)
    m.start()
    while getattr(m, "batch_processor", None) is None:
        time.sleep(0.005)
    bp = m.batch_processor
    instrument(bp, rec)
    pn = bp.prepare_next_batch
    dec = []

    def prep():  # the profiler spans prof_steps whole decode steps (prepare, forward, update)
        r = pn()
        if rec and rec[-1]["q"] == rec[-1]["requests"] > 0:
            dec.append(len(rec) - 1)
            if len(dec) == prof_from:
                prof.start()
            elif len(dec) == prof_from + prof_steps:
                prof.stop()
        return r
    bp.prepare_next_batch = prep
    for i in range(n):
        m.add_request([1 + (7 * i + j) % (cfg.vocab_size - 2) for j in range(p)], request_id=f"r{i}",
                      max_new_tokens=g)
    got = 0
    while got < n and (o := m.get_result(timeout=60)) is not None:
        got += o.is_finished()
    m.stop(block=True)
    getattr(m, "destroy", lambda: None)()  # free its cache for the next workload (bench serve does the same)
    del m, bp
    if not tiny:
        torch.cuda.empty_cache()
    win = rec[dec[prof_from - 1]:dec[prof_from + prof_steps - 1]]  # the profiled steps (prepare of the next excluded)
    wall = sum(r["prep_s"] + r["fwd_s"] + r.get("upd_s", 0) for r in win)
    try:  # a profiler that fails to read back leaves the step timings
        kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA] if not tiny else []
        busy = sum(e.time_range.elapsed_us() for e in kern) * 1e-6 if kern else None  # one stream: no overlap
        tops = sorted(prof.key_averages(), key=lambda k: -(k.self_device_time_total if not tiny else
                                                            k.self_cpu_time_total))
        perr = None
    except Exception as e:
        kern, busy, tops, perr = [], None, [], f"{type(e).__name__}: {e}"
    w = {"requests": n, "prompt": p, "gen": g, "finished": got, "profiled_steps": len(win),
         "kv_median": statistics.median(r["kv"] for r in win), "wall_s_per_step": wall / len(win),
         "wall_s_median": statistics.median(r["prep_s"] + r["fwd_s"] + r.get("upd_s", 0) for r in win),
         "prep_s": statistics.median(r["prep_s"] for r in win), "fwd_s": statistics.median(r["fwd_s"] for r in win),
         "gpu_busy_s_per_step": busy / len(win) if busy is not None else None, "kernels_per_step": len(kern) / len(win),
         "profile_error": perr, "top": [{"name": k.key[:80], "count": k.count, "device_s": k.self_device_time_total * 1e-6,
                  "cpu_s": k.self_cpu_time_total * 1e-6} for k in tops[:15]],
         "step_records": rec}
    res["workloads"].append(w)
    json.dump(res, open(out, "w"), indent=1)
    print({k: v for k, v in w.items() if k not in ("top", "step_records")}, flush=True)


for n, p, g in ([(16, 32, 20), (4, 128, 20)] if tiny else [(64, 512, 24), (16, 2048, 24)]):
    run(n, p, g)
EOF
echo "rc=$? $(( $(date +%s) - T0 )) s" >> "$W/prof/cmd.txt"; pack
left=$(( BUDGET - ($(date +%s) - T0) - 5 ))
GS_BUDGET=$(( left < 92 ? left : 92 )) GS_BUNDLE=serve2.tgz OUT=$W bash "$(dirname "$0")/gpu_serve2.sh" \
  $([ $TINY = 1 ] && echo --tiny) rate10 > "$W/serve2.log" 2>&1
pack
