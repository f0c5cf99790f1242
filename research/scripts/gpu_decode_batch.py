"""Issue 26 items 2 and 3: why decode at batch 4-16 runs slower than planned, as data for the lead to read the
mechanism from (this script changes no model and fits nothing).

Cases (Llama-3.1-8B random weights, bf16, SDPA, 2,048-token prompts, attention_mask given, greedy,
min_new_tokens = max_new_tokens): plain `generate` (hf-eager, DynamicCache) at batch 1, 4 and 16, and graph-unfused
(gpuscope's gs-graph: HF's eager kernels replayed from one CUDA graph over a StaticCache) at batch 1 and 16.
For each case, without the profiler:
- TTFT (gen 1) and E2E (gen ``--gen``), TPOT = (E2E - TTFT) / (gen - 1) (the bench's formula);
- hf-eager only, a per-step host and device timeline from a LogitsProcessor called once a step: host
  ``perf_counter`` at each call and a CUDA event recorded there (the device's step span = between two events);
  host_step_s against device_step_s says whether the host or the device sets the pace;
then, under torch.profiler (CPU + CUDA, no shapes), a run of ``--prof-gen`` tokens:
- the decode steps' kernel table (device time and count per kernel name and step, top 30): the profiled generate
  less a profiled prefill-only run (gen 1) of the same batch, divided by gen - 1;
- the host's table the same way (self CPU time per op and step, top 30);
- the device's busy time (union of kernel intervals) per step against the step's wall time;
- the kernels whose names say cache growth (cat/copy), masks (where/masked_fill/arange/triu) or attention (sdpa/
  flash/efficient/gemv/gemm), summed per step, so the batch 1 -> 16 growth of each is one subtraction;
- for hf-eager at batch 1 and 16, a gzipped Chrome trace (open in Perfetto) for the host timeline itself.
Output: $OUT/decode_batch.json (+ $OUT/trace_<case>.json.gz). Budget: about 90 s on an H200 (--budget-s, 70 s,
stops starting new cases past it; a started case finishes). CPU check: PYTHONPATH=src python research/scripts/gpu_decode_batch.py --tiny
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import time

import torch

from gpuscope.measure.device.device import Device
from gpuscope.measure.llm.infer import generate
from gpuscope.measure.models.hf_model import build_model, case_config
from gpuscope.measure.profile.summary import is_device

CASES = [("hf-eager", 1), ("hf-eager", 4), ("hf-eager", 16), ("gs-graph", 1), ("gs-graph", 16)]
GROUPS = {"cache_cat_copy": ("cat", "copy", "index_put", "scatter"),
          "mask": ("where", "masked_fill", "arange", "triu", "tril", "compare", "bitwise", "logical"),
          "attention": ("sdpa", "flash", "fmha", "efficient_attention", "attention", "softmax"),
          "matmul": ("gemm", "gemv", "cutlass", "sm90", "nvjet", "xmma", "cublas")}


class StepMarker:
    """A LogitsProcessor: one host timestamp and one CUDA event per generated token (the logits are ready on the
    stream then)."""

    def __init__(self, dev: Device):
        self.dev, self.host, self.events = dev, [], []

    def __call__(self, input_ids, scores):
        self.host.append(time.perf_counter())
        if self.dev.type == "cuda":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.events.append(e)
        return scores


def run(model, ids, mask, gen: int, engine: str, dev: Device, marker=None, cache_len: int | None = None) -> float:
    dev.synchronize()
    t = time.perf_counter()
    if cache_len is not None:  # gs-graph: a TTFT inside the kept cache of the full run (its graph, its slots)
        generate(model, ids, mask, gen, engine, cache_len=cache_len)
    elif marker is not None:
        from transformers import LogitsProcessorList

        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=gen, min_new_tokens=gen,
                       do_sample=False, logits_processor=LogitsProcessorList([marker]))
    else:
        generate(model, ids, mask, gen, engine)
    dev.synchronize()
    return time.perf_counter() - t


def timeline(marker: StepMarker) -> dict:
    """Per decode step (between consecutive tokens): host seconds and device span seconds, median and all."""
    host = [b - a for a, b in zip(marker.host, marker.host[1:])]
    devs = [a.elapsed_time(b) / 1e3 for a, b in zip(marker.events, marker.events[1:])]
    out = {"host_step_s": host, "host_step_median_s": statistics.median(host) if host else None}
    if devs:
        out.update(device_step_s=devs, device_step_median_s=statistics.median(devs))
    return out


def _aggregate(prof) -> tuple[dict, dict, list]:
    """{kernel name: [count, device s]}, {host op: [count, self CPU s]}, kernel intervals (us)."""
    kern: dict[str, list] = {}
    host: dict[str, list] = {}
    spans = []
    for e in prof.events():
        if is_device(e):
            a = kern.setdefault(e.name, [0, 0.0])
            a[0] += 1
            a[1] += (e.time_range.end - e.time_range.start) / 1e6
            spans.append((e.time_range.start, e.time_range.end))
        else:
            a = host.setdefault(e.name, [0, 0.0])
            a[0] += 1
            a[1] += e.self_cpu_time_total / 1e6
    return kern, host, spans


def _busy_s(spans: list) -> float:
    """The union of kernel intervals, seconds."""
    busy, cur = 0.0, None
    for s, t in sorted(spans):
        if cur is None or s > cur[1]:
            busy += (cur[1] - cur[0]) if cur else 0.0
            cur = [s, t]
        else:
            cur[1] = max(cur[1], t)
    return (busy + ((cur[1] - cur[0]) if cur else 0.0)) / 1e6


def _minus(a: dict, b: dict) -> dict:
    """Per name: a - b (the generate run less its prefill run), names left with nothing dropped."""
    out = {k: [v[0] - b.get(k, [0, 0.0])[0], v[1] - b.get(k, [0, 0.0])[1]] for k, v in a.items()}
    return {k: v for k, v in out.items() if v[0] > 0 or v[1] > 1e-9}


def decode_tables(gen_prof, prefill_prof, steps: int, wall_s: float, prefill_wall_s: float) -> dict:
    """The decode steps' kernel and host tables (the gen run less the prefill-only run, per step), the device's busy
    time per step against the wall time per step, and the named kernel groups per step (module docstring)."""
    gk, gh, gs = _aggregate(gen_prof)
    pk, ph, ps = _aggregate(prefill_prof)
    kern, host = _minus(gk, pk), _minus(gh, ph)
    table = sorted(({"name": k[:160], "per_step_us": v[1] / steps * 1e6, "per_step_count": v[0] / steps}
                    for k, v in kern.items()), key=lambda d: -d["per_step_us"])
    host_table = sorted(({"name": k[:160], "per_step_us": v[1] / steps * 1e6, "per_step_count": v[0] / steps}
                         for k, v in host.items()), key=lambda d: -d["per_step_us"])
    groups = {g: sum(r["per_step_us"] for r in table if any(w in r["name"].lower() for w in words))
              for g, words in GROUPS.items()}
    return {"kernels_top": table[:30], "host_top": host_table[:30],
            "kernels_per_step": sum(v[0] for v in kern.values()) / steps,
            "kernel_s_per_step": sum(v[1] for v in kern.values()) / steps,
            "busy_s_per_step": (_busy_s(gs) - _busy_s(ps)) / steps,
            "wall_s_per_step_profiled": (wall_s - prefill_wall_s) / steps, "groups_us_per_step": groups,
            "prefill_kernel_s": sum(v[1] for v in pk.values())}


def host_probe_s(n: int = 200) -> float:
    """Host seconds of ``n`` small CPU tensor adds (dispatcher + allocator, no GPU): the host's speed beside each
    case, so a step that grows while this does is the host drifting, not the workload (the 2026-12-02 run: one
    batch-4 run's steps went from ~73 to ~111 ms at step 18 with nothing else changing)."""
    x = torch.ones(8)
    t = time.perf_counter()
    for _ in range(n):
        x = x + 1.0
    return (time.perf_counter() - t) / n


def profile_case(model, ids, mask, gen: int, engine: str, dev: Device, trace: str | None) -> dict:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    if engine != "hf-eager":
        # capture this length's graph before profiling: a capture inside the profiled run adds its 3 eager
        # warm-up passes to the 'per step' tables (the 2026-12-02 tables hold 10 passes for 7 steps)
        run(model, ids, mask, gen, engine, dev)
    cache = ids.shape[1] + gen if engine != "hf-eager" else None
    with profile(activities=acts, record_shapes=False) as prefill_prof:
        t_prefill = run(model, ids, mask, 1, engine, dev, cache_len=cache)
    with profile(activities=acts, record_shapes=False) as prof:
        wall = run(model, ids, mask, gen, engine, dev)
    res = decode_tables(prof, prefill_prof, gen - 1, wall, t_prefill)
    if trace:
        raw = trace[:-3]
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as f, gzip.open(trace, "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(raw)
        res["trace"] = os.path.basename(trace)
    return res


def one_case(model, cfg_vocab: int, engine: str, batch: int, a, dev: Device) -> dict:
    g = torch.Generator(device=dev.torch_device).manual_seed(batch)
    ids = torch.randint(0, cfg_vocab, (batch, a.prompt), device=dev.torch_device, generator=g)
    mask = torch.ones_like(ids)
    # warm-up at the timed length: for gs-graph the graph of (batch, prompt + gen) is captured here, outside the
    # timed run (a warm-up at another length left the capture inside the 2026-12-02 run's TPOTs), and the TTFT
    # runs inside that cache as the bench's does
    probe0 = host_probe_s()
    run(model, ids, mask, a.gen, engine, dev)
    cache = a.prompt + a.gen if engine != "hf-eager" else None
    ttft = statistics.median(run(model, ids, mask, 1, engine, dev, cache_len=cache) for _ in range(2))
    out = {"engine": engine, "batch": batch, "prompt": a.prompt, "gen": a.gen, "ttft_s": ttft,
           "host_probe_before_s": probe0}
    if engine == "hf-eager":
        marker = StepMarker(dev)
        e2e = run(model, ids, mask, a.gen, engine, dev, marker)
        out.update(timeline(marker))
    else:
        e2e = run(model, ids, mask, a.gen, engine, dev)
    out.update(e2e_s=e2e, tpot_s=(e2e - ttft) / (a.gen - 1))
    trace = (os.path.join(a.out, f"trace_{engine}_b{batch}.json.gz")
             if engine == "hf-eager" and batch in (1, 16) and not a.no_trace else None)
    out["profile"] = profile_case(model, ids, mask, a.prof_gen, engine, dev, trace)
    out["host_probe_after_s"] = host_probe_s()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--prof-gen", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=70.0)
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="CPU check: a tiny Llama, short prompts")
    a = ap.parse_args()
    a.out = os.environ.get("OUT", ".")
    dev = Device("cpu" if a.tiny else "cuda")
    if a.tiny:
        from gpuscope.workloads.sets import TINY_LLAMA

        cfg, a.prompt, a.gen, a.prof_gen = dict(TINY_LLAMA), 16, 4, 3
    else:
        cfg = case_config({"model": a.model})
    t0 = time.perf_counter()
    model, config = build_model(cfg, dev, torch.bfloat16, "sdpa")
    model.eval()
    doc = {"model": a.model if not a.tiny else "tiny-llama", "device": dev.device_name(), "torch": torch.__version__,
           "build_s": time.perf_counter() - t0, "cases": []}
    with torch.no_grad():
        for engine, batch in CASES:
            if time.perf_counter() - t0 > a.budget_s:
                doc["cases"].append({"engine": engine, "batch": batch, "status": "skipped (budget)"})
                continue
            t = time.perf_counter()
            try:
                c = one_case(model, config.vocab_size, engine, batch, a, dev)
            except RuntimeError as e:  # an OOM or a failed capture is a result
                c = {"engine": engine, "batch": batch, "status": f"error: {' '.join(str(e).split())[:300]}"}
            c["wall_s"] = time.perf_counter() - t
            doc["cases"].append(c)
            p = c.get("profile", {})
            print(engine, batch, "tpot", c.get("tpot_s"), "host step", c.get("host_step_median_s"), "device step",
                  c.get("device_step_median_s"), "kernels/step", p.get("kernels_per_step"), "busy/step",
                  p.get("busy_s_per_step"), "groups", p.get("groups_us_per_step"), c.get("status", ""))
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            _write(doc, a.out)  # after every case: a run stopped by its timeout keeps the finished ones
    print("wrote", _write(doc, a.out), f"{time.perf_counter() - t0:.1f} s")


def _write(doc: dict, out: str) -> str:
    path = os.path.join(out, "decode_batch.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(path + ".tmp", path)
    return path


if __name__ == "__main__":
    main()
