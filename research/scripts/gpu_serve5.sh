#!/usr/bin/env bash
# call2 of 2026-12-02-h200-c (150 s in all; one archive $OUT/gpu_serve5/gpu_serve5.tgz: a call returns <= 8 files):
# 1. an independent check of plan serve under arrivals at another size and rate than call1's Poisson 10 req/s
#    (128 x 512/128): `bench serve --model llama-3.1-8b` in-process, Poisson 4 req/s, 96 requests 1024 in / 128 out,
#    seed 0 (prompts twice as long: mixed steps carry 1024-token prefills against the whole batch's KV).
#    Planned before the run in research/results/2026-12-02-h200-c/serve.md; limit 100 s, set-up (~19 s) included.
# 2. in the time left (>= 30 s), the mechanism probe: one CB workload (64 x 512/20, 32-layer Llama-3.1-8B, random
#    bf16, paged|sdpa as bench serve runs it), 3 decode steps under torch.profiler (CUDA activity: kernels and the
#    CUDA runtime calls), the chrome trace kept (trace.json) and a summary: per step its wall, GPU busy, the GPU's
#    idle gaps, and the runtime calls by name (count, total and longest duration): does the host wait inside a step
#    (a synchronising call, a blocking launch), or does the GPU wait on launches?
# `bash research/scripts/gpu_serve5.sh [--tiny] cudnn` (a later call: GS_ARGS_serve5=cudnn, <= 90 s) runs only a check
# of the mechanism call 2's trace showed: the same CB workload (64 x 512/20) with torch's cuDNN SDPA on, off
# (torch.backends.cuda.enable_cudnn_sdp(False): the memory-efficient kernel, no graph to build) and on again, 2 decode
# steps of each traced: the decode steps' wall, GPU busy and the longest host gaps with no CUDA call.
# usage (GPU machine): bash research/scripts/gpu_serve5.sh     CPU proof: OUT=/tmp/o bash research/scripts/gpu_serve5.sh --tiny
set -u
T0=$(date +%s); BUDGET=${GS_BUDGET:-150}; BUNDLE=gpu_serve5/gpu_serve5.tgz
W=$(mktemp -d /tmp/gs_serve5.XXXXXX); mkdir -p "$W/probe" "$OUT/gpu_serve5"
export PYTHONPATH=src:research/scripts GPUSCOPE_DB=$W/gpu_serve.sqlite GPUSCOPE_HOME=$W/home
source "$(dirname "$0")/session_lib.sh"
L8=llama-3.1-8b; DEV=(); GPU=(--gpu h200); K=1
TINY=0; [ "${1:-}" = "--tiny" ] && { TINY=1; shift; }
if [ "${1:-}" = "cudnn" ]; then
  BUNDLE=gpu_serve5/gpu_serve5_cudnn.tgz; mkdir -p "$W/cudnn"
  echo "timeout 85 python3 - (gpu_serve5.sh's cuDNN SDPA on/off probe) tiny=$TINY" > "$W/cudnn/cmd.txt"
  TINY=$TINY PROBE_OUT=$W/cudnn timeout 85 python3 - > "$W/cudnn/run.out" 2>&1 <<'EOF'
import json, os, statistics, time
import torch
from gpu_serve_cb import build, instrument
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig
from transformers.generation.continuous_batching.utils import WorkloadHints

tiny = os.environ["TINY"] == "1"
out = os.environ["PROBE_OUT"]
model, cfg = build("cpu" if tiny else "cuda", 32, tiny)
n, p, g, prof_from, prof_steps = (16, 32, 10, 3, 2) if tiny else (64, 512, 20, 8, 2)
res = {"versions": [torch.__version__, __import__("transformers").__version__], "requests": n, "prompt": p, "gen": g,
       "runs": []}


def one(cudnn: bool) -> dict:
    if not tiny:
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
    cb = ContinuousBatchingConfig(num_blocks=n * ((p + g) // 256 + 2), max_batch_tokens=512) if tiny else \
        ContinuousBatchingConfig()
    m = model.init_continuous_batching(generation_config=GenerationConfig(max_new_tokens=g, do_sample=False,
                                                                          eos_token_id=-1),
                                       continuous_batching_config=cb, workload_hints=WorkloadHints(p, g, n))
    acts = [torch.profiler.ProfilerActivity.CPU if tiny else torch.profiler.ProfilerActivity.CUDA]
    rec, prof, dec = [], torch.profiler.profile(activities=acts), []
    m.start()
    while getattr(m, "batch_processor", None) is None:
        time.sleep(0.005)
    bp = m.batch_processor
    instrument(bp, rec)
    pn = bp.prepare_next_batch

    def prep():
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
    while got < n and (o := m.get_result(timeout=20)) is not None:
        got += o.is_finished()
    m.stop(block=True)
    getattr(m, "destroy", lambda: None)()
    decs = [r for r in rec if r.get("fwd_s") and r["q"] == r["requests"] == n]
    row = {"cudnn_sdp": cudnn, "finished": got, "decode_steps": len(decs),
           "wall_s_median": statistics.median(r["prep_s"] + r["fwd_s"] + r.get("upd_s", 0) for r in decs) if decs else None,
           "fwd_s_median": statistics.median(r["fwd_s"] for r in decs) if decs else None,
           "kv_median": statistics.median(r["kv"] for r in decs) if decs else None, "step_records": rec}
    try:
        ev = prof.events()
        kern = [e for e in ev if e.device_type == torch.autograd.DeviceType.CUDA]
        calls = sorted((e.time_range.start, e.time_range.end, e.name) for e in ev
                       if e.device_type != torch.autograd.DeviceType.CUDA and e.name.startswith("cu"))
        gaps = sorted((b[0] - a[1] for a, b in zip(calls, calls[1:])), reverse=True)
        row.update(gpu_busy_s_per_step=sum(e.time_range.elapsed_us() for e in kern) * 1e-6 / prof_steps,
                   attention_kernels=sorted({e.name[:60] for e in kern if any(
                       s in e.name.lower() for s in ("sdpa", "attention", "fmha"))})[:6],
                   longest_host_gaps_s=[x * 1e-6 for x in gaps[:4]], profile_error=None)
    except Exception as e:
        row["profile_error"] = f"{type(e).__name__}: {e}"
    if not tiny:
        torch.cuda.empty_cache()
    return row


for cudnn in (True, False, True):
    row = one(cudnn)
    res["runs"].append(row)
    json.dump(res, open(os.path.join(out, "cudnn.json"), "w"), indent=1)
    print({k: v for k, v in row.items() if k != "step_records"}, flush=True)
EOF
  echo "rc=$? $(( $(date +%s) - T0 )) s" >> "$W/cudnn/cmd.txt"
  tar czf "$OUT/$BUNDLE" -C "$W" . ; exit 0
fi
if [ $TINY = 1 ]; then
  python3 -c "import json; from gpuscope.measure.models.tiny import TINY; \
json.dump(dict(TINY['llama'], num_hidden_layers=2, max_position_embeddings=4096), open('$W/tiny.json', 'w'))"
  L8=$W/tiny.json; DEV=(--device cpu --dtype fp32); GPU=(); K=16
else
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv > "$W/nvidia-smi.csv"
fi
python3 -c "import transformers, torch; print(transformers.__version__, torch.__version__)" > "$W/versions.txt" 2>&1
git rev-parse HEAD > "$W/git.txt" 2>/dev/null
# 1. the Poisson run (its own process; bench's --timeout 10 s under the process limit, so an overrun is stored)
n=$(( 96 / K )); p=$(( 1024 / K )); g=$(( 128 / K )); limit=100
cmd=(python3 -m gpuscope bench serve --json "${GPU[@]}" "${DEV[@]}" --model "$L8" --requests $n --prompt $p --gen $g
     --rate 4 --seed 0 --timeout $(( limit - 10 )))
echo "timeout $limit ${cmd[*]}" > "$W/serve_8b_n96_p1024_g128_rate4.cmd"
step serve_8b_n96_p1024_g128_rate4 "$limit" "${cmd[@]}"
python3 -m gpuscope results list --kind serve > "$W/results_list.txt" 2>&1
# 2. the probe, bounded by what is left of the budget
left=$(( BUDGET - ($(date +%s) - T0) - 4 ))
if (( left < 30 )); then echo "probe skipped: $left s left < 30 s" | tee -a "$W/steps.txt"; tar czf "$OUT/$BUNDLE" -C "$W" .; exit 0; fi
echo "timeout $left python3 - (gpu_serve5.sh's trace probe) tiny=$TINY" > "$W/probe/cmd.txt"
TINY=$TINY PROBE_OUT=$W/probe timeout "$left" python3 - > "$W/probe/run.out" 2>&1 <<'EOF'
import collections, json, os, time
import torch
from gpu_serve_cb import build, instrument
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig
from transformers.generation.continuous_batching.utils import WorkloadHints

tiny = os.environ["TINY"] == "1"
out = os.environ["PROBE_OUT"]
model, cfg = build("cpu" if tiny else "cuda", 32, tiny)
n, p, g, prof_from, prof_steps = (16, 32, 12, 4, 3) if tiny else (64, 512, 20, 6, 3)
acts = [torch.profiler.ProfilerActivity.CPU if tiny else torch.profiler.ProfilerActivity.CUDA]
cb = ContinuousBatchingConfig(num_blocks=n * ((p + g) // 256 + 2), max_batch_tokens=512) if tiny else \
    ContinuousBatchingConfig()
m = model.init_continuous_batching(generation_config=GenerationConfig(max_new_tokens=g, do_sample=False,
                                                                      eos_token_id=-1),
                                   continuous_batching_config=cb, workload_hints=WorkloadHints(p, g, n))
rec, prof, marks = [], torch.profiler.profile(activities=acts), []
m.start()
while getattr(m, "batch_processor", None) is None:
    time.sleep(0.005)
bp = m.batch_processor
instrument(bp, rec)
pn, dec = bp.prepare_next_batch, []


def prep():  # the profiler spans prof_steps whole decode steps; each step's start kept (perf_counter, us)
    if len(dec) >= prof_from and len(dec) <= prof_from + prof_steps:
        marks.append(time.perf_counter() * 1e6)
    r = pn()
    if rec and rec[-1]["q"] == rec[-1]["requests"] > 0:
        dec.append(len(rec) - 1)
        if len(dec) == prof_from:
            prof.start()
            marks.append(time.perf_counter() * 1e6)
        elif len(dec) == prof_from + prof_steps:
            prof.stop()
    return r


bp.prepare_next_batch = prep
for i in range(n):
    m.add_request([1 + (7 * i + j) % (cfg.vocab_size - 2) for j in range(p)], request_id=f"r{i}", max_new_tokens=g)
got = 0
while got < n and (o := m.get_result(timeout=60)) is not None:
    got += o.is_finished()
m.stop(block=True)
res = {"versions": [torch.__version__, __import__("transformers").__version__], "requests": n, "prompt": p,
       "gen": g, "finished": got, "step_records": rec, "profiled_from_record": dec[prof_from - 1] if dec else None}
try:
    prof.export_chrome_trace(os.path.join(out, "trace.json"))
    ev = prof.events()
    kern = sorted((e.time_range.start, e.time_range.end, e.name) for e in ev
                  if e.device_type == torch.autograd.DeviceType.CUDA)
    busy = sum(b - a for a, b, _ in kern)
    gaps = [b[0] - a[1] for a, b in zip(kern, kern[1:]) if b[0] > a[1]]
    calls = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for e in ev:
        if e.device_type != torch.autograd.DeviceType.CUDA and e.name.startswith(("cuda", "cu")):
            c = calls[e.name]
            d = e.time_range.end - e.time_range.start
            c[0] += 1; c[1] += d; c[2] = max(c[2], d)
    res.update(kernels=len(kern), gpu_busy_us=busy, span_us=(kern[-1][1] - kern[0][0]) if kern else None,
               gaps_us_total=sum(gaps), gaps_over_20us=sum(1 for x in gaps if x > 20),
               gaps_over_200us=[round(x) for x in gaps if x > 200][:200],
               runtime_calls={k: {"count": v[0], "total_us": v[1], "max_us": v[2]} for k, v in calls.items()},
               profile_error=None)
except Exception as e:  # the step timings stay
    res["profile_error"] = f"{type(e).__name__}: {e}"
json.dump(res, open(os.path.join(out, "probe.json"), "w"), indent=1)
print({k: v for k, v in res.items() if k not in ("step_records", "gaps_over_200us", "runtime_calls")}, flush=True)
print(json.dumps(res.get("runtime_calls", {}))[:3000])
EOF
echo "rc=$? $(( $(date +%s) - T0 )) s" >> "$W/probe/cmd.txt"
tar czf "$OUT/$BUNDLE" -C "$W" .
