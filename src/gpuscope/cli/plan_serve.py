"""`gpuscope plan serve`: capacity, throughput and latency percentiles under continuous batching
(shared/CONTRACT.md; the estimate is estimate.serve.plan_serve, the table report.serve_view)."""

from __future__ import annotations

import typer

from gpuscope.cli import options as o
from gpuscope.report.html.option import html_option, write_html

DTYPES = "bf16|fp16|fp8|int8|int4-awq|int4-gptq|nf4|q8_0|q4_0|q4_k_m|q5_k_m|q3_k_m|q6_k"
ENGINE_HELP = ("transformers (transformers 5.x continuous batching, generate_batch; the engine `bench serve --model` "
               "runs) | vllm (V1 defaults) | trtllm (TensorRT-LLM PyTorch backend).")
ATTN_HELP = "transformers: sdpa (paged|sdpa, its default without a flash-attention package) or flash."


def register(plan: typer.Typer) -> None:
    plan.command("serve")(serve)


def serve(
    model: str = o.model(),
    gpu: str = o.gpu(),
    requests: int = typer.Option(..., "--requests", help="Requests in the run."),
    prompt: int = typer.Option(..., "--prompt", help="Prompt tokens per request (the mean if distributed)."),
    gen: int = typer.Option(..., "--gen", help="Output tokens per request (the mean if distributed)."),
    rate: float = typer.Option(None, "--rate", help="Poisson arrivals, requests/s (default: offline)."),
    concurrency: int = typer.Option(None, "--concurrency", help="A closed loop of this many clients."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (GPUs of --gpu)."),
    dtype: str = typer.Option("bf16", "--dtype", help=f"Weights as the engine stores them: {DTYPES}."),
    kv_dtype: str = typer.Option(None, "--kv-dtype", help="KV cache dtype: bf16|fp16|fp8|int8 (default 16 bit)."),
    engine: str = typer.Option("transformers", "--engine", help=ENGINE_HELP),
    attn: str = typer.Option("sdpa", "--attn", help=ATTN_HELP),
    sampling: bool = typer.Option(False, "--sampling", help="transformers: logits processors on (80% of memory)."),
    slo_ttft: float = typer.Option(None, "--slo-ttft", help="TTFT SLO in seconds (goodput)."),
    slo_tpot: float = typer.Option(None, "--slo-tpot", help="TPOT SLO in seconds (goodput)."),
    prompt_dist: str = typer.Option("fixed", "--prompt-dist", help="fixed|uniform|normal."),
    prompt_spread: float = typer.Option(0.0, "--prompt-spread", help="uniform: +-fraction; normal: std/mean."),
    gen_dist: str = typer.Option("fixed", "--gen-dist", help="fixed|uniform|normal."),
    gen_spread: float = typer.Option(0.0, "--gen-spread", help="uniform: +-fraction; normal: std/mean."),
    prefix_hit: float = typer.Option(0.0, "--prefix-hit", help="Fraction of each prompt in the prefix cache."),
    seed: int = typer.Option(0, "--seed", help="Seed of the arrivals and lengths."),
    max_num_seqs: int = typer.Option(None, "--max-num-seqs", help="Override the engine's sequence limit."),
    max_batched_tokens: int = typer.Option(None, "--max-batched-tokens", help="Override the token budget."),
    block_size: int = typer.Option(None, "--block-size", help="Override the KV block size (tokens)."),
    mem_fraction: float = typer.Option(None, "--mem-fraction", help="Override the engine's memory fraction."),
    curve: bool = typer.Option(False, "--curve", help="Also a throughput-latency curve over Poisson rates."),
    calibrated: bool = o.calibrated(),
    as_json: bool = o.json_out(help="Print JSON (schema gpuscope.estimate/1, kind serve)."),
    html: str = html_option(),
) -> None:
    """Serving: KV-cache capacity, throughput, TTFT/TPOT/ITL/E2E percentiles, goodput and cost under
    continuous batching (offline, Poisson --rate, or --concurrency clients)."""
    kw = dict(locals())
    r = _request(kw)
    from gpuscope.estimate.serve import plan_serve

    est = plan_serve(r, o.hardware(kw["gpu"], kw["calibrated"]))
    if kw["as_json"]:
        import json

        typer.echo(json.dumps(est.to_json(), indent=2))
    else:
        from gpuscope.report.serve_view import render

        render(est, o.console())
    write_html(est.to_json(), kw["html"])


def _request(kw: dict):
    """The ServeRequest of the command's options, each checked first (one sentence, exit 2)."""
    from gpuscope.errors import UserError
    from gpuscope.estimate.serve import ServeRequest

    counts = ("requests", "prompt", "gen", "tp", "concurrency", "max_num_seqs", "max_batched_tokens", "block_size")
    o.positive(**{k: kw[k] for k in counts if kw[k] is not None})
    o.positive(**{k: float(kw[k]) for k in ("rate", "slo_ttft", "slo_tpot", "mem_fraction") if kw[k] is not None})
    o.non_negative(prefix_hit=kw["prefix_hit"], prompt_spread=kw["prompt_spread"], gen_spread=kw["gen_spread"])
    if kw["mem_fraction"] is not None and kw["mem_fraction"] > 1:
        raise UserError(f"--mem-fraction must be at most 1, got {kw['mem_fraction']}.")
    if kw["rate"] is not None and kw["concurrency"] is not None:
        raise UserError("--rate and --concurrency are exclusive: give one (or neither, for offline).")
    fields = {k: v for k, v in kw.items() if k not in ("model", "gpu", "calibrated", "as_json", "html")}
    return ServeRequest(o.load_model_spec(kw["model"]), **fields)
