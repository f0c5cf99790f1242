#!/usr/bin/env bash
# call4 of 2026-12-02-h200-c (<= 90 s; one archive $OUT/gpu_serve6/gpu_serve6.tgz): what makes a mixed step (a
# decode batch plus one or a few 1024-token prompts) longer than planned (serve.md, "Mixed prefill + decode steps").
# One CB workload, 32-layer Llama-3.1-8B, random bf16, paged|sdpa as bench serve runs it (gpu_serve_cb's build and
# instrument): 64 requests of 1024 in / 72 out decode; after their prefill, new 1024-token prompts (6 tokens out)
# are added from the engine's own loop right before the step that takes them: 1 prompt at decode steps 8, 18, 28,
# 4 prompts at 38, 48, 58. The step before each arrival, the mixed step(s) and the step after are each profiled on
# their own (one torch.profiler session a step, CUDA activity): per step its wall (prepare + forward + update), GPU
# busy (sum of kernel times), the attention kernels (names, count, time), the top kernels by time, and the longest
# host gaps with no CUDA runtime call (the cuDNN graph build, as gpu_serve5.sh cudnn measures it). Every step's
# timings (profiled or not) are kept. One JSON: serve6.json.
# usage (GPU machine): bash research/scripts/gpu_serve6.sh     CPU proof: OUT=/tmp/o bash research/scripts/gpu_serve6.sh --tiny
set -u
T0=$(date +%s); BUNDLE=gpu_serve6/gpu_serve6.tgz
W=$(mktemp -d /tmp/gs_serve6.XXXXXX); mkdir -p "$W/serve6" "$OUT/gpu_serve6"
export PYTHONPATH=src:research/scripts
TINY=0; [ "${1:-}" = "--tiny" ] && { TINY=1; shift; }
# --case JSON: another workload, keys n, p, g, ap, ag (as below) and arrive {"decode step": prompts}
S6_CASE='{}'; [ "${1:-}" = "--case" ] && S6_CASE=$2
export S6_CASE
[ $TINY = 0 ] && nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.max.sm --format=csv \
  > "$W/serve6/nvidia-smi.csv" 2>&1
git rev-parse HEAD > "$W/serve6/git.txt" 2>/dev/null
echo "timeout 80 python3 - (gpu_serve6.sh's mixed-step profile) tiny=$TINY case=$S6_CASE" > "$W/serve6/cmd.txt"
TINY=$TINY PROBE_OUT=$W/serve6 timeout 80 python3 - > "$W/serve6/run.out" 2>&1 <<'EOF'
import collections, json, os, time
import torch
from gpu_serve_cb import build, instrument
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig
from transformers.generation.continuous_batching.utils import WorkloadHints

tiny = os.environ["TINY"] == "1"
out = os.environ["PROBE_OUT"]
t0 = time.perf_counter()
model, cfg = build("cpu" if tiny else "cuda", 32, tiny)
n, p, g, ap, ag = (16, 32, 72, 32, 6) if tiny else (64, 1024, 72, 1024, 6)
ARRIVE = {8: 1, 18: 1, 28: 1, 38: 4, 48: 4, 58: 4}  # decode-phase step index -> prompts added before it
case = json.loads(os.environ.get("S6_CASE") or "{}")
n, p, g, ap, ag = (case.get(k, v) for k, v in zip(("n", "p", "g", "ap", "ag"), (n, p, g, ap, ag)))
ARRIVE = {int(k): v for k, v in case["arrive"].items()} if "arrive" in case else ARRIVE
PROF = {d + k for d, c in ARRIVE.items() for k in ((-1, 0, 1) if c == 1 else (-1, 0, 1, 2))}
CUDA = torch.autograd.DeviceType.CUDA
res = {"versions": [torch.__version__, __import__("transformers").__version__], "tiny": tiny, "requests": n,
       "prompt": p, "gen": g, "arrival_prompt": ap, "arrival_gen": ag, "arrivals": ARRIVE, "profiled": sorted(PROF)}
cb = ContinuousBatchingConfig(num_blocks=(n + 16) * ((p + g) // 256 + 2), max_batch_tokens=512) if tiny else \
    ContinuousBatchingConfig()
m = model.init_continuous_batching(generation_config=GenerationConfig(max_new_tokens=g, do_sample=False,
                                                                      eos_token_id=-1),
                                   continuous_batching_config=cb,  # hints of all the requests: they cap a batch's requests
                                   workload_hints=WorkloadHints(p, g, n + sum(ARRIVE.values())))
acts = [torch.profiler.ProfilerActivity.CPU if tiny else torch.profiler.ProfilerActivity.CUDA]
rec, profs, st = [], [], {"d": -1, "prof": None, "added": 0}
m.start()
while getattr(m, "batch_processor", None) is None:
    time.sleep(0.005)
bp = m.batch_processor
instrument(bp, rec)
pn = bp.prepare_next_batch
vocab = cfg.vocab_size


def prep():  # runs on the engine's thread before each step's prepare_next_batch
    if st["prof"] is not None:  # the previous step was profiled: close its session
        st["prof"].stop(); profs.append((len(rec) - 1, st["prof"])); st["prof"] = None
    if st["d"] >= 0:
        st["d"] += 1
    elif rec and rec[-1]["q"] == rec[-1]["requests"] == n:
        st["d"] = 1  # the step after the first all-decode step
    d = st["d"]
    for _ in range(ARRIVE.get(d, 0)):
        k = st["added"]; st["added"] += 1
        m.add_request([3 + (11 * k + j) % (vocab - 4) for j in range(ap)], request_id=f"a{k}", max_new_tokens=ag)
    if d in PROF:
        st["prof"] = torch.profiler.profile(activities=acts); st["prof"].start()
    r = pn()
    rec[-1].update(d=d, arrived=ARRIVE.get(d, 0), profiled=d in PROF)
    return r


bp.prepare_next_batch = prep
for i in range(n):
    m.add_request([1 + (7 * i + j) % (vocab - 2) for j in range(p)], request_id=f"r{i}", max_new_tokens=g)
got, total = 0, n + sum(ARRIVE.values())
while got < total and (o := m.get_result(timeout=30)) is not None:
    got += o.is_finished()
m.stop(block=True)
if st["prof"] is not None:
    st["prof"].stop(); profs.append((len(rec) - 1, st["prof"]))
res.update(finished=got, expected=total, run_s=time.perf_counter() - t0, step_records=rec, profiles=[])


def summary(ev) -> dict:
    kern = [e for e in ev if e.device_type == CUDA] if not tiny else \
        [e for e in ev if e.name.startswith("aten::") and e.cpu_parent is None]
    calls = sorted((e.time_range.start, e.time_range.end, e.name) for e in ev
                   if e.device_type != CUDA and e.name.startswith("cu"))
    if tiny:  # no CUDA calls on a CPU: the gaps between top-level aten ops stand in (the code path is what is checked)
        calls = sorted((e.time_range.start, e.time_range.end, e.name) for e in kern)
    gaps = sorted(((b[0] - a[1], a[2], b[2]) for a, b in zip(calls, calls[1:])), reverse=True)
    by = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for e in kern:
        d = e.time_range.elapsed_us(); b = by[e.name[:100]]
        b[0] += 1; b[1] += d; b[2] = max(b[2], d)
    attn = {k: v for k, v in by.items() if any(s in k.lower() for s in ("sdpa", "attention", "fmha", "flash"))}
    top = sorted(by.items(), key=lambda kv: -kv[1][1])[:15]
    span = (max(e.time_range.end for e in kern) - min(e.time_range.start for e in kern)) if kern else 0
    return {"kernels": len(kern), "gpu_busy_s": sum(v[1] for v in by.values()) * 1e-6, "kernel_span_s": span * 1e-6,
            "attention_s": sum(v[1] for v in attn.values()) * 1e-6,
            "attention": {k: {"count": v[0], "total_us": round(v[1], 1), "max_us": round(v[2], 1)} for k, v in attn.items()},
            "top_kernels": [{"name": k, "count": v[0], "total_us": round(v[1], 1), "max_us": round(v[2], 1)} for k, v in top],
            "longest_host_gaps": [{"s": x * 1e-6, "after": a[:60], "before": b[:60]} for x, a, b in gaps[:4]],
            "runtime_calls": len(calls)}


for i, prof in profs:
    row = {"record": i, **{k: rec[i].get(k) for k in ("d", "arrived", "requests", "q", "kv", "prep_s", "fwd_s", "upd_s")}}
    try:
        row.update(summary(prof.events()), profile_error=None)
    except Exception as e:  # the step timings stay
        row["profile_error"] = f"{type(e).__name__}: {e}"
    res["profiles"].append(row)
res["post_s"] = time.perf_counter() - t0
json.dump(res, open(os.path.join(out, "serve6.json"), "w"), indent=1)
for r in res["profiles"]:
    print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
           if k in ("d", "arrived", "requests", "q", "kv", "fwd_s", "gpu_busy_s", "attention_s", "profile_error")},
          [(g["s"], g["before"]) for g in r.get("longest_host_gaps", [])[:1]], list(r.get("attention", {}))[:2])
print({k: res[k] for k in ("finished", "expected", "run_s", "post_s")}, flush=True)
EOF
echo "rc=$? $(( $(date +%s) - T0 )) s" >> "$W/serve6/cmd.txt"
tar czf "$OUT/$BUNDLE" -C "$W" serve6
