"""`gpuscope plan infer|train`: estimates with no GPU (shared/CONTRACT.md).

The commands only read their options: the estimate is estimate.infer / explain.train_plan's, the output
report.estimate_view's (and report.search_view's for --search).
"""

from __future__ import annotations

import typer

from gpuscope.cli import options as o
from gpuscope.report.html.option import html_option, write_html

JSON_HELP = "Print JSON (schema gpuscope.estimate/1)."
WEIGHT_DTYPES = "bf16|fp16|fp32|fp8|int8|int4"  # estimate/dtypes.WEIGHT_DTYPES (not imported: start-up)
ADAMW_HELP = ("AdamW priced fused (default; torch.optim.AdamW(fused=True)) or foreach (AdamW(foreach=True), torch's "
              "default on CUDA when neither keyword is given: + one temporary the size of the parameters).")
FOR_LOOP_HELP = ("Price torch's for-loop AdamW instead: what AdamW(fused=False) or foreach=False runs (eight kernels "
                 "a tensor, + two temporaries of the largest tensor).")
ENGINE_HELP = ("eager (plain HF generate) | graph (CUDA graphs over compiled, fused kernels in a loop that never "
               "waits: gs-compile) | hf-graph (the same step under HF generate, which waits on the GPU every token) | "
               "hf-graph-defer (hf-graph reading its stop flag a token late: --defer-stop) | graph-unfused (HF's "
               "eager kernels replayed from a CUDA graph: gs-graph).")
MLA_HELP = ("MLA models: full (per-head K/V, as transformers caches) or latent (vLLM/SGLang/FlashMLA: the compressed "
            "latent).")
FUSE_HELP = "q|k|v and gate|up as one GEMM each (as gpt-fast and vLLM load Llama; bench infer --fuse-proj measures it)."
EP_HELP = ("Expert-parallel degree (MoE models): routed experts split over ep ranks of the data-parallel group "
           "(Megatron-style plans).")
HSDP_HELP = ("FSDP hybrid shard: sharded inside each node, replicated across nodes (PyTorch data parallelism, "
             "--framework hf).")
BUCKET_HELP = "DDP: gradients are views into its buckets (no separate gradient memory, never freed)."
FRAMEWORK_HELP = ("hf (PyTorch DDP / FSDP2 of a transformers model, the default for pure data parallelism) or "
                  "megatron (TP/PP/ZeRO layouts).")
LORA_R_HELP = ("LoRA fine-tuning (peft): the adapters' rank. The base is frozen (--precision amp-bf16: bf16 base, fp32 "
               "adapters, bf16 autocast, as get_peft_model + Trainer(bf16=True)).")
LORA_TARGETS_HELP = "all-linear (every decoder Linear, as peft) or module names, e.g. q_proj,k_proj,v_proj,o_proj."
QLORA_HELP = "QLoRA: the frozen base's Linear weights in 4-bit NF4 with double quantization (bitsandbytes)."
KBIT_PREP_HELP = ("QLoRA as the HF recipe runs it: peft's prepare_model_for_kbit_training first (embeddings, norms, "
                  "lm_head in fp32; the residual stream fp32). Needs --qlora and --recompute full.")
DB_HELP = ("Results database whose `bench collectives` rows (this GPU) replace the datasheet link bandwidths of "
           "multi-GPU plans.")

plan = typer.Typer(name="plan", help="Estimate memory, time and throughput without a GPU.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(plan)


def _show(est, as_json: bool, ops: bool = False, html: str | None = None) -> None:
    from gpuscope.report.estimate_view import render, to_json_text

    if html:  # the page draws time by operation; the printed result keeps ops only if --ops asked for them
        write_html(est.to_json(), html)
        est.ops = est.ops if ops else []
    typer.echo(to_json_text(est)) if as_json else render(est, o.console(), show_ops=ops)


@plan.command("infer")
def infer(
    model: str = o.model(),
    gpu: str = o.gpu(),
    batch: int = typer.Option(1, "--batch"),
    prompt: int = typer.Option(512, "--prompt", help="Prompt tokens per sequence."),
    gen: int = typer.Option(128, "--gen", help="Generated tokens per sequence."),
    dtype: str = typer.Option("bf16", "--dtype", help=f"{WEIGHT_DTYPES} (weights)."),
    kv_dtype: str = typer.Option(None, "--kv-dtype", help="KV-cache dtype (default: the compute dtype)."),
    engine: str = typer.Option("eager", "--engine", help=ENGINE_HELP),
    num_gpus: int = typer.Option(1, "--num-gpus"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
    mla_cache: str = typer.Option("full", "--mla-cache", help=MLA_HELP),
    fuse_proj: bool = typer.Option(False, "--fuse-proj", help=FUSE_HELP),
    ops: bool = typer.Option(False, "--ops", help="Show the per-operation breakdown."),
    calibrated: bool = o.calibrated(),
    as_json: bool = o.json_out(help=JSON_HELP),
    html: str = html_option(),
) -> None:
    """Inference: weights, KV cache and activations at the peak; TTFT, TPOT, tokens/s."""
    from gpuscope.estimate.infer import estimate_infer

    o.positive(batch=batch, prompt=prompt, gen=gen, num_gpus=num_gpus, tp=tp)
    est = estimate_infer(o.load_model_spec(model), o.hardware(gpu, calibrated), batch=batch, prompt=prompt, gen=gen,
                         dtype=dtype, kv_dtype=kv_dtype, engine=engine, num_gpus=num_gpus, tp=tp,
                         with_ops=ops or bool(html), mla_cache=mla_cache, fuse_proj=fuse_proj)
    _show(est, as_json, ops, html)


@plan.command("train")
def train(
    model: str = o.model(),
    gpu: str = o.gpu(),
    micro_batch: int = typer.Option(1, "--micro-batch"),
    seq: int = typer.Option(2048, "--seq"),
    precision: str = o.precision(),
    optimizer: str = o.optimizer(),
    recompute: str = o.recompute(),
    grad_accum: int = typer.Option(1, "--grad-accum"),
    offload: str = o.offload(),
    fused: bool = typer.Option(True, "--fused/--foreach", help=ADAMW_HELP),
    for_loop: bool = typer.Option(False, "--for-loop", help=FOR_LOOP_HELP),
    num_gpus: int = typer.Option(1, "--num-gpus"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (multi-GPU)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree (multi-GPU)."),
    dp: int = typer.Option(None, "--dp", help="Data-parallel degree (default: num-gpus / (tp x pp x cp))."),
    cp: int = typer.Option(1, "--cp", help="Context-parallel degree (long sequences; Megatron-style plans)."),
    ep: int = typer.Option(1, "--ep", help=EP_HELP),
    zero: int = typer.Option(0, "--zero", help="ZeRO stage 0-3 over the data-parallel group."),
    fsdp: bool = typer.Option(False, "--fsdp", help="FSDP full shard (= ZeRO-3)."),
    hsdp: bool = typer.Option(False, "--hsdp", help=HSDP_HELP),
    bucket_view: bool = typer.Option(False, "--gradient-as-bucket-view", help=BUCKET_HELP),
    framework: str = typer.Option(None, "--framework", help=FRAMEWORK_HELP),
    sp: bool = typer.Option(False, "--sp", help="Sequence parallelism with tensor parallelism."),
    virtual: int = typer.Option(1, "--virtual", help="Interleaved pipeline: model chunks per GPU."),
    global_batch: int = typer.Option(None, "--global-batch",
                                     help="Sequences per step (default: micro-batch x grad-accum x dp)."),
    gpus_per_node: int = typer.Option(None, "--gpus-per-node"),
    search: bool = typer.Option(False, "--search", help="Rank every layout of --num-gpus by tokens/s."),
    db: str = o.db(help=DB_HELP),
    ops: bool = typer.Option(False, "--ops", help="Show the per-operation breakdown (one GPU)."),
    lora_r: int = typer.Option(None, "--lora-r", help=LORA_R_HELP),
    lora_alpha: float = typer.Option(None, "--lora-alpha", help="LoRA scaling numerator (default: the rank)."),
    lora_targets: str = typer.Option(None, "--lora-targets", help=LORA_TARGETS_HELP),
    lora_dropout: float = typer.Option(0.0, "--lora-dropout", help="Dropout on the adapters' input, in [0, 1)."),
    qlora: bool = typer.Option(False, "--qlora", help=QLORA_HELP),
    kbit_prep: bool = typer.Option(False, "--kbit-prep", help=KBIT_PREP_HELP),
    calibrated: bool = o.calibrated(),
    as_json: bool = o.json_out(help=JSON_HELP),
    html: str = html_option(),
) -> None:
    """Training: one GPU (HF eager: memory per phase, step time, MFU), LoRA/QLoRA fine-tuning (--lora-r), or a
    multi-GPU layout (Megatron-style TP/PP/DP/ZeRO; --search ranks all layouts)."""
    from gpuscope.explain.train_plan import LayoutSearch, TrainRequest, plan_train

    o.positive(micro_batch=micro_batch, seq=seq, grad_accum=grad_accum, num_gpus=num_gpus, tp=tp, pp=pp, cp=cp, ep=ep,
               virtual=virtual, **{k: v for k, v in dict(dp=dp, global_batch=global_batch, gpus_per_node=gpus_per_node,
                                                        lora_r=lora_r, lora_alpha=lora_alpha).items() if v is not None})
    r = TrainRequest(micro_batch, seq, precision, optimizer, recompute, grad_accum, offload, fused, num_gpus, tp, pp,
                     dp, cp, ep, zero, fsdp, hsdp, bucket_view, framework, sp, virtual, global_batch, gpus_per_node,
                     search, db, with_ops=ops or bool(html), lora_r=lora_r, lora_alpha=lora_alpha,
                     lora_targets=lora_targets, lora_dropout=lora_dropout, qlora=qlora,
                     kbit_prep=kbit_prep, adamw_impl="for-loop" if for_loop else None)
    out = plan_train(o.load_model_spec(model), o.hardware(gpu, calibrated), r)
    if not isinstance(out, LayoutSearch):
        return _show(out, as_json, ops and not r.multi, html)
    _show_search(out, as_json, html)


def _show_search(out, as_json: bool, html: str | None) -> None:
    """A --search result: the ranked layouts as JSON or a table (and the HTML page when asked)."""
    from gpuscope.report.search_view import render_search, search_json_text, search_to_json

    write_html(search_to_json(out), html)
    typer.echo(search_json_text(out)) if as_json else render_search(out, o.console())
__import__("gpuscope.cli.plan_serve", fromlist=["register"]).register(plan)  # `plan serve` (cli/plan_serve.py)
__import__("gpuscope.cli.plan_diffusion", fromlist=["register"]).register(plan)  # `plan diffusion` (cli/plan_diffusion.py)
