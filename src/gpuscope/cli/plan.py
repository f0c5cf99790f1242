"""`gpuscope plan infer|train`: estimates with no GPU (shared/CONTRACT.md)."""

from __future__ import annotations

import typer

JSON_HELP = "Print JSON (schema gpuscope.estimate/1)."
CALIBRATED_HELP = "Use the ceilings `gpuscope hardware calibrate --save` measured for this GPU."


def _hardware(gpu: str, calibrated: bool):
    from gpuscope.specs.calibration import load_calibrated
    from gpuscope.specs.hardware import load_hardware

    return load_calibrated(gpu) if calibrated else load_hardware(gpu)


def _console():
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=max(c.width, 140))


def register(app: typer.Typer) -> None:
    plan = typer.Typer(name="plan", help="Estimate memory, time and throughput without a GPU.", no_args_is_help=True)

    @plan.command("infer")
    def infer(
        model: str = typer.Option(..., "--model", help="Preset name, config.json, or a directory holding one."),
        gpu: str = typer.Option(..., "--gpu", help="Catalog name or alias, or a hardware TOML."),
        batch: int = typer.Option(1, "--batch"),
        prompt: int = typer.Option(512, "--prompt", help="Prompt tokens per sequence."),
        gen: int = typer.Option(128, "--gen", help="Generated tokens per sequence."),
        dtype: str = typer.Option("bf16", "--dtype", help="bf16|fp16|fp32|fp8|int8|int4 (weights)."),
        kv_dtype: str = typer.Option(None, "--kv-dtype", help="KV-cache dtype (default: the compute dtype)."),
        engine: str = typer.Option("eager", "--engine", help="eager (plain HF generate) | graph (CUDA graphs over "
                                   "compiled, fused kernels in a loop that never waits: gs-compile) | hf-graph (the "
                                   "same step under HF generate, which waits on the GPU every token) | "
                                   "hf-graph-defer (hf-graph reading its stop flag a token late: --defer-stop) | "
                                   "graph-unfused (HF's eager kernels replayed from a CUDA graph: gs-graph)."),
        num_gpus: int = typer.Option(1, "--num-gpus"),
        tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
        mla_cache: str = typer.Option("full", "--mla-cache", help="MLA models: full (per-head K/V, as transformers "
                                      "caches) or latent (vLLM/SGLang/FlashMLA: the compressed latent)."),
        fuse_proj: bool = typer.Option(False, "--fuse-proj", help="q|k|v and gate|up as one GEMM each (as "
                                       "gpt-fast and vLLM load Llama; bench infer --fuse-proj measures it)."),
        ops: bool = typer.Option(False, "--ops", help="Show the per-operation breakdown."),
        calibrated: bool = typer.Option(False, "--calibrated", help=CALIBRATED_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Inference: weights, KV cache and activations at the peak; TTFT, TPOT, tokens/s."""
        from gpuscope.estimate.infer import estimate_infer
        from gpuscope.report.estimate_view import render, to_json_text
        from gpuscope.specs.models import load_model

        est = estimate_infer(load_model(model), _hardware(gpu, calibrated), batch=batch, prompt=prompt, gen=gen,
                             dtype=dtype, kv_dtype=kv_dtype, engine=engine, num_gpus=num_gpus, tp=tp, with_ops=ops,
                             mla_cache=mla_cache, fuse_proj=fuse_proj)
        typer.echo(to_json_text(est)) if as_json else render(est, _console(), show_ops=ops)

    @plan.command("train")
    def train(
        model: str = typer.Option(..., "--model", help="Preset name, config.json, or a directory holding one."),
        gpu: str = typer.Option(..., "--gpu", help="Catalog name or alias, or a hardware TOML."),
        micro_batch: int = typer.Option(1, "--micro-batch"),
        seq: int = typer.Option(2048, "--seq"),
        precision: str = typer.Option("amp-bf16", "--precision", help="amp-bf16|amp-fp16|bf16|fp32|fp8"),
        optimizer: str = typer.Option("adamw", "--optimizer", help="adamw|adam|sgd|adamw-8bit"),
        recompute: str = typer.Option("none", "--recompute", help="none|selective|full"),
        grad_accum: int = typer.Option(1, "--grad-accum"),
        offload: str = typer.Option("none", "--offload", help="none|optimizer|params"),
        fused: bool = typer.Option(True, "--fused/--foreach", help="Fused optimizer step (default) or foreach."),
        num_gpus: int = typer.Option(1, "--num-gpus"),
        tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (multi-GPU)."),
        pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree (multi-GPU)."),
        dp: int = typer.Option(None, "--dp", help="Data-parallel degree (default: num-gpus / (tp x pp x cp))."),
        cp: int = typer.Option(1, "--cp", help="Context-parallel degree (long sequences; Megatron-style plans)."),
        ep: int = typer.Option(1, "--ep", help="Expert-parallel degree (MoE models): routed experts split over ep "
                               "ranks of the data-parallel group (Megatron-style plans)."),
        zero: int = typer.Option(0, "--zero", help="ZeRO stage 0-3 over the data-parallel group."),
        fsdp: bool = typer.Option(False, "--fsdp", help="FSDP full shard (= ZeRO-3)."),
        hsdp: bool = typer.Option(False, "--hsdp", help="FSDP hybrid shard: sharded inside each node, replicated "
                                  "across nodes (PyTorch data parallelism, --framework hf)."),
        bucket_view: bool = typer.Option(False, "--gradient-as-bucket-view", help="DDP: gradients are views into "
                                         "its buckets (no separate gradient memory, never freed)."),
        framework: str = typer.Option(None, "--framework", help="hf (PyTorch DDP / FSDP2 of a transformers model, "
                                      "the default for pure data parallelism) or megatron (TP/PP/ZeRO layouts)."),
        sp: bool = typer.Option(False, "--sp", help="Sequence parallelism with tensor parallelism."),
        virtual: int = typer.Option(1, "--virtual", help="Interleaved pipeline: model chunks per GPU."),
        global_batch: int = typer.Option(None, "--global-batch", help="Sequences per step (default: "
                                         "micro-batch x grad-accum x dp)."),
        gpus_per_node: int = typer.Option(None, "--gpus-per-node"),
        search: bool = typer.Option(False, "--search", help="Rank every layout of --num-gpus by tokens/s."),
        db: str = typer.Option(None, "--db", help="Results database whose `bench collectives` rows (this GPU) "
                               "replace the datasheet link bandwidths of multi-GPU plans."),
        ops: bool = typer.Option(False, "--ops", help="Show the per-operation breakdown (one GPU)."),
        calibrated: bool = typer.Option(False, "--calibrated", help=CALIBRATED_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Training: one GPU (HF eager: memory per phase, step time, MFU), or a multi-GPU layout (Megatron-style
        TP/PP/DP/ZeRO; --search ranks all layouts)."""
        from gpuscope.errors import UserError
        from gpuscope.estimate.train import estimate_train
        from gpuscope.report.estimate_view import render, to_json_text
        from gpuscope.specs.models import load_model

        m, hw = load_model(model), _hardware(gpu, calibrated)
        multi = num_gpus > 1 or search or tp > 1 or pp > 1 or (dp or 1) > 1
        if not multi:
            est = estimate_train(m, hw, micro_batch=micro_batch, seq=seq, precision=precision,
                                 optimizer=optimizer, recompute=recompute, grad_accum=grad_accum, offload=offload,
                                 fused=fused, num_gpus=num_gpus, with_ops=ops)
            typer.echo(to_json_text(est)) if as_json else render(est, _console(), show_ops=ops)
            return
        if db:
            from gpuscope.explain.measured_links import with_measured_links

            hw, _links = with_measured_links(hw, db)
        if framework not in (None, "hf", "megatron"):
            raise UserError(f"--framework must be hf or megatron, got '{framework}'.")
        pure_dp = (tp == 1 and pp == 1 and cp == 1 and ep == 1 and zero == 0 and not search
                   and (dp is None or dp == num_gpus))
        if framework == "hf" or (framework is None and pure_dp):
            if tp > 1 or pp > 1 or zero or ep > 1:
                raise UserError("--framework hf plans DDP or FSDP (--fsdp, --hsdp) over --num-gpus; TP/PP/EP/ZeRO "
                                "layouts need --framework megatron.")
            est = estimate_train(m, hw, micro_batch=micro_batch, seq=seq, precision=precision,
                                 optimizer=optimizer, recompute=recompute, grad_accum=grad_accum, offload=offload,
                                 fused=fused, num_gpus=num_gpus,
                                 strategy="hsdp" if hsdp else "fsdp" if fsdp else "ddp",
                                 gpus_per_node=gpus_per_node, bucket_view=bucket_view)
            typer.echo(to_json_text(est)) if as_json else render(est, _console())
            return
        if precision not in ("amp-bf16", "bf16"):
            raise UserError("--precision: multi-GPU plans model Megatron-style bf16 mixed precision; use amp-bf16.")
        if num_gpus <= 0:
            raise UserError(f"--num-gpus must be a positive integer, got {num_gpus}.")
        if cp <= 0:
            raise UserError(f"--cp must be a positive integer, got {cp}.")
        if dp is None:
            if num_gpus % (tp * pp * cp):
                raise UserError(f"--tp x --pp x --cp ({tp} x {pp} x {cp}) must divide --num-gpus ({num_gpus}).")
            dp = num_gpus // (tp * pp * cp)
        if tp * pp * dp * cp != num_gpus:
            raise UserError(f"--tp x --pp x --dp x --cp ({tp} x {pp} x {dp} x {cp}) must equal --num-gpus "
                            f"({num_gpus}).")
        gb = global_batch or micro_batch * grad_accum * dp
        if search:
            _search(m, hw, num_gpus, gb, seq, gpus_per_node, as_json)
            return
        from gpuscope.estimate.parallel import Layout, estimate_parallel, to_estimate

        if hsdp or bucket_view:
            raise UserError("--hsdp and --gradient-as-bucket-view plan PyTorch data parallelism (--framework hf), "
                            "not a Megatron-style layout.")

        lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=micro_batch, global_batch=gb,
                     zero=3 if fsdp else zero, sp=sp, virtual=virtual, recompute=recompute)
        pe = estimate_parallel(m, hw, lay, seq=seq, gpus_per_node=gpus_per_node)
        est = to_estimate(pe, m, hw, seq)
        typer.echo(to_json_text(est)) if as_json else render(est, _console())

    app.add_typer(plan)


def _search(m, hw, num_gpus: int, global_batch: int, seq: int, gpus_per_node, as_json: bool) -> None:
    import json
    import time

    from gpuscope.estimate.search import search_layouts

    t0 = time.perf_counter()
    res = search_layouts(m, hw, num_gpus, global_batch, seq=seq, gpus_per_node=gpus_per_node)
    elapsed = time.perf_counter() - t0
    rows = [{"tp": e.layout.tp, "pp": e.layout.pp, "dp": e.layout.dp, "ep": e.layout.ep, "zero": e.layout.zero,
             "sp": e.layout.sp, "virtual": e.layout.virtual, "micro_batch": e.layout.micro_batch,
             "recompute": e.layout.recompute,
             "tokens_per_s": e.tokens_per_s, "step_s": e.step_s, "mfu": e.mfu, "peak_bytes_per_gpu": e.peak_bytes}
            for e in res.ranked]
    doc = {"schema": "gpuscope.search/1", "model": m.name, "hardware": hw.key, "num_gpus": num_gpus,
           "global_batch": global_batch, "seq": seq, "considered": res.considered,
           "rejected_memory": res.rejected_memory, "seconds": elapsed, "ranked": rows}
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    from rich.table import Table

    t = Table(title=f"{m.name} on {num_gpus} x {hw.key}: {res.considered:,} layouts in {elapsed:.2f} s, "
                    f"{res.rejected_memory:,} over memory", header_style="bold")
    for c in ("#", "tp", "pp", "dp", "ep", "zero", "sp", "v", "mb", "recompute", "tok/s", "step", "MFU", "GiB/GPU"):
        t.add_column(c, justify="right")
    for i, r in enumerate(rows, 1):
        t.add_row(str(i), str(r["tp"]), str(r["pp"]), str(r["dp"]), str(r["ep"]), str(r["zero"]),
                  "y" if r["sp"] else "", str(r["virtual"]), str(r["micro_batch"]), r["recompute"],
                  f"{r['tokens_per_s']:,.0f}",
                  f"{r['step_s']:.2f} s", f"{r['mfu']:.1%}", f"{r['peak_bytes_per_gpu'] / 2**30:.1f}")
    _console().print(t)
    if not rows:
        _console().print("[red]No layout fits: more GPUs, a shorter --seq or a smaller --global-batch.[/]")


