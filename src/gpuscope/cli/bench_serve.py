"""`gpuscope bench serve`: a serving run under continuous batching, stored like every bench result (its case in its
own process, pipeline/bench.run_workloads), `plan serve`'s estimate beside it.

- ``--model M`` alone: transformers' continuous batching in-process (random weights, random token-id prompts);
- ``--endpoint URL``: any OpenAI-compatible server already running (its reachability is checked first: a dead
  endpoint is one sentence, exit 2, nothing stored);
- ``--model M --launch transformers``: `transformers serve` started on 127.0.0.1, driven, and ended.

Failed requests are recorded with their error in the result; a run where none completed is stored as an error
(exit 1). Keys: ``throughput.output_tokens_per_s``, ``latency.ttft_p50_s`` ... as `plan serve` writes them.
"""

from __future__ import annotations

import typer

from gpuscope.cli import options
from gpuscope.cli.bench_run import Session, bench_gpu, guarded, json_out, timeout
from gpuscope.errors import UserError

HELP = {
    "endpoint": "An OpenAI-compatible server's base URL (e.g. http://127.0.0.1:8000/v1): drive it over HTTP.",
    "launch": "transformers: start `transformers serve --continuous-batching` on 127.0.0.1 with --model's random "
              "weights, drive it, end it.",
    "rate": "Poisson arrivals at this many requests/s (default: offline, all at t=0).",
    "concurrency": "A closed loop of this many requests in flight.",
    "exact": "How requests ask for exactly --gen tokens: vllm (ignore_eos + min_tokens: vLLM, SGLang, TensorRT-LLM), "
             "transformers (a generation_config), none.",
    "served_model": "The model name sent in requests (default: the first the server lists).",
    "dist": "fixed | uniform | normal (with its --*-spread as a fraction of the mean).",
    "num_blocks": "KV cache blocks of the engine (default: the engine's own sizing; on a CPU, the workload's).",
}


def _opt(default, flag: str, help: str = ""):
    return typer.Option(default, flag, help=help)


def serve_case(model, endpoint, launch, kw: dict) -> dict:
    """The serve case's dict of the command's options (None: not given, so the case's default and key hold)."""
    from gpuscope.workloads.serve import ServeCase

    c = {"kind": "serve", **{k: v for k, v in kw.items() if v is not None}}
    if model:
        name, inline = options.case_model(model)
        c.update(model=name, **inline)
    c.update({k: v for k, v in (("endpoint", endpoint), ("launch", launch)) if v})
    if launch and not kw.get("exact"):
        c["exact"] = "transformers"
    return ServeCase.from_dict(c).to_dict()


def serve(
    model: str = typer.Option(None, "--model", help=options.MODEL_HELP + " The served model (with --endpoint: "
                              "for the estimate)."),
    endpoint: str = _opt(None, "--endpoint", HELP["endpoint"]),
    launch: str = _opt(None, "--launch", HELP["launch"]),
    requests: int = _opt(64, "--requests", "Requests in the run."),
    prompt: int = _opt(512, "--prompt", "Prompt tokens per request (mean)."),
    gen: int = _opt(128, "--gen", "Output tokens per request (mean; EOS ignored where the server allows)."),
    rate: float = _opt(None, "--rate", HELP["rate"]),
    concurrency: int = _opt(None, "--concurrency", HELP["concurrency"]),
    burstiness: float = _opt(None, "--burstiness", "Gamma shape of the gaps between arrivals (1: Poisson)."),
    prompt_dist: str = _opt(None, "--prompt-dist", HELP["dist"]),
    prompt_spread: float = _opt(None, "--prompt-spread", "Spread of the prompt lengths (fraction of the mean)."),
    gen_dist: str = _opt(None, "--gen-dist", HELP["dist"]),
    gen_spread: float = _opt(None, "--gen-spread", "Spread of the output lengths (fraction of the mean)."),
    seed: int = _opt(None, "--seed", "Seed of the arrivals, lengths and prompts."),
    api: str = _opt(None, "--api", "completions | chat (the endpoint's API)."),
    served_model: str = _opt(None, "--served-model", HELP["served_model"]),
    exact: str = _opt(None, "--exact", HELP["exact"]),
    slo_ttft: float = _opt(None, "--slo-ttft", "TTFT SLO in seconds (goodput)."),
    slo_tpot: float = _opt(None, "--slo-tpot", "TPOT SLO in seconds (goodput)."),
    slo_e2e: float = _opt(None, "--slo-e2e", "E2E latency SLO in seconds (goodput)."),
    dtype: str = options.dtype(),
    num_blocks: int = _opt(None, "--num-blocks", HELP["num_blocks"]),
    max_batch_tokens: int = _opt(None, "--max-batched-tokens", "Tokens per engine step at most (engine default; "
                                 "as plan serve's flag)."),
    max_memory_percent: float = _opt(None, "--mem-fraction", "Fraction of free device memory the engine's KV cache "
                                     "takes (engine default; as plan serve's flag)."),
    warmup_requests: int = _opt(None, "--warmup-requests", "Untimed short requests first (in-process: min(N, 8))."),
    request_timeout: float = _opt(None, "--request-timeout", "Seconds one request may take (600)."),
    gpu: str = bench_gpu(), timeout_s: float = timeout(3600, "Seconds before the whole run is stopped."),
    db: str = options.db(), resume: bool = options.resume(), as_json: bool = json_out(),
    device: str = options.device(),
) -> None:
    """Serving under continuous batching: TTFT, TPOT, ITL, E2E percentiles, output tokens/s and goodput, in-process
    (transformers' continuous batching), against an OpenAI-compatible endpoint, or a launched `transformers serve`."""
    from gpuscope.pipeline.bench import run_workloads

    kw = {"requests": requests, "prompt": prompt, "gen": gen, "rate": rate, "concurrency": concurrency,
          "burstiness": burstiness, "prompt_dist": prompt_dist, "prompt_spread": prompt_spread, "gen_dist": gen_dist,
          "gen_spread": gen_spread, "seed": seed, "api": api, "served_model": served_model, "exact": exact,
          "slo_ttft_s": slo_ttft, "slo_tpot_s": slo_tpot, "slo_e2e_s": slo_e2e, "dtype": dtype,
          "num_blocks": num_blocks, "max_batch_tokens": max_batch_tokens, "max_memory_percent": max_memory_percent,
          "warmup_requests": warmup_requests,
          "request_timeout_s": request_timeout}
    if not endpoint:
        options.require_torch()
        kw["device"] = options.device_exists(device)
    elif device:
        raise UserError("--device is the in-process engine's; with --endpoint the server picks its own.")
    case = serve_case(model, endpoint, launch, kw)
    options.known_gpu(gpu)
    if endpoint:
        from gpuscope.measure.serve.loadgen import probe

        probe(endpoint)  # a dead endpoint is one sentence here, before anything is stored
    s = Session(db, "bench serve", resume, as_json)
    guarded(s, lambda: run_workloads(s, [case], gpu, timeout_s))


def register_serve(bench: typer.Typer) -> None:
    bench.command("serve")(serve)
