#!/usr/bin/env python3
"""Print the accuracy tables of docs/validation.md with the current planner (no GPU: stored records and papers).

    python research/scripts/validation_tables.py            # every table, Markdown
    python research/scripts/validation_tables.py measured   # the H200 runs only
    python research/scripts/validation_tables.py published  # the published multi-GPU results only

Measured rows come from research/results/manifest.toml (the same sets research/tests/test_results.py checks);
published ones from the papers' tables as tests/test_validation_parallel.py states them.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "research" / "tests"))
try:
    import gpuscope  # noqa: F401
except ImportError:  # run from a checkout without an install
    sys.path.insert(0, str(ROOT / "src"))

ONE_AND_TWO_GPUS = ("2026-11-29-h200", "2026-11-29-h200-b", "2026-11-29-h200-c", "2026-11-29-h200-d",
                    "2026-11-29-h200-x2")
TARGETS = {"peak_bytes": 0.05, "prefill_s": 0.15, "decode_s_per_token": 0.20, "step_s": 0.15}
LABEL = {"peak_bytes": "peak memory vs torch.cuda.max_memory_allocated", "prefill_s": "prefill (TTFT)",
         "decode_s_per_token": "decode per token (TPOT)", "step_s": "training step"}


def _sets():
    from validation_rows import result_sets

    return {s.name: s for s in result_sets()}


def _summary(rows, metric, target) -> str:
    errs = [r.error for r in rows if r.metric == metric]
    if not errs:
        return ""
    worst = max(rows, key=lambda r: abs(r.error) if r.metric == metric else -1)
    within = sum(abs(e) <= target for e in errs)
    median = statistics.median(abs(e) for e in errs)
    return (f"| {LABEL[metric]} | {target:.0%} | {len(errs)} | {within} | {median:.1%} "
            f"| {worst.error:+.1%} ({worst.case}) |")


def measured() -> None:
    sets = _sets()
    rows = []
    for name in ONE_AND_TWO_GPUS:
        s = sets[name]
        if "train" not in s.kinds and "train-dist" not in s.kinds:
            s = replace(s, kinds=(*s.kinds, "train"))  # the row check reads a folder's inference only
        rows += [r for _, r in s.rows()]
    print("### One and two H200s, catalog hardware (" + ", ".join(ONE_AND_TWO_GPUS) + ")\n")
    print("| metric | target | rows | within | median abs. error | worst |\n|---|---|---|---|---|---|")
    for metric, target in TARGETS.items():
        print(_summary(rows, metric, target))
    misses = [r for r in rows if r.metric == "step_s" and abs(r.error) > 0.15]
    if misses:
        print("\nTraining steps outside 15%: " + "; ".join(f"{r.case} {r.error:+.1%}" for r in misses))
    every = [r for s in sets.values() for _, r in s.rows() if r.metric.endswith("bytes")]
    peaks = [r for r in every if r.metric == "peak_bytes"]
    print(f"\nEvery memory row of the manifest ({len(sets)} sets): peak {sum(abs(r.error) <= 0.05 for r in peaks)} of "
          f"{len(peaks)} within 5% (median {statistics.median(abs(r.error) for r in peaks):.1%}); with the phase peaks "
          f"{sum(abs(r.error) <= 0.05 for r in every)} of {len(every)}")
    j = [r for _, r in sets["2026-11-30-h200-j"].rows()]
    print("\n### `bench all --quick`, seven runs, each on its own calibration (2026-11-30-h200-j)\n")
    print("| metric | target | rows | within | median abs. error | worst |\n|---|---|---|---|---|---|")
    for metric in TARGETS:
        print(_summary(j, metric, 0.05 if metric == "peak_bytes" else 0.15))


def published() -> None:
    from test_validation_parallel import A100, H100, TABLE1, TABLE5, _table1_layout

    from gpuscope.estimate.parallel import Layout, estimate_parallel, parallel_memory
    from gpuscope.specs.models import load_model

    def row(what, published, ours, fmt="{:.0f}"):
        print(f"| {what} | {fmt.format(published)} | {fmt.format(ours)} | {ours / published - 1:+.1%} |")

    print("### Megatron-LM (Narayanan et al. 2021) Table 1: TFLOP/s per GPU, A100-80GB, full recompute\n")
    print("| model (TP x PP, GPUs) | paper | gpuscope | error |\n|---|---|---|---|")
    for name, tp, pp, gpus, batch, pub in TABLE1:
        est = estimate_parallel(load_model(name), A100, _table1_layout(tp, pp, gpus, batch), attention="materialized")
        row(f"{name} ({tp} x {pp}, {gpus})", pub, est.tflops_per_gpu)
    print("\n### Megatron-LM Table 2, PTD-P column: GPT-3 175B, TP 8 x PP 12, batch 1536\n")
    print("| GPUs | paper | gpuscope | error |\n|---|---|---|---|")
    for gpus, pub in ((384, 153), (768, 149), (1536, 141)):
        lay = Layout(tp=8, pp=12, dp=gpus // 96, micro_batch=1, global_batch=1536, recompute="full")
        row(str(gpus), pub, estimate_parallel(load_model("gpt3-175b"), A100, lay, attention="materialized")
            .tflops_per_gpu)
    print("\n### Korthikanti et al. 2022 Table 5: iteration seconds, TP 8, seq 2048, A100-80GB\n")
    print("| model, recompute | paper | gpuscope | error |\n|---|---|---|---|")
    for name, pp, gpus, batch, mb, full_s, sel_s in TABLE5:
        for rc, sp, pub in (("full", False, full_s), ("selective", True, sel_s)):
            lay = Layout(tp=8, pp=pp, dp=gpus // (8 * pp), micro_batch=mb, global_batch=batch, recompute=rc, sp=sp)
            est = estimate_parallel(load_model(name), A100, lay, attention="materialized")
            row(f"{name}, {rc}{' + SP' if sp else ''}", pub, est.step_s, "{:.2f}")
    print("\n### Llama 3 (Dubey et al. 2024) Table 4: 405B BF16 MFU on H100-80GB\n")
    print("| GPUs (layout) | paper | gpuscope | error |\n|---|---|---|---|")
    m405 = load_model("llama-3.1-405b")
    for gpus, dp, bpd, mfu in ((8192, 64, 32, 0.43), (16384, 128, 16, 0.41)):
        lay = Layout(tp=8, pp=16, dp=dp, micro_batch=1, global_batch=dp * bpd, zero=1, sp=True, virtual=2,
                     recompute="none")
        row(f"{gpus} (TP 8, PP 16, DP {dp}, seq 8192)", mfu, estimate_parallel(m405, H100, lay, seq=8192,
                                                                              inter_gbs=50.0).mfu, "{:.2f}")
    lay = Layout(tp=8, pp=16, dp=8, cp=16, micro_batch=1, global_batch=128, zero=1, sp=True, virtual=2,
                 recompute="none")
    row("16384 (TP 8, CP 16, PP 16, DP 8, seq 131072): known miss", 0.38,
        estimate_parallel(m405, H100, lay, seq=131072, inter_gbs=50.0).mfu, "{:.2f}")
    print("\n### ZeRO (Rajbhandari et al. 2020) section 3.1: 7.5B model states per GPU, 64-way data parallel (GB)\n")
    print("| stage | paper | gpuscope | error |\n|---|---|---|---|")
    m = load_model("megatron-7.5b")
    for stage, pub in ((0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)):
        mem = parallel_memory(m, Layout(dp=64, zero=stage, global_batch=64), states="zero")
        row(f"ZeRO-{stage}", pub, (mem["parameters"] + mem["gradients"] + mem["optimizer_states"]) / 1e9, "{:.1f}")


def main(argv=None) -> int:
    which = (argv if argv is not None else sys.argv[1:]) or ["measured", "published"]
    sys.path.insert(0, str(ROOT / "tests"))
    for w in which:
        {"measured": measured, "published": published}[w]()
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
