"""The ``serve`` kind: a serving run under continuous batching (`bench serve`): N requests of P prompt and G output
tokens, offline, at a Poisson rate or at a fixed concurrency; TTFT, TPOT, ITL and E2E percentiles with vLLM's
definitions, output tokens/s and goodput under SLOs (measure/serve/metrics.py). Three ways to run it:

- ``model`` alone: transformers' continuous batching in the case's process (measure/serve/inprocess.py);
- ``endpoint``: any OpenAI-compatible server already running (measure/serve/loadgen.py);
- ``launch: transformers``: `transformers serve` started on 127.0.0.1 and driven over HTTP (measure/serve/launch.py).

The estimate beside it is `plan serve`'s (gpuscope.estimate.serve.plan_serve) for the same requests, on the
transformers engine profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.errors import UserError
from gpuscope.specs.axes import Attention, InferDtype, WorkloadKind
from gpuscope.specs.numbers import number
from gpuscope.workloads.case import Case, model_name, model_spec
from gpuscope.workloads.notes import not_ok

APIS = ("completions", "chat")
LAUNCHERS = ("transformers",)
EXACT = ("vllm", "transformers", "none")
DISTRIBUTIONS = ("fixed", "uniform", "normal")
MAX_RATE = 1e6  # requests/s: beyond any server; larger is a typo


@dataclass(frozen=True, kw_only=True)
class ServeCase(Case):
    KIND = WorkloadKind.SERVE
    ALWAYS = ("requests", "prompt", "gen")
    FLAGS = {"slo_ttft_s": "slo-ttft", "slo_tpot_s": "slo-tpot", "slo_e2e_s": "slo-e2e",
             "request_timeout_s": "request-timeout", "warmup_requests": "warmup-requests",
             "max_batch_tokens": "max-batched-tokens", "max_memory_percent": "mem-fraction"}
    # a serving run takes no host probe: its result has no host_probe_s, so no host scaling is applied to it
    HOST_PROBE, TTFT_PROBE = "host_probe_s", None

    requests: int
    prompt: int
    gen: int
    model: str | None = None
    config: dict | None = None
    endpoint: str | None = None
    launch: str | None = None
    api: str = "completions"
    served_model: str | None = None
    exact: str = "vllm"
    rate: float | None = None
    concurrency: int | None = None
    burstiness: float = 1.0
    prompt_dist: str = "fixed"
    prompt_spread: float = 0.0
    gen_dist: str = "fixed"
    gen_spread: float = 0.0
    seed: int = 0
    dtype: InferDtype = InferDtype.BF16
    attn: Attention = Attention.SDPA
    device: str | None = None
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    slo_e2e_s: float | None = None
    num_blocks: int | None = None
    max_batch_tokens: int | None = None
    max_memory_percent: float | None = None
    warmup_requests: int | None = None
    request_timeout_s: float = 600.0

    def __post_init__(self):
        self.positive("requests", "prompt", "gen")
        self.axis("dtype", InferDtype)
        self.axis("attn", Attention, among=(Attention.SDPA, Attention.EAGER))
        self._choices()
        self._arrivals()
        for name in ("slo_ttft_s", "slo_tpot_s", "slo_e2e_s", "request_timeout_s"):
            if getattr(self, name) is not None:
                number(getattr(self, name), self.flag(name))
        for name in ("num_blocks", "max_batch_tokens"):
            if getattr(self, name) is not None:
                self.positive(name)
        if self.warmup_requests is not None:
            self.non_negative("warmup_requests")
        if self.max_memory_percent is not None and not 0 < self.max_memory_percent <= 1:
            raise UserError(f"{self.flag('max_memory_percent')} must be in (0, 1], not {self.max_memory_percent}.")

    def _choices(self) -> None:
        for name, allowed in (("api", APIS), ("exact", EXACT), ("prompt_dist", DISTRIBUTIONS),
                              ("gen_dist", DISTRIBUTIONS)):
            if getattr(self, name) not in allowed:
                raise UserError(f"{self.flag(name)} '{getattr(self, name)}' is not one of {', '.join(allowed)}.")
        if self.launch is not None and self.launch not in LAUNCHERS:
            raise UserError(f"--launch '{self.launch}' is not one of {', '.join(LAUNCHERS)}.")
        if self.endpoint and self.launch:
            raise UserError("--endpoint and --launch exclude each other (drive a running server, or start one).")
        if not self.endpoint and not (self.model or self.config):
            raise UserError("bench serve needs --model (served in-process or launched) or --endpoint URL.")
        if self.endpoint:
            from gpuscope.measure.serve.loadgen import check_endpoint_url

            check_endpoint_url(self.endpoint)

    def _arrivals(self) -> None:
        if self.rate is not None and self.concurrency is not None:
            raise UserError("--rate and --concurrency exclude each other (Poisson arrivals, or a closed loop).")
        if self.rate is not None:
            number(self.rate, "--rate", maximum=MAX_RATE)
        if self.concurrency is not None:
            self.positive("concurrency")
        number(self.burstiness, "--burstiness", maximum=1e3)
        for name in ("prompt_spread", "gen_spread"):
            if not 0 <= getattr(self, name) < 1:
                raise UserError(f"{self.flag(name)} must be in [0, 1), not {getattr(self, name)}.")

    @property
    def mode(self) -> str:
        return f"rate{self.rate:g}" if self.rate else (f"c{self.concurrency}" if self.concurrency else "offline")

    @property
    def via(self) -> str:
        return "http" if self.endpoint else (f"launch-{self.launch}" if self.launch else "cb")

    @property
    def name(self) -> str:
        who = model_name(self) if (self.model or self.config) else self.endpoint.split("//")[-1].split("/")[0]
        return f"serve/{who}/n{self.requests}-p{self.prompt}-g{self.gen}-{self.mode}-{self.via}"


CASE = ServeCase


def estimate(case: ServeCase, hw):
    """`plan serve`'s estimate of the same requests on ``hw`` (the transformers engine profile)."""
    if not (case.model or case.config):
        raise UserError("the planner needs the served model: pass --model with --endpoint to plan beside it.")
    try:
        from gpuscope.estimate.serve import ServeRequest, plan_serve
    except ImportError:
        raise UserError("this gpuscope has no serving planner (gpuscope.estimate.serve).") from None
    req = ServeRequest(model=model_spec(case), requests=case.requests, prompt=case.prompt, gen=case.gen,
                       rate=case.rate, concurrency=case.concurrency, dtype=case.dtype.value, engine="transformers",
                       slo_ttft=case.slo_ttft_s, slo_tpot=case.slo_tpot_s, prompt_dist=case.prompt_dist,
                       prompt_spread=case.prompt_spread, gen_dist=case.gen_dist, gen_spread=case.gen_spread,
                       seed=case.seed, attn=case.attn.value, mem_fraction=case.max_memory_percent,
                       max_batched_tokens=case.max_batch_tokens)
    return plan_serve(req, hw)


def run(case: ServeCase) -> dict:
    d = case.to_dict()
    if case.endpoint:
        from gpuscope.measure.serve.run import run_endpoint

        return run_endpoint(d)
    if case.launch:
        from gpuscope.measure.serve.run import run_launch

        return run_launch(d)
    from gpuscope.measure.serve.inprocess import run_inprocess

    return run_inprocess(d)


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1e3:.2f} ms"


def headline(r: dict) -> str:
    bad = not_ok(r)
    if bad is not None:
        return bad
    lat, thr = r.get("latency") or {}, r.get("throughput") or {}
    fails = f"; {r['failed']} of {r['requests']} requests failed ({next(iter(r['errors']))})" if r.get("failed") else ""
    good = f", goodput {r['goodput_requests_per_s']:.2f} req/s" if r.get("goodput_requests_per_s") is not None else ""
    return (f"{thr.get('output_tokens_per_s') or 0:.1f} output tok/s, ttft p50 {_ms(lat.get('ttft_p50_s'))} "
            f"p99 {_ms(lat.get('ttft_p99_s'))}, tpot p50 {_ms(lat.get('tpot_p50_s'))} p99 "
            f"{_ms(lat.get('tpot_p99_s'))}{good}{fails}")


ROWS = ("throughput.output_tokens_per_s", "latency.ttft_p50_s", "latency.ttft_p99_s", "latency.tpot_p50_s",
        "latency.tpot_p99_s")


def rows(case: ServeCase, est, res: dict) -> list[tuple[str, float, float]]:
    """(metric, estimated, measured) for the keys `plan serve` and `bench serve` share, where both have them."""
    e = est.to_json() if hasattr(est, "to_json") else est
    out = []
    for key in ROWS:
        group, name = key.split(".")
        ev, mv = (e.get(group) or {}).get(name), (res.get(group) or {}).get(name)
        if ev is not None and mv is not None:
            out.append((key, ev, mv))
    return out
