"""`plan_serve(request, hardware) -> ServeEstimate`: capacity, throughput and latency percentiles of a serving
workload under a continuous-batching engine (the library call behind `gpuscope plan serve`; `bench serve` puts
it beside a measurement).

Pipeline: quant.py sizes the weights as the engine stores them -> kv_pages.py turns what memory is left into KV
blocks by the engine's own rule -> step_time.py prices one step from the roofline op list -> scheduler.py runs the
requests through the engine's scheduler -> metrics.py reports them with vLLM's benchmark definitions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gpuscope.errors import UserError
from gpuscope.estimate.infer import check_tp
from gpuscope.estimate.serve import kv_pages, metrics, quant
from gpuscope.estimate.serve.profiles import serve_engine
from gpuscope.estimate.serve.scheduler import Simulator
from gpuscope.estimate.serve.step_time import build_step_model
from gpuscope.estimate.serve.workload import make_requests
from gpuscope.specs.model import ModelSpec

SCHEMA = "gpuscope.estimate/1"
CURVE_FRACTIONS = (0.25, 0.5, 0.75, 0.9, 1.0, 1.25)  # of the offline request throughput
MAX_REQUESTS = 1_000_000  # a simulation holds every request (30,000 simulate in about 0.3 s)


@dataclass
class ServeRequest:
    model: ModelSpec
    requests: int
    prompt: int
    gen: int
    rate: float | None = None  # Poisson arrivals, requests/s
    concurrency: int | None = None  # closed loop of this many clients
    dtype: str = "bf16"
    kv_dtype: str | None = None
    engine: str = "transformers"
    tp: int = 1
    slo_ttft: float | None = None
    slo_tpot: float | None = None
    prompt_dist: str = "fixed"
    prompt_spread: float = 0.0
    gen_dist: str = "fixed"
    gen_spread: float = 0.0
    prefix_hit: float = 0.0
    seed: int = 0
    attn: str = "sdpa"  # transformers: paged|sdpa (default without flash-attn) or flash
    sampling: bool = False  # transformers: logits processors on (its cache takes 80% instead of 90%)
    mem_fraction: float | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    block_size: int | None = None
    curve: bool = False


@dataclass
class ServeEstimate:
    request: dict
    model: str
    hardware: str
    engine: dict
    memory: dict
    capacity: dict
    throughput: dict
    latency: dict
    goodput: dict | None
    cost: dict
    simulation: dict
    curve: list = field(default_factory=list)
    assumptions: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "kind": "serve", "model": self.model, "hardware": self.hardware,
                "inputs": self.request, "engine": self.engine, "memory": self.memory, "capacity": self.capacity,
                "throughput": self.throughput, "latency": self.latency, "goodput": self.goodput, "cost": self.cost,
                "simulation": self.simulation, "curve": self.curve, "assumptions": self.assumptions}


def _check(r: ServeRequest, hw) -> None:
    for name in ("requests", "prompt", "gen", "tp"):
        v = getattr(r, name)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise UserError(f"--{name} must be a positive integer, got {v!r}.")
    if r.requests > MAX_REQUESTS:
        raise UserError(f"--requests must be at most {MAX_REQUESTS:,} (the simulation holds every request), got "
                        f"{r.requests:,}.")
    if r.rate is not None and r.concurrency is not None:
        raise UserError("--rate and --concurrency are exclusive: give one (or neither, for offline).")
    if r.rate is not None and not (r.rate > 0 and r.rate < float("inf")):
        raise UserError(f"--rate must be a positive number of requests per second, got {r.rate}.")
    if r.concurrency is not None and (isinstance(r.concurrency, bool) or r.concurrency <= 0):
        raise UserError(f"--concurrency must be a positive integer, got {r.concurrency}.")
    for name in ("slo_ttft", "slo_tpot"):
        v = getattr(r, name)
        if v is not None and not (v > 0 and v < float("inf")):
            raise UserError(f"--{name.replace('_', '-')} must be a positive number of seconds, got {v}.")
    check_tp(r.model, r.tp, r.tp)


def prepare(r: ServeRequest, hw):
    """(engine, weight format, kv dtype, KV plan, step model) of a request: what simulate() runs on."""
    _check(r, hw)
    m = r.model
    fmt = quant.weight_format(r.dtype)
    if not hw.supports(fmt.compute):
        raise UserError(f"--dtype {fmt.name} needs {fmt.compute} compute, which {hw.name} does not support.")
    kv_dtype = (r.kv_dtype or quant.default_kv_dtype(fmt)).lower()
    kv_b = quant.kv_bytes_per_elem(kv_dtype)
    eng = serve_engine(r.engine, hw, attn=r.attn, sampling=r.sampling, requests=r.requests,
                       mem_fraction=r.mem_fraction, max_num_seqs=r.max_num_seqs,
                       max_batched_tokens=r.max_batched_tokens, block_size=r.block_size)
    act_b = 4.0 if fmt.compute == "fp32" else 2.0
    if eng.mem_rule == "transformers" and kv_b != act_b:
        raise UserError("--engine transformers keeps its KV cache in the model's dtype; drop --kv-dtype "
                        f"{kv_dtype} or pick another engine.")
    weights = quant.weight_bytes(m, fmt, r.tp)
    seq = r.prompt + r.gen
    kv = kv_pages.plan_kv(m, hw, eng, weights=weights, kv_b=kv_b, act_b=act_b, tp=r.tp, seq_tokens=seq,
                          flash=r.attn == "flash")
    if kv.blocks_for(seq) > kv.num_blocks:
        raise UserError(f"one request of {seq} tokens needs {kv.blocks_for(seq)} KV blocks; {m.name} on "
                        f"{hw.name} has room for {kv.num_blocks}.")
    step = build_step_model(m, hw, eng, w_b=quant.linear_bytes_per_weight(m, fmt), kv_b=kv_b,
                            compute=fmt.compute, tp=r.tp, max_tokens=kv.max_batched_tokens,
                            max_rows=eng.max_num_seqs)
    return eng, fmt, kv_dtype, kv, step


def simulate(r: ServeRequest, eng, kv, step, rate: float | None = None, concurrency: int | None = None):
    reqs = make_requests(r.requests, r.prompt, r.gen, rate=rate, seed=r.seed, prompt_dist=r.prompt_dist,
                         prompt_spread=r.prompt_spread, gen_dist=r.gen_dist, gen_spread=r.gen_spread,
                         prefix_hit=r.prefix_hit, block_size=kv.block_size)
    sim = Simulator(reqs, step, num_blocks=kv.num_blocks, block_size=kv.block_size,
                    max_num_seqs=min(eng.max_num_seqs, kv.max_batched_tokens),
                    max_batched_tokens=kv.max_batched_tokens, safety_margin=eng.safety_margin,
                    concurrency=concurrency if rate is None else None, reserve_full=eng.reserve_full)
    return sim.run()


def plan_serve(request: ServeRequest, hardware) -> ServeEstimate:
    """The serving estimate of ``request`` on ``hardware`` (a HardwareSpec; TP ranks are GPUs of that kind)."""
    r, hw = request, hardware
    eng, fmt, kv_dtype, kv, step = prepare(r, hw)
    res = simulate(r, eng, kv, step, r.rate, r.concurrency)
    summ = metrics.summarize(res.seqs, res.duration_s, res.itl, r.slo_ttft, r.slo_tpot)
    seq = r.prompt + r.gen
    capacity = {"max_concurrent_sequences": min(kv.max_sequences(seq), eng.max_num_seqs),
                "kv_cache_sequences": kv.max_sequences(seq), "max_num_seqs": eng.max_num_seqs,
                "kv_cache_tokens": kv.tokens, "num_blocks": kv.num_blocks, "block_size": kv.block_size,
                "max_batched_tokens": kv.max_batched_tokens, "peak_running": res.peak_running}
    memory = {"kv_cache_bytes": round(kv.kv_cache_bytes), "weights_bytes": round(kv.weights_bytes),
              "kv_bytes_per_token": kv.bytes_per_token, "engine_budget_bytes": round(kv.budget_bytes),
              "activation_reserve_bytes": round(kv.activation_bytes), "device_total_bytes": hw.device_total_bytes,
              "peak_kv_blocks_used": res.peak_blocks}
    thr = summ["throughput"]
    cost = _cost(hw, r.tp, thr["output_tokens_per_s"], (summ["goodput"] or {}).get("output_tokens_per_s"))
    est = ServeEstimate(
        request=_inputs(r, kv_dtype), model=r.model.name, hardware=hw.key,
        engine={k: v for k, v in asdict(eng).items()}, memory=memory, capacity=capacity, throughput=thr,
        latency=summ["latency"], goodput=summ["goodput"], cost=cost,
        simulation={"steps": res.steps, "duration_s": summ["duration_s"], "preemptions": res.preemptions,
                    "mode": "poisson" if r.rate else ("concurrency" if r.concurrency else "offline")},
        assumptions=_assumptions(r, eng, fmt, kv_dtype, kv))
    if r.curve:
        offline = res if est.simulation["mode"] == "offline" else simulate(r, eng, kv, step)
        est.curve = _curve(r, eng, kv, step, len(offline.seqs) / metrics.summarize(
            offline.seqs, offline.duration_s, [])["duration_s"], hw)
    return est


def _inputs(r: ServeRequest, kv_dtype: str) -> dict:
    d = {k: v for k, v in asdict(r).items() if k != "model"}
    d["kv_dtype"] = kv_dtype
    return d


def _cost(hw, gpus: int, tokens_per_s: float | None, good_tokens_per_s: float | None) -> dict:
    from gpuscope.specs.prices import price_for

    entry = price_for(hw)
    p, buy = entry.cloud, entry.purchase
    price, usd = (p.value if p else None), (buy.value if buy else None)
    return {"usd_per_gpu_hour": price, "price_source": p.source if p else None, "gpus": gpus,
            "usd_per_m_output_tokens": metrics.cost(price, gpus, tokens_per_s),
            "usd_per_m_output_tokens_at_slo": metrics.cost(price, gpus, good_tokens_per_s),
            "purchase_usd": usd, "purchase_source": buy.source if buy else None,
            "usd_per_m_output_tokens_owned": metrics.cost_owned(usd, hw.tdp_w, gpus, tokens_per_s),
            "usd_per_m_output_tokens_owned_at_slo": metrics.cost_owned(usd, hw.tdp_w, gpus, good_tokens_per_s)}


def _curve(r: ServeRequest, eng, kv, step, offline_rps: float, hw) -> list[dict]:
    """Throughput and latency at Poisson rates from a quarter of the offline request throughput to 1.25 x it."""
    out = []
    for f in CURVE_FRACTIONS:
        rate = f * offline_rps
        res = simulate(r, eng, kv, step, rate)
        s = metrics.summarize(res.seqs, res.duration_s, res.itl, r.slo_ttft, r.slo_tpot)
        lat = s["latency"]
        out.append({"rate_requests_per_s": rate, "output_tokens_per_s": s["throughput"]["output_tokens_per_s"],
                    "ttft_p50_s": lat["ttft_p50_s"], "ttft_p99_s": lat["ttft_p99_s"],
                    "tpot_p50_s": lat["tpot_p50_s"], "tpot_p99_s": lat["tpot_p99_s"],
                    "goodput_requests_per_s": (s["goodput"] or {}).get("requests_per_s")})
    return out


def _assumptions(r: ServeRequest, eng, fmt, kv_dtype: str, kv) -> list[str]:
    out = [f"engine {eng.name}: {eng.source}; blocks of {eng.block_size} tokens, max {eng.max_num_seqs} sequences, "
           f"{kv.max_batched_tokens} tokens a step" + (", CUDA-graph decode" if eng.decode_graph else
                                                      ", eager steps (no CUDA graphs)"),
           f"KV cache: {kv.rule}",
           f"weights {fmt.name} ({fmt.bits:.3g} bits a weight: {fmt.source}), compute {fmt.compute}; KV {kv_dtype}"]
    if eng.dense_masked_attention:
        out.append("attention as paged|sdpa: one SDPA over the packed batch with a dense mask, so its cost grows "
                   "with (batch tokens) x (all cached tokens read), and at decode, where its thread blocks are fewer "
                   "than the SMs, with all cached tokens read x layers; flash attention (--attn flash) avoids it")
    if eng.host_graph_build_s and not eng.decode_graph:
        out.append(f"every step builds a cuDNN SDPA graph for its new (queries, keys) shape on the host: "
                   f"{eng.host_graph_build_s * 1e3:.1f} ms in series, the GPU idle (torch 2.11 on an H200 host)")
    if eng.host_per_finish_s:
        out.append(f"each finishing request costs the host loop {eng.host_per_finish_s * 1e3:.2f} ms after its last "
                   "token (set by one large drain on an H200 host; a small drain read it near 0)")
    if r.prompt + r.gen > r.model.max_position_embeddings:
        out.append(f"prompt + gen ({r.prompt + r.gen}) exceeds the model's max_position_embeddings "
                   f"({r.model.max_position_embeddings})")
    if r.prefix_hit:
        out.append(f"prefix cache: {r.prefix_hit:.0%} of each prompt (whole blocks) is not prefilled; its blocks "
                   "are counted per request (engines share them, so memory is an upper bound)")
    return out
