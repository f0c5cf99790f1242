"""Inference estimate: memory at the peak and time for prefill and decode, as Hugging Face `generate` runs it.

Memory: infer_memory.py (weights, KV cache, the prefill layer's transient peak, logits, workspace).

Time: prefill (TTFT) = one forward over the prompt + generate's setup and first step (+ the StaticCache's creation
under HF's static-cache engines, engines.STATIC_CACHE_INIT); decode = one forward of one token at the mean context
(prompt + gen/2), so the per-token average is exact for costs linear in the context. See roofline.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.estimate import ops as opsmod
from gpuscope.estimate.comm import collective_time
from gpuscope.estimate.dtypes import check_dtype, compute_dtype, nbytes, quantized_weight_bytes_per_param
from gpuscope.estimate.cpu import for_model as cpu_for_model
from gpuscope.estimate.cudnn_sdpa import cold_line, compute_capability, decode_attention
from gpuscope.estimate.engines import STATIC_CACHE_ENGINES, EngineModel, engine_for
from gpuscope.estimate.infer_memory import max_fit, phase_memory
from gpuscope.estimate.params import count_params
from gpuscope.estimate.platform import platform_for
from gpuscope.estimate.result import Estimate
from gpuscope.estimate.roofline import ELEMENTWISE_BW_FRACTION, forward_time, sm_count
from gpuscope.estimate.runtime import runtime_overheads
from gpuscope.estimate.topology import topology_for
from gpuscope.specs.axes import PlannerEngine
from gpuscope.specs.model import ModelSpec

# The planner engines of HF `generate` (plain, and over the compiled static-cache step): on a GPU their decode
# steps switch MoE experts from grouped_mm to batched_mm (ops._moe_ops). gpuscope's own graph loops (graph,
# graph-unfused: gs-compile, gs-graph) keep grouped_mm.
GENERATE_ENGINES = tuple(e.value for e in PlannerEngine if e.hf_generate)


def alt_key(engine: str) -> str:
    """An HF-generate estimate's time also holds the decode step under the other engines (same model, batch and
    lengths): decode_s_per_token_if_graph, decode_s_per_token_if_hf_graph, decode_s_per_token_if_hf_graph_defer."""
    return "decode_s_per_token_if_" + engine.replace("-", "_")


def _positive(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"--{name} must be a positive integer, got {value!r}.")
    return value


def check_tp(m: ModelSpec, tp: int, num_gpus: int) -> None:
    _positive("tp", tp)
    _positive("num-gpus", num_gpus)
    if num_gpus % tp:
        raise UserError(f"--tp ({tp}) must divide --num-gpus ({num_gpus}).")
    if m.num_heads % tp:
        raise UserError(f"--tp ({tp}) must divide the model's {m.num_heads} attention heads.")
    if m.num_kv_heads % tp and tp % m.num_kv_heads:
        raise UserError(f"--tp ({tp}) and the model's {m.num_kv_heads} KV heads must divide one another.")


def estimate_infer(m: ModelSpec, hw, *, batch: int, prompt: int, gen: int, dtype: str = "bf16",
                   kv_dtype: str | None = None, engine: str = "eager", num_gpus: int = 1, tp: int = 1,
                   with_ops: bool = False, mla_cache: str = "full", gqa_fold: bool = False,
                   fuse_proj: bool = False, moe_batched: bool | None = None, _alternatives: bool = True) -> Estimate:
    m, dtype, kv_dtype, engine = _checked(m, hw, batch, prompt, gen, dtype, kv_dtype, engine, num_gpus, tp, mla_cache)
    cdt = compute_dtype(dtype)
    act_b = nbytes(cdt) if cdt != "fp8" else 2.0  # fp8 GEMMs still produce 16-bit activations
    if moe_batched is None:  # generate's decode on a GPU: batched_mm experts
        moe_batched = engine in GENERATE_ENGINES
    static = engine in STATIC_CACHE_ENGINES
    memory = phase_memory(m, batch, prompt, gen, dtype, kv_dtype, act_b, tp, static=static, moe_batched=moe_batched)
    peak = max(memory["phases"].values())
    overheads = runtime_overheads(peak)
    t = _timing(m, hw, batch, prompt, gen, dtype, kv_dtype, engine, tp, act_b, gqa_fold, fuse_proj, moe_batched)
    attn = decode_attention(m, hw, engine, cdt)  # a cuDNN SDPA graph build a step at new KV lengths (cudnn_sdpa.py)
    t.time["cudnn_sdpa_build_s_per_step"] = attn.step_s
    t.time["decode_s_per_token_cold"] = t.time["decode_s_per_token"] + attn.step_s
    pc = count_params(m)
    est = Estimate(
        kind="infer", model=m.name, hardware=hw.key,
        inputs=dict(batch=batch, prompt=prompt, gen=gen, dtype=dtype, kv_dtype=kv_dtype, engine=engine,
                    num_gpus=num_gpus, tp=tp),
        fits=peak + sum(overheads.values()) <= hw.device_total_bytes, peak_bytes_per_gpu=peak,
        breakdown_bytes=memory["breakdown"], device_total_bytes=hw.device_total_bytes,
        runtime_overhead_bytes=overheads, phases_bytes=memory["phases"], time=t.time,
        throughput={"decode_tokens_per_s": batch / t.time["decode_s_per_token"],
                    "prefill_tokens_per_s": batch * prompt / t.time["prefill_s"],
                    "e2e_tokens_per_s": batch * gen / t.time["e2e_s"]},
        flops={"prefill": opsmod.total(t.pre_ops, "flops") * 1.0, "decode_per_token": opsmod.total(t.dec_ops, "flops")},
        params={"total": pc.total, "active": pc.active},
        calibrated=bool(getattr(hw, "is_calibrated", False)),
    )
    est.assumptions = _assumptions(m, hw, engine, t, cdt, tp, memory["breakdown"]["weights"], prompt + gen - 1,
                                   moe_batched)
    if attn.per_step_build:
        est.assumptions.append(cold_line(t.time["decode_s_per_token"], attn.step_s, compute_capability(hw)))
    est.limits = max_fit(m, hw, batch, prompt, gen, dtype, kv_dtype, act_b, tp, static, moe_batched)
    if _alternatives and engine in GENERATE_ENGINES:  # what the same decode would take under the other engines
        for e in ("hf-graph", "hf-graph-defer", "graph"):
            if e != engine:
                est.time[alt_key(e)] = estimate_infer(
                    m, hw, batch=batch, prompt=prompt, gen=gen, dtype=dtype, kv_dtype=kv_dtype, engine=e,
                    num_gpus=num_gpus, tp=tp, gqa_fold=gqa_fold, fuse_proj=fuse_proj,
                    _alternatives=False).time["decode_s_per_token"]
    est.verdict, est.suggestions = verdict_infer(est, m, hw, dtype, tp)
    if with_ops:
        est.ops = [dict(phase="prefill", **o.__dict__) for o in t.pre_times] + \
                  [dict(phase="decode", **o.__dict__) for o in t.dec_times]
    return est


def _checked(m: ModelSpec, hw, batch, prompt, gen, dtype, kv_dtype, engine, num_gpus, tp, mla_cache):
    """(model, dtype, kv dtype, planner engine) after checking every input: one sentence for the first bad one.
    ``mla_cache`` latent: the model caches MLA's shared latent instead of per-head K and V."""
    _positive("batch", batch)
    _positive("prompt", prompt)
    _positive("gen", gen)
    dtype = check_dtype(dtype, "--dtype")
    kv_dtype = check_dtype(kv_dtype or compute_dtype(dtype), "--kv-dtype", ("bf16", "fp16", "fp32", "fp8", "int8"))
    engine = PlannerEngine.parse(engine, "engine").value
    check_tp(m, tp, num_gpus)
    if mla_cache not in ("full", "latent"):
        raise UserError(f"--mla-cache must be full or latent, got '{mla_cache}'.")
    if mla_cache == "latent":
        if not m.mla:
            raise UserError(f"--mla-cache latent applies to MLA models (DeepSeek-V2/V3); {m.name} has none.")
        from dataclasses import replace as _replace

        m = _replace(m, mla_latent_cache=True)
    cdt = compute_dtype(dtype)
    if not hw.supports(cdt):
        raise UserError(f"--dtype {dtype} needs {cdt} compute, which {hw.name} does not support.")
    return m, dtype, kv_dtype, engine


# transformers' repeat_kv (GQA with an explicit mask: a StaticCache's, or a sliding window's) is
# ``kv[:, :, None].expand(b, kv_heads, n_rep, len, hd).reshape(b, heads, len, hd)``: a copy whose input has a
# zero stride, so TensorIterator runs the non-vectorised ``elementwise_kernel<128, 4>`` direct copy, not the
# vectorised one the 63% elementwise figure was measured on (roofline.ELEMENTWISE_BW_FRACTION). Set by the H200
# kernel table of gs-graph Llama-3.1-8B decode over a 2,056-slot StaticCache (research/results/2026-12-02-h200/call4,
# decode_batch.json; 64 copies a pass, 10 passes in the profile: 3 eager warm-ups + 7 replays): batch 16, 303 us a
# copy for 67.4 MB read + 269.5 MB written = 1.11 TB/s, 27% of the H200's 4,128 GB/s achievable copy rate; batch 1,
# a check: 19.9 us for 21.1 MB = 1.06 TB/s (the rate does not depend on the batch); research/results/2026-11-29-h200-c
# (doctor_gsgraph_8b.json, batch 1, 2,112 slots), the independent one: 1.06 TB/s. Decode only: the
# same run's batch-16 TTFTs (StaticCache 954 ms, DynamicCache 935) leave no room for it in the masked prefill.
REPEAT_KV_BW_FRACTION = 1.11e12 / 4128e9


def broadcast_copy_ops(ops: list) -> list:
    """After each repeat_kv op, the time its copy takes above the elementwise rate (REPEAT_KV_BW_FRACTION), as an
    op of no kernels and the bytes that time moves at that rate (the repeat_kv row keeps the bytes it copies)."""
    extra = ELEMENTWISE_BW_FRACTION / REPEAT_KV_BW_FRACTION - 1.0
    out = []
    for o in ops:
        out.append(o)
        if o.name == "repeat_kv":
            out.append(opsmod.Op("repeat_kv_strided_copy", o.kind, 0.0, o.bytes * extra, 0, o.count))
    return out


@dataclass
class _Timing:
    """One estimate's times (``time``: the JSON's keys) and what the assumptions and the op table read from it."""

    time: dict
    eng: EngineModel
    pre_ops: list
    dec_ops: list
    pre_times: list
    dec_times: list
    dec_gpu: float
    dec_host: float  # launches of one decode forward
    host_step: float  # the engine's host time per step outside the launches
    serial: float  # of it, what the GPU waits for
    tflops: float  # achievable over the TP group
    bw: float


def _timing(m: ModelSpec, hw, batch, prompt, gen, dtype, kv_dtype, engine, tp, act_b, gqa_fold, fuse_proj,
            moe_batched) -> _Timing:
    """Prefill (TTFT) and the decode step at the mean context (see the module docstring and roofline.py)."""
    eng = cpu_for_model(engine_for(engine, hw), m)  # a CPU's cost per kernel for this family (estimate/cpu.py)
    graph = engine in STATIC_CACHE_ENGINES
    w_b = (quantized_weight_bytes_per_param(dtype, m.hidden_size) if dtype in ("int8", "int4") else nbytes(dtype))
    kv_b = nbytes(kv_dtype)
    cdt = compute_dtype(dtype)
    tflops = hw.achievable_tflops(cdt) * tp
    bw = hw.achievable_bw_gbs() * tp
    sms = sm_count(hw)
    sms = sms * tp if sms else None
    static_len = prompt + gen if graph else None  # the graph engines run on a StaticCache of prompt + gen slots
    pre_ops = opsmod.forward_ops(m, batch, prompt, 0, act_b, w_b, act_b, head_tokens=batch,
                                 hf_cache_cat=not graph, head_w_b=act_b, static_len=static_len, gqa_fold=gqa_fold,
                                 fuse_proj=fuse_proj)
    # transformers compiles only the decode step (static cache); the prefill forward runs eagerly in both engines.
    pre_eng = cpu_for_model(engine_for("eager", hw), m).for_prefill()
    pre_wall, pre_gpu, pre_host, pre_times = forward_time(pre_ops, tflops, bw, pre_eng, sms, False, m.head_dim)
    mid_past = prompt + (gen - 1) / 2.0
    dec_ops = opsmod.forward_ops(m, batch, 1, int(round(mid_past)), act_b, w_b, act_b, head_tokens=batch,
                                 hf_cache_cat=not graph, head_w_b=act_b, static_len=static_len, gqa_fold=gqa_fold,
                                 fuse_proj=fuse_proj, moe_batched=moe_batched)
    if kv_b != act_b:  # KV traffic at the cache's dtype
        dec_ops = [o if o.kind not in ("cache",) else opsmod.Op(o.name, o.kind, o.flops, o.bytes * kv_b / act_b,
                                                               o.kernels, o.count) for o in dec_ops]
    if not eng.fused:  # HF's eager kernels at decode (eager, graph-unfused); measured there, not at prefill
        dec_ops = broadcast_copy_ops(dec_ops)
    dec_wall, dec_gpu, dec_host, dec_times = forward_time(dec_ops, tflops, bw, eng, sms, graph, m.head_dim)
    comm = _tp_comm_s(m, hw, tp, batch * prompt, act_b), _tp_comm_s(m, hw, tp, batch, act_b)
    cache_init = eng.cache_init_s(pre_eng.launch_s, m.num_layers)  # HF's StaticCache, made in the first forward
    prefill_s = pre_wall + comm[0] + eng.step_s + eng.setup_s + cache_init
    host_step = eng.serial_host_s(m.num_layers)  # host per step outside the launches (generate; the compiled call)
    serial = 0.0 if eng.ahead else host_step  # of it, what the GPU waits for
    decode_s = eng.decode_step_s(dec_wall, m.num_layers) + comm[1]
    time = {
        "prefill_s": prefill_s,
        "decode_s_per_token": decode_s,
        "e2e_s": prefill_s + (gen - 1) * decode_s,
        "decode_gpu_s": dec_gpu,
        "decode_host_s": dec_host + host_step,
        "decode_serial_host_s": serial,  # of it, what the GPU waits for every step (not overlapped)
        "prefill_gpu_s": pre_gpu,
        "prefill_cache_init_s": cache_init,
        "tp_comm_s_per_token": comm[1],
    }
    return _Timing(time, eng, pre_ops, dec_ops, pre_times, dec_times, dec_gpu, dec_host, host_step, serial, tflops,
                   bw)


def _assumptions(m: ModelSpec, hw, engine: str, t: _Timing, cdt: str, tp: int, weights: float, ctx_end: int,
                 moe_batched: bool) -> list[str]:
    """What the estimate assumed, in the order the report prints it: the engine, the ceilings, the decode bound,
    the weights a step reads, then the model's caveats (context, MLA cache, batched MoE experts)."""
    engine_line, decode_line = _engine_lines(engine, t, hw)
    platform = platform_for(hw)
    out = [
        engine_line,
        *([platform.assumed] if platform.assumed else []),  # host costs and context taken from CUDA's
        f"achievable {t.tflops / tp:.0f} TFLOP/s ({cdt}) and {t.bw / tp:.0f} GB/s per GPU",
        decode_line,
        f"weights per GPU: {weights / 1e9:.2f} GB"
        + (" (a MoE decode step reads only the experts its tokens are routed to)" if m.is_moe else
           " (all read once per decode step)"),
    ]
    copy_s = sum(o.gpu_s for o in t.dec_times if o.name.startswith("repeat_kv"))
    if copy_s:
        out.append(f"decode: transformers' repeat_kv copies K and V out to all {m.num_heads} query heads (GQA under "
                   f"a mask), {copy_s * 1e3:.2f} ms a step"
                   + (f" at the strided copy's {REPEAT_KV_BW_FRACTION * t.bw / tp / 1e3:.2f} TB/s"
                      if not t.eng.fused else "") + " (bench --attn gs-gqa: GQA folded into SDPA, no copy)")
    if ctx_end > m.max_position_embeddings:
        out.append(f"context {ctx_end} exceeds the model's max_position_embeddings ({m.max_position_embeddings})")
    if m.mla and not m.mla_latent_cache:
        a = m.mla
        latent = (a.kv_lora_rank + a.qk_rope_head_dim) / (m.kv_cache_elems_per_token() / m.num_layers)
        out.append(
            f"KV cache as transformers keeps MLA: per-head K and V; engines that cache the {a.kv_lora_rank}+"
            f"{a.qk_rope_head_dim} latent (vLLM, SGLang, FlashMLA) need {latent:.1%} of it")
    if moe_batched and m.is_moe:
        out.append(
            "MoE decode as HF generate runs it on a GPU (batched_mm experts): each of the batch x top-k routed rows "
            "gathers a copy of its expert's weights, so a step reads them three times and holds both copies "
            "(--engine graph, a static-cache loop with grouped_mm, reads each routed expert once)")
    return out


def _engine_lines(engine: str, t: _Timing, hw) -> tuple[str, str]:
    """(how the engine feeds the GPU, what bounds the decode step), with the host costs it used and whose."""
    eng, dec_gpu, host_step, serial = t.eng, t.dec_gpu, t.host_step, t.serial
    host_src = (" (this machine's, from the hardware TOML)" if (getattr(hw, "measured", None) or {}).get(
        "host_launch_s") else " (an H200 host's; `gpuscope hardware calibrate` measures yours)")
    if eng.ahead:
        return ((f"engine {engine}: HF generate over the compiled step, its stop flag read one token late "
                 f"(bench --defer-stop), so its host {host_step * 1e3:.2f} ms/token ({eng.step_s * 1e3:.2f} in "
                 f"generate{host_src} + {eng.call_s * 1e3:.2f} ms + {eng.call_layer_s * 1e6:.1f} us/layer per "
                 "compiled call, an H200 host's) runs ahead of the GPU"),
                (f"decode: the larger of GPU {dec_gpu * 1e3:.2f} + {eng.gpu_step_s * 1e3:.2f} ms (generate's "
                 f"own kernels and the replay) and host {host_step * 1e3:.2f} ms per step"))
    if eng.call_s:
        return ((f"engine {engine}: host {eng.step_s * 1e3:.2f} ms/token in generate{host_src} + "
                 f"{eng.call_s * 1e3:.2f} ms + {eng.call_layer_s * 1e6:.1f} us/layer per compiled call (an H200 "
                 "host's; calibrate does not measure it)"),
                (f"decode: GPU {dec_gpu * 1e3:.2f} ms + host {serial * 1e3:.2f} ms per step in series (generate "
                 "waits on the GPU every token, so the compiled call's host work never overlaps it)"))
    if not eng.launch_s:  # gpuscope's graph loops: one replay per token, never waiting
        return ((f"engine {engine}: one replay of {platform_for(hw).graphs} per token from a loop that never waits "
                 "on the GPU; "
                 + (f"{eng.step_s * 1e3:.2f} ms/token outside the layers' modelled kernels (sampling over the "
                    "vocabulary, replay gaps: measured gs-compile TPOTs less the op list's GPU time)"
                    if eng.step_s else
                    f"replay gaps counted in its {eng.kernel_min_s * 1e6:.1f} us floor per small kernel")),
                f"decode: GPU {dec_gpu * 1e3:.2f} ms" + (
                    f" + {eng.step_s * 1e3:.2f} ms per step" if eng.step_s else " per step (GPU-bound)"))
    if eng.cpu is not None:  # the CPU runs its own ops: compute and dispatch in series (estimate/cpu.py)
        return ((f"engine {engine} on the CPU: {eng.launch_s * 1e6:.1f} us per kernel, {eng.step_s * 1e3:.1f} "
                 f"ms/token outside the model{host_src}"),
                (f"decode on the CPU: compute {dec_gpu * 1e3:.2f} ms + dispatch {(t.dec_host + serial) * 1e3:.2f} ms "
                 "per step, in series"))
    bound = "host (launch)" if t.dec_host + host_step > dec_gpu + eng.gpu_step_s else "GPU"
    return ((f"engine {engine}: host {eng.launch_s * 1e6:.1f} us/kernel, {eng.step_s * 1e3:.1f} ms/token "
             f"outside the model{host_src}"),
            (f"decode is {bound}-bound: GPU {dec_gpu * 1e3:.2f} ms vs host {(t.dec_host + serial) * 1e3:.2f} "
             "ms per step"))


def _tp_comm_s(m: ModelSpec, hw, tp: int, tokens: int, act_b: float) -> float:
    """Two all-reduces of the hidden state per layer (Megatron-style TP), timed by the collective model over the
    device's topology (comm.py: nccl-tests ring bus bandwidth, per-step latency; measured links where given)."""
    if tp == 1:
        return 0.0
    topo = topology_for(hw, tp)
    return 2 * m.num_layers * collective_time("all_reduce", tokens * m.hidden_size * act_b, tp, topo)


def verdict_infer(est: Estimate, m: ModelSpec, hw, dtype: str, tp: int) -> tuple[str, list[str]]:
    gib = 2**30
    need, have = est.required_bytes / gib, est.device_total_bytes / gib
    if est.fits:
        v = (f"Fits on {hw.name}: {need:.1f} of {have:.1f} GiB; decode {est.throughput['decode_tokens_per_s']:.0f}"
             f" tok/s, TTFT {est.time['prefill_s'] * 1e3:.0f} ms.")
        tips = []
        t = est.time
        other = {e: t[alt_key(e)] for e in ("graph", "hf-graph", "hf-graph-defer") if alt_key(e) in t}
        graphs = platform_for(hw).graphs
        loop = (f"~{other['graph'] * 1e3:.2f} ms/token in a compiled loop of {graphs} that never waits (--engine "
                "graph; bench --engine gs-compile)") if "graph" in other else ""
        defer = (f"~{other['hf-graph-defer'] * 1e3:.2f} with its stop flag read one token late (--engine "
                 "hf-graph-defer; bench --engine hf-graph --defer-stop)") if "hf-graph-defer" in other else ""
        if est.inputs["engine"] == "eager" and t["decode_host_s"] > t["decode_gpu_s"]:
            tips.append(f"decode is launch-bound (host {t['decode_host_s'] * 1e3:.2f} vs GPU "
                        f"{t['decode_gpu_s'] * 1e3:.2f} ms a token): {loop or graphs + ' / torch.compile'}"
                        + (f", ~{other['hf-graph'] * 1e3:.2f} under HF generate with a static cache (--engine "
                           "hf-graph), " + defer if "hf-graph" in other else "") + ", or a larger batch")
        if est.inputs["engine"] == "hf-graph" and loop:
            tips.append(f"generate waits on the GPU every token: {t['decode_serial_host_s'] * 1e3:.2f} of "
                        f"{t['decode_s_per_token'] * 1e3:.2f} ms a token is host in series; {defer}, or {loop}")
        return v, tips
    tips = []
    w = est.breakdown_bytes["weights"]
    for smaller in ("fp8", "int8", "int4"):
        if nbytes(smaller) < nbytes(dtype) and (smaller != "fp8" or hw.supports("fp8")):
            frac = quantized_weight_bytes_per_param(smaller) / nbytes(dtype)
            if est.required_bytes - w * (1 - frac) <= est.device_total_bytes:
                tips.append(f"weights in {smaller} would fit")
                break
    if est.limits.get("max_batch"):
        tips.append(f"batch <= {est.limits['max_batch']} fits")
    elif est.limits.get("max_prompt"):
        tips.append(f"prompt <= {est.limits['max_prompt']} tokens fits")
    gpus_needed = tp
    while gpus_needed < 64 and est.required_bytes * tp / gpus_needed > est.device_total_bytes:
        gpus_needed *= 2
    if gpus_needed > tp and m.num_heads % gpus_needed == 0:
        tips.append(f"tensor parallel over {gpus_needed} GPUs (--num-gpus {gpus_needed} --tp {gpus_needed})")
    return f"Does not fit on {hw.name}: needs {need:.1f} GiB of {have:.1f} GiB.", tips
