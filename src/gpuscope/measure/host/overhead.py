"""Host overhead of eager Hugging Face execution, measured directly on tiny models.

A decode step of a model whose tensors are tiny costs the GPU almost nothing, so its wall time is the host's
time: Python, the transformers modules, the PyTorch dispatcher and the kernel launches. Timing tiny models of one
family with 1, 2, 4 and 8 layers and fitting  t(L) = forward_s + L x layer_s  gives the host cost of one decoder
layer and of the rest of a forward (embedding, mask and rotary set-up, final norm, head, output objects).
``generate`` adds its own per-token work (logits processors, stopping criteria, cache bookkeeping):
step_s = TPOT(tiny, generate) - decode forward(tiny). These are the parameters of the planner's eager engine
model (gpuscope.estimate.engines.EngineModel); they depend on the host CPU and the software versions, not on
the GPU.
"""

from __future__ import annotations

import statistics
import time

import torch

from gpuscope.measure.device.device import Device, pick_device
from gpuscope.measure.models.hf_model import build_model, cache_kwarg, out_cache, silence_generation
from gpuscope.measure.models.tiny import TINY, layers_key
from gpuscope.measure.models.train_step import PRECISIONS, enable_recompute, grad_scaler, step_functions


def fit_line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares line y = a + b x; returns (a, b)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def decode_steps(model, nxt, cache, kw: str, dev: Device, n: int) -> tuple[list[float], object]:
    """Wall times of ``n`` synchronised decode-step forwards (one token, the cache growing); returns them and the
    grown cache, so a caller can continue where it stopped."""
    times = []
    for _ in range(n):
        dev.synchronize()
        t0 = time.perf_counter()
        out = model(nxt, use_cache=True, **{kw: cache})
        dev.synchronize()
        times.append(time.perf_counter() - t0)
        cache = out_cache(out)
    return times, cache


def interleaved(jobs: list, rounds: int, between=None) -> list[list]:
    """Run ``jobs`` (callables, one per model depth, each returning a list of samples) round-robin ``rounds``
    times and collect each job's samples. Why: a host's speed moves within a minute (on an H200 VM a
    tiny-Llama training forward read 17.8 ms at 8 layers against 7.9 ms on another day, and a depth-by-depth fit
    over 2, 4, 8, 12 GPT-2 layers with recompute read 4.1, 7.0, 19.7, 29.0 ms:
    research/results/2026-11-30-h200-g/README.md), so timing one
    depth after the other puts the drift into the slope. Interleaved, every depth sees the same slow and fast
    moments and the drift stays in the level, where the calibration's passes and the host probe
    (measure/host/probe.py) see it. ``between`` (a callable, e.g. host/probe.RoundProbe) runs after each round,
    untimed: the host's speed sampled across the whole fit. Where it returns a number, the round's samples (seconds,
    or tuples, lists and dicts of them) are multiplied by it: the round taken to a reference host speed."""
    samples: list[list] = [[] for _ in jobs]
    for _ in range(rounds):
        got = [job() for job in jobs]
        factor = between() if between is not None else None
        for i, xs in enumerate(got):
            samples[i].extend([_scaled(x, factor) for x in xs] if factor else xs)
    return samples


def _scaled(x, f: float):
    """Seconds ``x`` (a number, or a tuple, list or dict of them) times ``f``."""
    if isinstance(x, dict):
        return {k: _scaled(v, f) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_scaled(v, f) for v in x)
    return x * f


def _chunks(total: int, size: int) -> int:
    return max(1, -(-total // size))


def warm_shapes(cfg: dict, dev: Device, dtype, vocab: int, prompt: int, steps: int, prefill_kw: dict,
                prefills: int) -> tuple:
    """A throw-away build of ``cfg`` run through the prompt (``prefills`` times) and ``steps`` decode lengths after
    it, before any timed model: CUDA context, cuBLAS handles and lazy module loading stay out of the fit, and so do
    per-shape plans. SDPA on Hopper runs cuDNN's attention, which builds an execution plan the first time it meets a
    shape (here: each new KV length); the plans are shared by models of any depth, so without this the first model
    timed paid them all (H200, `hardware calibrate --host`: 36.6, 4.2, 5.5 ms per decode forward for 2, 4 and 8
    layers, a fit with no slope). Returns (the prompt's random token ids, the model's past-cache argument name)."""
    warm, _ = build_model(cfg, dev, dtype)
    warm.eval()
    ids = torch.randint(0, vocab, (1, prompt), device=dev.torch_device)
    kw = cache_kwarg(warm)
    for _ in range(prefills):
        out = warm(ids, use_cache=True, **prefill_kw)
    for _ in range(steps):
        out = warm(ids[:, -1:], use_cache=True, **{kw: out_cache(out)})
    dev.synchronize()
    del warm, out
    return ids, kw


@torch.no_grad()
def measure_family(family: str, dev: Device, layers=(1, 2, 4, 8), iters: int = 60, dtype=torch.bfloat16,
                   chunk: int = 10, probe=None) -> dict:
    base = dict(TINY[family])
    # the timed loop's lengths (16 + iters + 5) and generate's (16 + 33)
    ids, kw = warm_shapes(dict(base, **{layers_key(base): 1}), dev, dtype, 256, 16, iters + 40, {}, 1)
    models = []
    for n in layers:
        model, _ = build_model(dict(base, **{layers_key(base): n}), dev, dtype)
        model.eval()
        silence_generation(model)
        out = model(ids, use_cache=True)
        _, cache = decode_steps(model, ids[:, -1:], out_cache(out), kw, dev, 5)  # untimed first steps
        models.append({"model": model, "cache": cache})

    def prefill_s(m: dict) -> float:  # the prompt's forward into a fresh cache, as generate's first step runs it
        dev.synchronize()
        t0 = time.perf_counter()
        m["model"](ids, use_cache=True)
        dev.synchronize()
        return time.perf_counter() - t0

    def generate_s(m: dict, n: int) -> float:
        dev.synchronize()
        t0 = time.perf_counter()
        m["model"].generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                            do_sample=False)
        dev.synchronize()
        return time.perf_counter() - t0

    rounds = _chunks(iters, chunk)

    def round_job(m: dict):
        def job():  # everything one depth needs, back to back: the derived costs pair samples of one moment
            dec, m["cache"] = decode_steps(m["model"], ids[:, -1:], m["cache"], kw, dev, -(-iters // rounds))
            t33, t1 = generate_s(m, 33), generate_s(m, 1)
            return [{"decode": dec, "step": (t33 - t1) / 32 - statistics.median(dec), "ttft": t1,
                     "prefill": prefill_s(m)}]
        return job

    # Each round times, per depth, a few decode steps, generate of 33 and of 1 token, and the prompt's forward.
    # Derived costs are taken within a round, then the median over rounds: a VM's host steps between speeds that last
    # seconds (an H200 VM: research/results/2026-11-30-h200-h/README.md), and a difference of two phases timed in
    # different rounds read generate's per-call setup at 0.8 to 4.7 ms in five passes of one calibration.
    per_depth = interleaved([round_job(m) for m in models], rounds, probe)
    del models
    fwd = [statistics.median(t for r in rs for t in r["decode"]) for rs in per_depth]
    pre = [statistics.median(r["prefill"] for r in rs) for rs in per_depth]
    steps = [r["step"] for rs in per_depth for r in rs]
    # generate's work once per call (config checks, cache and processors set up): TTFT less the prompt's forward
    # less the per-token work the planner adds to the prefill (estimate/infer.py: prefill_s = forward + step_s +
    # setup_s)
    setup = [r["ttft"] - r["prefill"] - r["step"] for rs in per_depth for r in rs]
    forward_s, layer_s = fit_line(list(layers), fwd)
    return {"family": family, "layers": list(layers), "decode_forward_s": fwd, "forward_s": forward_s,
            "layer_s": layer_s, "generate_step_s": statistics.median(steps), "prefill_forward_s": pre,
            "generate_setup_s": statistics.median(setup), "rounds": rounds}


# Llama-3.2-1B's widths (vocab cut to 1024: the LM head's GPU time is not what is measured) for the real-size fit
REAL_WIDTH = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 1024, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


@torch.no_grad()
def measure_real_width(dev: Device, layers=(2, 4, 8), prompt: int = 128, iters: int = 20,
                       dtype=torch.bfloat16, chunk: int = 5, probe=None) -> dict:
    """Host time per decoder layer at a real model's widths, for the eager decode step and the prefill.

    Why not only the tiny models: on an H200 VM's host a kernel of Llama-3.2-1B's decode cost the host ~10% more
    than a tiny model's, Llama-3.1-8B's 27% more and its 128-token prefill's 38% more (estimate/engines.py), so a
    tiny-model figure under-plans real models. At these widths a batch-1 step is still host-bound on a GPU (a
    layer's kernels take ~40 us of GPU time against ~0.7 ms of host time), so the wall time of a synchronised
    forward, fitted as t(L) = fixed + L x per-layer over 2, 4 and 8 layers, gives the host's time per layer;
    divided by the kernels the planner counts in a layer it is the per-kernel cost. Decode: one token at a time
    after the prompt's cache, which grows; prefill: ``prompt`` tokens into an empty cache with the head on the
    last position (as generate's first step). Only meaningful where the device runs apart from the host (not on CPU)."""
    ids, kw = warm_shapes(dict(REAL_WIDTH, num_hidden_layers=1), dev, dtype, REAL_WIDTH["vocab_size"], prompt,
                          iters + 10, {"logits_to_keep": 1}, 3)
    models = []
    for n in layers:
        model, _ = build_model(dict(REAL_WIDTH, num_hidden_layers=n), dev, dtype)
        model.eval()
        for _ in range(3):  # untimed
            out = model(ids, use_cache=True, logits_to_keep=1)
        _, cache = decode_steps(model, ids[:, -1:], out_cache(out), kw, dev, 2)  # untimed
        models.append({"model": model, "cache": cache})

    def prefill_job(m: dict):
        def job():
            dev.synchronize()
            t0 = time.perf_counter()
            out = m["model"](ids, use_cache=True, logits_to_keep=1)
            dev.synchronize()
            t = time.perf_counter() - t0
            del out
            return [t]
        return job

    def decode_job(m: dict):
        def job():
            times, m["cache"] = decode_steps(m["model"], ids[:, -1:], m["cache"], kw, dev, chunk)
            return times
        return job

    # interleaved over the depths (see `interleaved`); decode continues each model's own cache
    pre = [statistics.median(x) for x in interleaved([prefill_job(m) for m in models], iters, probe)]
    dec = [statistics.median(x)
           for x in interleaved([decode_job(m) for m in models], _chunks(iters, chunk), probe)]
    del models
    dec_fixed, dec_layer = fit_line(list(layers), dec)
    pre_fixed, pre_layer = fit_line(list(layers), pre)
    return {"widths": "llama-3.2-1b", "layers": list(layers), "prompt": prompt, "decode_forward_s": dec,
            "prefill_forward_s": pre, "decode_fixed_s": dec_fixed, "decode_layer_s": dec_layer,
            "prefill_fixed_s": pre_fixed, "prefill_layer_s": pre_layer}


def measure_train_family(family: str, dev: Device, layers=(2, 4, 8), precision: str = "amp-bf16",
                         recompute: str = "none", steps: int = 20, warmup: int = 3, micro_batch: int = 2,
                         seq: int = 64, config: dict | None = None, count_kernels: bool = False,
                         probe=None) -> dict:
    """Host time of each phase of a training step (forward with the loss, backward, fused-AdamW step with
    zero_grad), measured on tiny models whose GPU work is negligible, with a synchronize between phases: the median
    of ``steps`` steps per depth, fitted as a line in the layer count (per-layer host time and the rest). Uses the
    training workload's own phases (measure/llm/train.step_functions), so what is timed is what `bench train`
    runs. ``config`` replaces the tiny model of ``family`` (an HF config dict, e.g. a preset's real widths: then
    each phase is max(GPU, host) and the fit is the host's only where the GPU idles). ``count_kernels`` (CUDA):
    one more step per depth under the profiler, its device kernels counted per phase (``kernels``). ``probe``:
    run between the timed rounds (see ``interleaved``)."""
    param_dtype, ac_dtype = PRECISIONS[precision]
    base = dict(config if config is not None else TINY[family])
    phases: dict[str, list[float]] = {"forward_s": [], "backward_s": [], "optimizer_s": []}
    tensors, kernels = [], {}
    runs = []
    for n in layers:  # every depth built first, then timed a step at a time in turn (see `interleaved`)
        torch.manual_seed(0)
        model, cfg = build_model(dict(base, **{layers_key(base): n}), dev, param_dtype, use_cache=False)
        model.train()
        if recompute == "full":
            enable_recompute(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
        scaler = grad_scaler(dev, ac_dtype)
        vocab = int(cfg.vocab_size)
        batches = iter([torch.randint(0, vocab, (micro_batch, seq), device=dev.torch_device)
                        for _ in range(warmup + steps + 1)])
        runs.append((model, step_functions(model, opt, scaler, ac_dtype, dev, batches, {}, ["host"])))
        tensors.append(sum(1 for p in model.parameters() if p.requires_grad))

    def step_job(fns):
        def job():  # one step, a synchronize between phases: [(forward, backward, optimizer) seconds]
            return [timed_phases(dev, *fns)]
        return job

    jobs = [step_job(fns) for _, fns in runs]
    interleaved(jobs, warmup)
    for samples in interleaved(jobs, steps, probe):
        for j, k in enumerate(phases):
            phases[k].append(statistics.median(x[j] for x in samples))
    if count_kernels and dev.type == "cuda":
        for _, fns in runs:
            for k, v in phase_kernels(dev, *fns).items():
                kernels.setdefault(k, []).append(v)
    del runs
    out = {"family": family, "precision": precision, "recompute": recompute, "layers": list(layers),
           "param_tensors": tensors, "micro_batch": micro_batch, "seq": seq, **phases}
    if kernels:
        out["kernels"] = kernels
    for k in ("forward_s", "backward_s"):
        out[k.replace("_s", "_fixed_s")], out[k.replace("_s", "_layer_s")] = fit_line(list(layers), phases[k])
    out["optimizer_fixed_s"], out["optimizer_tensor_s"] = fit_line(tensors, phases["optimizer_s"])
    return out


def timed_phases(dev: Device, fwd, bwd, opt_step) -> tuple[float, float, float]:
    """Seconds of one training step's forward (with the loss), backward and optimizer step, each between
    synchronizes."""
    dev.synchronize()
    t0 = time.perf_counter()
    loss = fwd()
    dev.synchronize()
    t1 = time.perf_counter()
    bwd(loss)
    dev.synchronize()
    t2 = time.perf_counter()
    opt_step()
    dev.synchronize()
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def phase_kernels(dev: Device, fwd, bwd, opt_step) -> dict[str, int]:
    """Device kernels (with memcpy/memset) of one training step's forward, backward and optimizer step, each phase
    under its own profiler session: what the planner's kernel counts (estimate/train.layer_kernels) are checked
    against."""
    from torch.profiler import DeviceType, ProfilerActivity, profile

    counts, loss = {}, None
    for phase in ("forward", "backward", "optimizer"):
        dev.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            if phase == "forward":
                loss = fwd()
            elif phase == "backward":
                bwd(loss)
            else:
                opt_step()
            dev.synchronize()
        counts[phase] = sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    return counts


def measure_host(families=("llama", "qwen2", "mistral", "gpt2"), device: str | None = None) -> dict:
    dev = Device(pick_device(device))
    return {"device": dev.name, "device_name": dev.device_name(),
            "families": {f: measure_family(f, dev) for f in families}}


if __name__ == "__main__":
    import json
    import sys

    json.dump(measure_host(), sys.stdout, indent=1)
    print()
