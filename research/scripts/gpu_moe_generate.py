"""Issue 26 items 4, 3 and 2 (remainder) on one GPU: the data to read three mechanisms from (fits nothing).

Parts (``--part``; the .sh runs each in its own process under ``timeout``):
- ``moe``: MoE prefill as transformers runs it (random weights, bf16, SDPA; Mixtral-8x7B and Qwen1.5-MoE-A2.7B at a
  truncated depth, ``--layers``, the config written beside the results so the planner runs the same one). Per case
  (batch x prompt): the bare prefill forward (logits_to_keep 1, median of 3, CUDA events), the TTFT
  (generate, 1 token, median of 2), the routed rows per expert in each layer (measure/llm/moe_routing), and one
  profiled forward: the kernel table (top 30), the busy time, and kernel groups (grouped GEMM, masked_fill, SiLU,
  mul, sort, gather/scatter, histc/cumsum, dense GEMM, SDPA). Then torch._grouped_mm at Mixtral's shapes over
  group sizes that split imbalance from row padding (equal and 128-aligned; imbalanced but aligned; balanced but
  unaligned; a measured layer's), interleaved over rounds so clock drift hits each alike.
- ``host``: plain generate's host per step by batch and prompt (Llama-3.1-8B at ``--layers``): cases alternate
  batch 1 and 16 so a batch effect shows apart from the VM's drift; per step the host time inside the model's
  forward, inside its decoder layers and outside the forward (generate's own), from forward hooks, and the
  device span from CUDA events; allocator counters (cudaMalloc/cudaFree counts) around the timed run; a CPU probe
  and a CUDA launch probe before and after each case; one case with a 64-tensor ballast of batch 16's cache size
  at batch 1 (does the memory held slow the host?); profiled runs (record_shapes) at batch 1 and 16: host table
  by op and input shapes, kernel table, CUDA runtime calls per step.
- ``hostmix``: the host's cost of prefill (1 x ``--mix-prompt``) and of a decode step for Llama-3.1-8B,
  DeepSeek-V2-Lite, Qwen1.5-MoE and Mixtral at ``--layers``, in one process and interleaved rounds: host seconds
  until each forward returns, the profiled kernel count of each, CPU and launch probes per round.
- ``newlen``: generate's decode steps at KV lengths not seen before against the same lengths again (cuDNN SDPA's
  per-shape execution graphs), by batch, and with cuDNN's SDPA backend off (Llama-3.1-8B at ``--layers``).
- ``graph32``: gs-graph (HF eager kernels replayed from one CUDA graph over a StaticCache) on Qwen2.5-32B at
  ``--layers``, batch 1 and 16 (research/scripts/gpu_decode_batch.one_case: TPOT, profiled replays).
Output: $OUT/gpu_moe_generate/<part>.json (rewritten after every case) and <part>.cmd (the command line).
CPU check: PYTHONPATH=src python research/scripts/gpu_moe_generate.py --part all --tiny
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_decode_batch as db  # noqa: E402  (StepMarker, the profile tables, host_probe_s, one_case)

from gpuscope.measure.device.device import Device  # noqa: E402
from gpuscope.measure.llm.moe_routing import RoutingCounter  # noqa: E402
from gpuscope.measure.models.hf_model import build_model  # noqa: E402
from gpuscope.specs.models import preset_config  # noqa: E402

MOE_GROUPS = {"grouped_gemm": ("groupproblemshape", "grouped"), "masked_fill": ("masked_fill",),
              "silu": ("silu",), "mul": ("mulfunctor",), "sort": ("sort",),
              "gather_index": ("index", "gather"), "scatter": ("scatter", "index_put", "put_"),
              "histc_cumsum": ("histc", "histogram", "cumsum", "scan"), "sum_reduce": ("reduce_kernel",),
              "copy_cast": ("copy", "cast"), "cat": ("catarray",), "dense_gemm": ("nvjet", "gemm", "gemv", "cublas"),
              "sdpa": ("sdpa", "flash", "fmha", "attention")}
TINY_SIZES = {"moe": [(2, 16)], "host": [(1, 16), (4, 16)], "graph32": [2]}


def tiny_config(name: str) -> dict:
    """The preset's config shrunk to a CPU-sized model of the same family (same code path)."""
    cfg = preset_config(name)
    cfg.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=512, max_position_embeddings=512)
    for k, v in (("num_local_experts", 4), ("num_experts", 4), ("n_routed_experts", 4), ("moe_intermediate_size", 32),
                 ("shared_expert_intermediate_size", 64), ("num_experts_per_tok", 2), ("kv_lora_rank", 16),
                 ("qk_nope_head_dim", 16), ("qk_rope_head_dim", 8), ("v_head_dim", 16)):
        if k in cfg:
            cfg[k] = v
    if "n_routed_experts" in cfg:  # MLA: 4 heads of the sizes above, as many KV heads (DeepSeek-V2's layout)
        cfg["num_key_value_heads"] = 4
        cfg["num_hidden_layers"] = 3  # the first dense (first_k_dense_replace), then MoE
    return cfg


def config_for(name: str, layers: int, tiny: bool) -> dict:
    cfg = tiny_config(name) if tiny else preset_config(name)
    if not tiny:
        cfg["num_hidden_layers"] = layers
    return cfg


def _write(doc: dict, out: str, part: str) -> str:
    path = os.path.join(out, f"{part}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(path + ".tmp", path)
    return path


def _events_s(dev: Device, fn, reps: int) -> list[float]:
    """Seconds of ``fn()`` per call, each between a synchronize and CUDA events (perf_counter on CPU)."""
    out = []
    for _ in range(reps):
        dev.synchronize()
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return out


def _acts(dev: Device):
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])


def kernel_table(prof, groups: dict, top: int = 30) -> dict:
    """Kernels of one profiled region: top ``top`` by device time, the busy time (union), named groups."""
    kern, host, spans = db._aggregate(prof)
    table = sorted(({"name": k[:200], "us": v[1] * 1e6, "count": v[0]} for k, v in kern.items()),
                   key=lambda d: -d["us"])
    grp = {g: 0.0 for g in groups}
    for r in table:
        low = r["name"].lower()
        for g, words in groups.items():  # first matching group only
            if any(w in low for w in words):
                grp[g] += r["us"]
                break
    runtime = {k: v for k, v in host.items() if k.startswith("cuda")}
    host_top = sorted(({"name": k[:120], "count": v[0], "self_us": v[1] * 1e6} for k, v in host.items()),
                      key=lambda d: -d["self_us"])[:40]
    return {"kernels_top": table[:top], "host_top": host_top, "host_self_us": sum(v[1] for v in host.values()) * 1e6, "kernel_count": sum(v[0] for v in kern.values()),
            "kernel_us": sum(v[1] for v in kern.values()) * 1e6, "busy_us": db._busy_s(spans) * 1e6,
            "groups_us": grp, "runtime_calls": {k: {"count": v[0], "us": v[1] * 1e6} for k, v in runtime.items()}}


# ---- part moe ------------------------------------------------------------------------------------------------------

def moe_case(model, vocab: int, batch: int, prompt: int, dev: Device) -> dict:
    from torch.profiler import profile

    g = torch.Generator(device=dev.torch_device).manual_seed(batch * 7919 + prompt)
    ids = torch.randint(0, vocab, (batch, prompt), device=dev.torch_device, generator=g)
    mask = torch.ones_like(ids)

    def fwd():
        model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)

    fwd()  # warm-up (cuDNN plans, allocator)
    forward_s = _events_s(dev, fwd, 3)
    enqueue = []  # host seconds until the forward returns, no sync after it: its host cost where nothing inside syncs
    for _ in range(3):
        dev.synchronize()
        t = time.perf_counter()
        fwd()
        enqueue.append(time.perf_counter() - t)
        dev.synchronize()
    ttft = _events_s(dev, lambda: model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=1,
                                                  min_new_tokens=1, do_sample=False), 2)
    with RoutingCounter(model) as rc:
        fwd()
    dev.synchronize()
    with ModuleClock(model) as mc:  # a forward's host time by block (no sync inside the timed region)
        t = time.perf_counter()
        fwd()
        host_blocks = {"enqueue_s": time.perf_counter() - t, "blocks": mc.summary()}
    dev.synchronize()
    with profile(activities=_acts(dev)) as prof:
        t = time.perf_counter()
        fwd()
        dev.synchronize()
        wall = time.perf_counter() - t
    out = {"batch": batch, "prompt": prompt, "forward_s": forward_s, "forward_s_median": statistics.median(forward_s),
           "host_enqueue_s": enqueue, "host_enqueue_s_median": statistics.median(enqueue), "host_blocks": host_blocks,
           "ttft_s": ttft, "ttft_s_median": statistics.median(ttft), "profiled_wall_s": wall,
           "rows_per_expert": [c[0] if c else None for c in rc.counts], "routing": rc.summary(),
           "profile": kernel_table(prof, MOE_GROUPS)}
    with BalancedRouting(model) as br:  # the same forward with every expert given T x k / E rows
        fwd()  # warm-up; the hooks say whether they applied
        if br.applied:
            bal = _events_s(dev, fwd, 3)
            with RoutingCounter(model) as rc2:
                fwd()
            with profile(activities=_acts(dev)) as prof2:
                fwd()
                dev.synchronize()
            out["balanced"] = {"forward_s": bal, "forward_s_median": statistics.median(bal),
                               "rows_per_expert_layer0": (rc2.counts[0][0] if rc2.counts and rc2.counts[0]
                                                          else None),
                               "profile": kernel_table(prof2, MOE_GROUPS, top=12)}
        else:
            out["balanced"] = {"status": "router output not (logits, scores, indices): not applied"}
    return out


class ModuleClock:
    """Host seconds spent inside each decoder layer's attention and MLP / MoE block (pre/post forward hooks, no
    syncs), summed by module class: where a forward's host time goes when nothing inside it waits on the GPU."""

    def __init__(self, model):
        self.spent: dict[str, list] = {}
        self.hooks = []
        pc = time.perf_counter
        for layer in model.model.layers:
            for attr in ("self_attn", "mlp", "block_sparse_moe"):
                mod = getattr(layer, attr, None)
                if mod is None:
                    continue
                key = f"{attr}:{type(mod).__name__}"
                start = []
                self.hooks.append(mod.register_forward_pre_hook(lambda *_, st=start: st.append(pc())))
                self.hooks.append(mod.register_forward_hook(
                    lambda *_, st=start, k=key: self.spent.setdefault(k, []).append(pc() - st.pop())))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()

    def summary(self) -> dict:
        return {k: {"count": len(v), "host_s": sum(v)} for k, v in self.spent.items()}


class BalancedRouting:
    """Forward hooks on the routers (modules named ``*.gate`` / ``*.router`` returning (logits, scores, indices))
    that replace the top-k indices by a balanced assignment, token i -> experts (i k + j) mod E: what a perfectly
    load-balanced router gives, through the same expert code (sort, grouped GEMMs, scatter)."""

    def __init__(self, model):
        self.model, self.hooks, self.applied = model, [], False

    def __enter__(self):
        for name, mod in self.model.named_modules():
            if type(mod).__name__.endswith("Router") or (name.endswith(".gate") and hasattr(mod, "top_k")):
                self.hooks.append(mod.register_forward_hook(self._hook))
        return self

    def _hook(self, mod, args, out):
        if not (isinstance(out, tuple) and len(out) == 3 and not out[2].is_floating_point()):
            return None
        idx = out[2]
        t, k = idx.shape[0], idx.shape[-1]
        e = getattr(mod, "num_experts", None) or mod.weight.shape[0]
        new = (torch.arange(t * k, device=idx.device).view(t, k) % e).to(idx.dtype)
        self.applied = True
        return out[0], out[1], new

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()


def grouped_mm_probe(cfg: dict, measured: list[int] | None, dev: Device, rounds: int) -> dict:
    """torch._grouped_mm at the MoE's gate_up and down shapes over 2048 routed rows (8 experts): which costs, a
    busiest expert (imbalance) or rows that do not fill a 128-row tile (padding)? Interleaved rounds."""
    if not hasattr(torch, "_grouped_mm"):
        return {"status": "torch has no _grouped_mm"}
    e = cfg.get("num_local_experts") or cfg.get("num_experts")
    h = cfg["hidden_size"]
    w = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    rows = 256 * e
    sets = {"equal_aligned": [256] * e,
            "imbalanced_aligned": [384, 128] * (e // 2),
            "balanced_unaligned": [257, 255] * (e // 2),
            "imbalanced_unaligned": [340, 172] * (e // 2)}
    if measured and sum(measured) == rows and len(measured) == e:
        sets["measured_layer"] = list(measured)
    dt = torch.bfloat16
    x = {k: torch.randn(rows, k, device=dev.torch_device, dtype=dt) for k in (h, w)}
    wts = {"gate_up": torch.randn(e, 2 * w, h, device=dev.torch_device, dtype=dt).transpose(1, 2),
           "down": torch.randn(e, h, w, device=dev.torch_device, dtype=dt).transpose(1, 2)}
    offs = {k: torch.tensor(v, device=dev.torch_device, dtype=torch.int32).cumsum(0, dtype=torch.int32)
            for k, v in sets.items()}
    res = {f"{n}/{s}": [] for n in wts for s in sets}
    for _ in range(rounds):
        for n, k in (("gate_up", h), ("down", w)):
            for s in sets:
                try:
                    ts = _events_s(dev, lambda: torch._grouped_mm(x[k], wts[n], offs=offs[s]), 10)
                except RuntimeError as exc:  # e.g. no CPU kernel for this dtype
                    return {"status": f"error: {' '.join(str(exc).split())[:200]}"}
                res[f"{n}/{s}"].append(statistics.median(ts))
    return {"status": "ok", "rows": rows, "hidden": h, "width": w, "experts": e, "sets": sets,
            "median_s": {k: statistics.median(v) for k, v in res.items()}, "rounds_s": res}


def part_moe(a, dev: Device, doc: dict, t0: float) -> None:
    specs = a.moe_specs or [("mixtral-8x7b", [(8, 512), (1, 1024), (4, 256), (16, 512), (2, 2048), (8, 128)]),
                            ("qwen1.5-moe-a2.7b", [(8, 512), (1, 1024), (16, 256), (4, 2048)])]
    for name, sizes in specs:
        if a.tiny:
            sizes = TINY_SIZES["moe"]
        cfg = config_for(name, a.layers, a.tiny)
        entry = {"model": name, "config": cfg, "cases": []}
        doc["models"].append(entry)
        if time.perf_counter() - t0 > a.budget_s:
            entry["status"] = "skipped (budget)"
            continue
        model, config = build_model(cfg, dev, torch.bfloat16, "sdpa")
        model.eval()
        entry["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
        with torch.no_grad():
            for b, p in sizes:
                if time.perf_counter() - t0 > a.budget_s:
                    entry["cases"].append({"batch": b, "prompt": p, "status": "skipped (budget)"})
                    continue
                try:
                    c = moe_case(model, config.vocab_size, b, p, dev)
                except RuntimeError as e:
                    c = {"batch": b, "prompt": p, "status": f"error: {' '.join(str(e).split())[:300]}"}
                entry["cases"].append(c)
                print(name, b, p, "forward", c.get("forward_s_median"), "host", c.get("host_enqueue_s_median"), "ttft", c.get("ttft_s_median"),
                      "groups", c.get("profile", {}).get("groups_us"), flush=True)
                _write(doc, a.out, a.file)
        if name == "mixtral-8x7b" and not a.no_probe:
            ref = next((c for c in entry["cases"] if c.get("batch") == 1 and c.get("prompt") == 1024), None)
            layer0 = (ref or {}).get("rows_per_expert", [None])[0]
            del model
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            with torch.no_grad():
                doc["grouped_mm_probe"] = grouped_mm_probe(cfg, layer0, dev, 2 if a.tiny else 4)
            print("grouped_mm", doc["grouped_mm_probe"].get("median_s"), flush=True)
        else:
            del model
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        _write(doc, a.out, a.file)


# ---- part host -----------------------------------------------------------------------------------------------------

class ForwardClock:
    """Host timestamps at the model's forward entry/exit and at its first layer's entry and last layer's exit (hooks),
    so each generate step splits into host time in the layers, in the rest of the forward, and outside it."""

    def __init__(self, model):
        layers = model.model.layers
        self.marks: list[tuple[str, float]] = []
        pc = time.perf_counter
        self.hooks = [model.register_forward_pre_hook(lambda *_: self.marks.append(("f0", pc()))),
                      model.register_forward_hook(lambda *_: self.marks.append(("f1", pc()))),
                      layers[0].register_forward_pre_hook(lambda *_: self.marks.append(("l0", pc()))),
                      layers[-1].register_forward_hook(lambda *_: self.marks.append(("l1", pc())))]

    def remove(self):
        for h in self.hooks:
            h.remove()

    def split(self) -> dict:
        """Per forward (after the prefill): forward, layers and outside-forward host seconds, medians and all."""
        fwd, lay, starts, ends = [], [], [], []
        cur = {}
        for k, t in self.marks:
            cur[k] = t
            if k == "f1":
                fwd.append(t - cur["f0"])
                lay.append(cur["l1"] - cur["l0"])
                starts.append(cur["f0"])
                ends.append(t)
        outside = [s - e for e, s in zip(ends[:-1], starts[1:])]
        med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
        return {"forward_host_s": fwd[1:], "layers_host_s": lay[1:], "outside_forward_host_s": outside,
                "prefill_forward_host_s": fwd[0] if fwd else None,
                "forward_host_median_s": med(fwd[1:]), "layers_host_median_s": med(lay[1:]),
                "outside_forward_host_median_s": med(outside[1:])}


def launch_probe_s(dev: Device, n: int = 400) -> float | None:
    """Host seconds per launch of a one-element CUDA add, queued without waiting (the launch path alone)."""
    if dev.type != "cuda":
        return None
    x = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        x.add_(1.0)
    s = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    return s


def _alloc_counts(dev: Device) -> dict:
    if dev.type != "cuda":
        return {}
    s = torch.cuda.memory_stats()
    return {k: s.get(k) for k in ("num_device_alloc", "num_device_free", "num_alloc_retries",
                                  "segment.all.current", "reserved_bytes.all.current", "allocated_bytes.all.current")}


def _gen(model, ids, mask, n, processors=None):
    from transformers import LogitsProcessorList

    kw = {"logits_processor": LogitsProcessorList(processors)} if processors else {}
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                          **kw)


def host_case(model, cfg: dict, batch: int, prompt: int, a, dev: Device, ballast: bool, prof: bool) -> dict:
    g = torch.Generator(device=dev.torch_device).manual_seed(batch * 31 + prompt)
    ids = torch.randint(0, cfg["vocab_size"], (batch, prompt), device=dev.torch_device, generator=g)
    mask = torch.ones_like(ids)
    out = {"batch": batch, "prompt": prompt, "gen": a.gen, "ballast": ballast,
           "cpu_probe_before_s": db.host_probe_s(), "launch_probe_before_s": launch_probe_s(dev)}
    held = []
    if ballast:  # 64 tensors of one batch-16 layer cache's K (or V) at this prompt: 2 x layers of them in batch 16
        kv = cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"])
        held = [torch.empty(16 * (prompt + a.gen) * kv, dtype=torch.bfloat16, device=dev.torch_device)
                for _ in range(2 * cfg["num_hidden_layers"])]
        out["ballast_bytes"] = sum(t.numel() * 2 for t in held)
        out["launch_probe_ballast_s"] = launch_probe_s(dev)
    _gen(model, ids, mask, a.gen)  # warm-up at the timed length
    out["ttft_s"] = statistics.median(_events_s(dev, lambda: _gen(model, ids, mask, 1), 2))
    marker, clock = db.StepMarker(dev), ForwardClock(model)
    before = _alloc_counts(dev)
    dev.synchronize()
    t = time.perf_counter()
    _gen(model, ids, mask, a.gen, [marker])
    dev.synchronize()
    out["e2e_s"] = time.perf_counter() - t
    clock.remove()
    out["alloc_before"], out["alloc_after"] = before, _alloc_counts(dev)
    out["tpot_s"] = (out["e2e_s"] - out["ttft_s"]) / (a.gen - 1)
    out.update(db.timeline(marker))
    out.update(clock.split())
    if prof:
        out["profile"] = host_profile(model, ids, mask, a.prof_gen, dev)
    del held
    out["cpu_probe_after_s"], out["launch_probe_after_s"] = db.host_probe_s(), launch_probe_s(dev)
    return out


def host_profile(model, ids, mask, gen: int, dev: Device) -> dict:
    """A profiled generate of ``gen`` tokens less a profiled prefill-only one, per decode step: host ops by name and
    input shapes (top 40), kernels (top 20), CUDA runtime calls."""
    from torch.profiler import profile

    def region(n):
        with profile(activities=_acts(dev), record_shapes=True) as p:
            t = time.perf_counter()
            _gen(model, ids, mask, n)
            dev.synchronize()
            return p, time.perf_counter() - t

    pre, pre_wall = region(1)
    full, wall = region(gen)
    steps = gen - 1
    res = db.decode_tables(full, pre, steps, wall, pre_wall)
    res["kernels_top"] = res["kernels_top"][:20]

    def by_shape(p):
        d = {}
        for e in p.key_averages(group_by_input_shape=True):
            if e.self_cpu_time_total > 0:
                d[(e.key, str(e.input_shapes)[:120])] = [e.count, e.self_cpu_time_total / 1e6]
        return d

    fs, ps = by_shape(full), by_shape(pre)
    rows = []
    for k, v in fs.items():
        b = ps.get(k, [0, 0.0])
        if v[0] - b[0] > 0 or v[1] - b[1] > 1e-9:
            rows.append({"name": k[0][:100], "shapes": k[1], "per_step_count": (v[0] - b[0]) / steps,
                         "per_step_us": (v[1] - b[1]) / steps * 1e6})
    res["host_by_shape_top"] = sorted(rows, key=lambda r: -r["per_step_us"])[:40]
    return res


def part_host(a, dev: Device, doc: dict, t0: float) -> None:
    cfg = config_for(a.host_model, a.layers, a.tiny)
    doc["config"], doc["model"] = cfg, a.host_model
    model, _ = build_model(cfg, dev, torch.bfloat16, "sdpa")
    model.eval()
    sizes = a.host_sizes or [(1, 1024), (16, 1024), (1, 1024), (16, 1024), (4, 4096), (16, 128), (8, 2048), (1, 4096)]
    if a.tiny:
        sizes = TINY_SIZES["host"]
    prof_at = set(a.prof_cases if a.prof_cases is not None else [0, 1])
    plan = [(b, p, False, i in prof_at) for i, (b, p) in enumerate(sizes)]
    if not a.host_sizes:
        plan.insert(4, (sizes[0][0], sizes[0][1], True, False))  # batch 1 with batch 16's cache held beside it
    with torch.no_grad():
        for b, p, ballast, prof in plan:
            if time.perf_counter() - t0 > a.budget_s:
                doc["cases"].append({"batch": b, "prompt": p, "ballast": ballast, "status": "skipped (budget)"})
                continue
            t = time.perf_counter()
            try:
                c = host_case(model, cfg, b, p, a, dev, ballast, prof)
            except RuntimeError as e:
                c = {"batch": b, "prompt": p, "ballast": ballast, "status": f"error: {' '.join(str(e).split())[:300]}"}
            c["wall_s"] = time.perf_counter() - t
            doc["cases"].append(c)
            print("host", b, p, "ballast" if ballast else "", "tpot", c.get("tpot_s"), "fwd",
                  c.get("forward_host_median_s"), "layers", c.get("layers_host_median_s"), "outside",
                  c.get("outside_forward_host_median_s"), "device", c.get("device_step_median_s"),
                  "launch", c.get("launch_probe_before_s"), c.get("status", ""), flush=True)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            _write(doc, a.out, a.file)


# ---- part graph32 --------------------------------------------------------------------------------------------------

def part_graph32(a, dev: Device, doc: dict, t0: float) -> None:
    cfg = config_for("qwen2.5-32b", a.layers, a.tiny)
    doc["config"] = cfg
    model, config = build_model(cfg, dev, torch.bfloat16, "sdpa")
    model.eval()
    ns = SimpleNamespace(prompt=16 if a.tiny else 1024, gen=4 if a.tiny else 16, prof_gen=3 if a.tiny else 6,
                         out=a.out, no_trace=True)
    with torch.no_grad():
        for b in (TINY_SIZES["graph32"] if a.tiny else [16, 1]):
            if time.perf_counter() - t0 > a.budget_s:
                doc["cases"].append({"batch": b, "status": "skipped (budget)"})
                continue
            t = time.perf_counter()
            try:
                c = db.one_case(model, config.vocab_size, "gs-graph", b, ns, dev)
            except RuntimeError as e:
                c = {"batch": b, "status": f"error: {' '.join(str(e).split())[:300]}"}
            c["wall_s"] = time.perf_counter() - t
            doc["cases"].append(c)
            p = c.get("profile", {})
            print("graph32", b, "tpot", c.get("tpot_s"), "busy/step", p.get("busy_s_per_step"), c.get("status", ""),
                  flush=True)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            _write(doc, a.out, a.file)


# ---- part hostmix ---------------------------------------------------------------------------------------------------

def _enqueue_s(dev: Device, fn, reps: int) -> list[float]:
    """Host seconds until ``fn()`` returns, a synchronize before each and after (not timed)."""
    out = []
    for _ in range(reps):
        dev.synchronize()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
        dev.synchronize()
    return out


def _kernel_count(dev: Device, fn) -> int | None:
    from torch.profiler import profile

    if dev.type != "cuda":
        return None
    with profile(activities=_acts(dev)) as prof:
        fn()
        dev.synchronize()
    return kernel_table(prof, {}, top=1)["kernel_count"]


def hostmix_model(name: str, a, dev: Device) -> dict:
    """One model's prefill (1 x prompt) and decode-step forwards, built once, timed later in interleaved rounds."""
    cfg = config_for(name, a.layers, a.tiny)
    model, config = build_model(cfg, dev, torch.bfloat16, "sdpa")
    model.eval()
    prompt = 16 if a.tiny else a.mix_prompt
    g = torch.Generator(device=dev.torch_device).manual_seed(prompt)
    ids = torch.randint(0, config.vocab_size, (1, prompt), device=dev.torch_device, generator=g)
    mask = torch.ones_like(ids)
    out = model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
    cache, nxt = out.past_key_values, ids[:, -1:]

    def prefill():
        model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1)

    def decode():  # one token on the prompt's cache, cropped back after it: the same KV length every call (a new
        # length each call would add a per-shape cost, which part newlen measures apart)
        model(input_ids=nxt, past_key_values=cache, use_cache=True)
        try:
            cache.crop(-1)  # drop the token just added (negative: supported by 5.17 and 5.24 alike)
        except (AttributeError, ValueError, TypeError):
            cropped[0] = False

    cropped = [True]

    prefill(), decode()  # warm-up
    return {"name": name, "config": cfg, "prompt": prompt, "fns": {"prefill": prefill, "decode": decode},
            "kernels": {k: _kernel_count(dev, f) for k, f in (("prefill", prefill), ("decode", decode))},
            "model": model, "cropped": cropped}


def part_hostmix(a, dev: Device, doc: dict, t0: float) -> None:
    """The host's cost of a dense and of MoE prefills beside a decode step, in one process and interleaved rounds,
    so that the VM's moving level hits each alike: host seconds until each forward returns (no sync inside the timed
    region), with the profiled kernel count of each forward and the CPU / launch probes per round."""
    names = ["llama-3.1-8b", "deepseek-v2-lite", "qwen1.5-moe-a2.7b", "mixtral-8x7b"]
    models = []
    with torch.no_grad():
        for name in names:
            if time.perf_counter() - t0 > a.budget_s / 2:
                doc["models"].append({"model": name, "status": "skipped (budget)"})
                continue
            models.append(hostmix_model(name, a, dev))
        for entry in models:
            doc["models"].append({"model": entry["name"], "config": entry["config"], "prompt": entry["prompt"],
                                  "kernels": entry["kernels"], "decode_cache_cropped": entry["cropped"],
                                  "rounds": []})
        for r in range(2 if a.tiny else 4):
            if time.perf_counter() - t0 > a.budget_s:
                break
            probes = {"cpu_probe_s": db.host_probe_s(), "launch_probe_s": launch_probe_s(dev)}
            for entry, rec in zip(models, doc["models"][-len(models):]):
                res = {k: _enqueue_s(dev, f, 3 if a.tiny else 7) for k, f in entry["fns"].items()}
                rec["rounds"].append({"round": r, **probes, **{f"{k}_host_s": v for k, v in res.items()},
                                      **{f"{k}_host_median_s": statistics.median(v) for k, v in res.items()}})
                print("hostmix", r, entry["name"], {k: round(statistics.median(v) * 1e3, 3) for k, v in res.items()},
                      entry["kernels"], flush=True)
            _write(doc, a.out, a.file)


# ---- part newlen ----------------------------------------------------------------------------------------------------

def _marked_steps(model, ids, mask, n: int, dev: Device) -> list[float]:
    """Host seconds of each decode step of one generate of ``n`` tokens (StepMarker), the first (prefill) left out."""
    marker = db.StepMarker(dev)
    _gen(model, ids, mask, n, [marker])
    dev.synchronize()
    return db.timeline(marker)["host_step_s"][1:]


def part_newlen(a, dev: Device, doc: dict, t0: float) -> None:
    """Does a decode step at a KV length not seen before cost the host more (cuDNN SDPA building an execution graph
    for each new shape)? Per batch: a 4-token warm-up, then a generate of ``--gen`` tokens (its steps from the 4th on
    are new lengths), the same generate again (every length seen), then the first with cuDNN's SDPA backend off
    (flash / efficient) at a prompt 64 tokens longer (new lengths again). Host seconds per step, by step."""
    cfg = config_for(a.host_model, a.layers, a.tiny)
    doc["config"], doc["model"] = cfg, a.host_model
    model, _ = build_model(cfg, dev, torch.bfloat16, "sdpa")
    model.eval()
    prompt, n = (16, 6) if a.tiny else (1024, a.gen)
    with torch.no_grad():
        for b in ([1, 2] if a.tiny else [1, 4, 16]):
            if time.perf_counter() - t0 > a.budget_s:
                doc["cases"].append({"batch": b, "status": "skipped (budget)"})
                continue
            g = torch.Generator(device=dev.torch_device).manual_seed(b)
            ids = torch.randint(0, cfg["vocab_size"], (b, prompt + 64), device=dev.torch_device, generator=g)
            short, mask = ids[:, :prompt], torch.ones_like(ids)
            _gen(model, short, mask[:, :prompt], 4)  # warm-up: decode lengths prompt+1 .. prompt+3 seen
            c = {"batch": b, "prompt": prompt, "gen": n,
                 "new_lengths_s": _marked_steps(model, short, mask[:, :prompt], n, dev),
                 "seen_lengths_s": _marked_steps(model, short, mask[:, :prompt], n, dev)}
            if dev.type == "cuda" and hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
                torch.backends.cuda.enable_cudnn_sdp(False)
                try:
                    _gen(model, ids, mask, 4)
                    c["no_cudnn_new_lengths_s"] = _marked_steps(model, ids, mask, n, dev)
                    c["no_cudnn_seen_lengths_s"] = _marked_steps(model, ids, mask, n, dev)
                finally:
                    torch.backends.cuda.enable_cudnn_sdp(True)
            # the steps kept start at the 3rd token's; the 5th token's (index 2) is the first at a new KV length
            for k in [k for k in c if k.endswith("_lengths_s")]:
                c[k[:-2] + "_median_from_index2_s"] = statistics.median(c[k][2:])
            doc["cases"].append(c)
            print("newlen", b, {k: round(v * 1e3, 2) for k, v in c.items() if k.endswith("_index2_s")}, flush=True)
            _write(doc, a.out, a.file)


PARTS = {"moe": part_moe, "host": part_host, "graph32": part_graph32, "hostmix": part_hostmix,
         "newlen": part_newlen}
DEFAULT_LAYERS = {"moe": 4, "host": 16, "graph32": 8, "hostmix": 4, "newlen": 16}


def _sizes(text: str) -> list[tuple[int, int]]:
    """'4x1024,8x512' -> [(4, 1024), (8, 512)] (batch x prompt)."""
    try:
        out = [tuple(int(v) for v in t.split("x")) for t in text.split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be BxP,BxP (e.g. 4x1024,8x512), got {text!r}") from None
    if not out or any(len(t) != 2 or min(t) <= 0 for t in out):
        raise argparse.ArgumentTypeError(f"sizes must be BxP,BxP with positive integers, got {text!r}")
    return out


def _specs(text: str) -> list[tuple[str, list[tuple[int, int]]]]:
    """'deepseek-v2-lite:4x1024,8x512;mixtral-8x7b:1x4096' -> [(name, sizes), ...]."""
    out = []
    for part in (t for t in text.split(";") if t):
        name, _, sizes = part.partition(":")
        if not name or not sizes:
            raise argparse.ArgumentTypeError(f"moe specs must be model:BxP,...;model:BxP, got {part!r}")
        out.append((name, _sizes(sizes)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", required=True, choices=[*PARTS, "all"])
    ap.add_argument("--layers", type=int, default=None, help="decoder layers kept (default: per part)")
    ap.add_argument("--gen", type=int, default=16, help="host part: tokens a timed generate makes")
    ap.add_argument("--prof-gen", type=int, default=6, help="host part: tokens of a profiled generate")
    ap.add_argument("--budget-s", type=float, default=50.0, help="no new case starts past this (per part)")
    ap.add_argument("--tiny", action="store_true", help="CPU check: tiny models, tiny sizes, same code")
    ap.add_argument("--moe-specs", type=_specs, default=None,
                    help="moe part: 'model:BxP,BxP;model:BxP' (default: Mixtral-8x7B and Qwen1.5-MoE, 10 cases)")
    ap.add_argument("--tag", default="", help="appended to the output names (<part><tag>.json, .cmd)")
    ap.add_argument("--mix-prompt", type=int, default=512, help="hostmix part: prompt tokens of the prefills")
    ap.add_argument("--no-probe", action="store_true", help="moe part: skip the torch._grouped_mm probe")
    ap.add_argument("--host-model", default="llama-3.1-8b", help="host part: the preset (default llama-3.1-8b)")
    ap.add_argument("--host-sizes", type=_sizes, default=None,
                    help="host part: 'BxP,BxP,...' in order (default: 8 cases and a ballast case)")
    ap.add_argument("--prof-cases", type=lambda t: [int(x) for x in t.split(",") if x], default=None,
                    help="host part: indices of the cases profiled (default 0,1)")
    a = ap.parse_args()
    a.out = os.path.join(os.environ.get("OUT", "."), "gpu_moe_generate")
    os.makedirs(a.out, exist_ok=True)
    if a.tiny:
        a.gen, a.prof_gen = 4, 3
    dev = Device("cpu" if a.tiny else "cuda")
    layers = a.layers
    for part in (list(PARTS) if a.part == "all" else [a.part]):
        a.layers = layers or DEFAULT_LAYERS[part]
        a.file = part + a.tag
        t0 = time.perf_counter()
        with open(os.path.join(a.out, f"{a.file}.cmd"), "w") as f:
            f.write(" ".join(["python3", *sys.argv]) + f"  # part {part}, layers {a.layers}\n")
        doc = {"part": part, "layers": a.layers, "tiny": a.tiny, "device": dev.device_name(),
               "torch": torch.__version__, "transformers": __import__("transformers").__version__,
               "models": [], "cases": []}
        PARTS[part](a, dev, doc, t0)
        print("wrote", _write(doc, a.out, a.file), f"{time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
