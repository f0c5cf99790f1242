"""Regenerate docs/article_case.md: the articles' own case (Arc A770 vs V100 16/32 GB vs modern cards for a 32B
model) and their rules of thumb, checked against the estimator.

    python scripts/article_case.py            # writes docs/article_case.md
    python scripts/article_case.py --stdout   # prints it instead

Every number comes from gpuscope (estimate/, explain/compare_hw.py, specs/data/prices.toml); nothing is typed in
except the rules of thumb themselves, quoted as the articles state them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuscope.estimate.cost import Economics
from gpuscope.estimate.infer import estimate_infer
from gpuscope.estimate.train import estimate_train
from gpuscope.explain.compare_hw import InferWorkload, TrainWorkload, compare
from gpuscope.report.compare_view import compare_markdown
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

OUT = Path(__file__).resolve().parents[1] / "docs" / "article_case.md"
GPUS = ["a770", "v100-16gb", "v100-pcie", "v100", "rtx-4090", "l40s", "h100", "h200"]
MODEL = "article-32b"
GB, GIB = 1e9, 2**30
# The common 7B/13B/70B table (GB): 2 bytes/param fp16, 1 int8, 0.5 int4; full fine-tuning with Adam in mixed
# precision 16 bytes/param (weights 2 + grads 2 + fp32 master 4 + Adam 8). The articles' exact figures are not
# in this repository; this is the table as commonly quoted with the same per-parameter rules.
TABLE_GB = {"7b": {"bf16": 14, "int8": 7, "int4": 3.5, "train": 112},
            "13b": {"bf16": 26, "int8": 13, "int4": 6.5, "train": 208},
            "70b": {"bf16": 140, "int8": 70, "int4": 35, "train": 1120}}
TABLE_TOLERANCE = 0.15


def _infer_required(model, gpu: str, dtype: str, num_gpus: int = 1) -> float:
    return estimate_infer(model, load_hardware(gpu), batch=1, prompt=512, gen=128, dtype=dtype, num_gpus=num_gpus,
                          tp=num_gpus).required_bytes


def _train_required(model, gpu: str = "h200") -> float:
    return estimate_train(model, load_hardware(gpu), micro_batch=1, seq=2048, precision="amp-bf16").required_bytes


def rule_fp32_120gb() -> dict:
    m = load_model(MODEL)
    from gpuscope.estimate.params import count_params

    p = count_params(m).total
    req = _infer_required(m, "h200", "fp32")
    weights = p * 4
    return {"rule": "32B in fp32 needs at least 120 GB", "holds": weights >= 120 * GB,
            "numbers": f"{p / 1e9:.2f}B parameters x 4 bytes = {weights / GB:.0f} GB ({weights / GIB:.0f} GiB) of "
                       f"weights alone; with KV cache, activations and CUDA context at batch 1, 512+128 tokens: "
                       f"{req / GB:.0f} GB",
            "values": {"weights_gb": weights / GB, "required_gb": req / GB}}


def rule_gb_per_billion() -> dict:
    m = load_model(MODEL)
    from gpuscope.estimate.params import count_params

    pb = count_params(m).total / 1e9
    inf = _infer_required(m, "h200", "bf16") / GB / pb
    trn = _train_required(m) / GB / pb
    holds_inf = 1.5 <= inf <= 2.2
    return {"rule": "1.5-2 GB per billion parameters in mixed precision",
            "holds": holds_inf and not (1.5 <= trn <= 2.2),
            "verdict": "holds for inference in 16-bit (weights are 2 GB per billion; runtime adds a few %), "
                       "does not hold for training",
            "numbers": f"32B inference in bf16 at batch 1: {inf:.2f} GB per billion parameters; training with "
                       f"AMP + AdamW (micro-batch 1, 2048 tokens): {trn:.1f} GB per billion (fp32 master weights, "
                       f"gradients and two Adam states are 16 bytes per parameter before activations)",
            "values": {"infer_gb_per_b": inf, "train_gb_per_b": trn}}


def rule_v100_perf_per_watt() -> dict:
    a, v16, v32 = load_hardware("a770"), load_hardware("v100-16gb"), load_hardware("v100")
    m = load_model(MODEL)
    w = InferWorkload(batch=1, prompt=512, gen=128, dtype="int4", max_gpus=8)
    c = compare(m, [a, v16, v32], w)
    tpj = {r.hardware: r.metrics.get("tokens_per_j") for r in c.rows}
    leads = {
        "peak 16-bit TFLOPS per W (V100 PCIe vs A770)": (v16.peak("fp16") / v16.tdp_w) / (a.peak("fp16") / a.tdp_w) - 1,
        "memory GB/s per W (V100 PCIe vs A770)": (v16.memory_bw_gbs / v16.tdp_w) / (a.memory_bw_gbs / a.tdp_w) - 1,
        "memory GB/s per W (V100 SXM2 vs A770)": (v32.memory_bw_gbs / v32.tdp_w) / (a.memory_bw_gbs / a.tdp_w) - 1,
        "estimated 32B int4 tokens per joule (V100 PCIe 16GB x2 vs A770 x2)": tpj[v16.key] / tpj[a.key] - 1,
        "estimated 32B int4 tokens per joule (V100 SXM2 32GB x1 vs A770 x2)": tpj[v32.key] / tpj[a.key] - 1,
    }
    near = {k: v for k, v in leads.items() if abs(v - 0.27) <= 0.05}
    parts = "; ".join(f"{k}: {v:+.0%}" for k, v in leads.items())
    return {"rule": "V100 perf/W leads the A770 by 27%", "holds": bool(near),
            "verdict": ("holds only for " + ", ".join(near)) if near else
                       "does not hold as stated for any of these metrics: the sign and size depend on the metric",
            "numbers": parts, "values": leads}


def rule_memory_table() -> list[dict]:
    out = []
    for size, preset in (("7b", "llama-2-7b"), ("13b", "llama-2-13b"), ("70b", "llama-2-70b")):
        m = load_model(preset)
        for dt in ("bf16", "int8", "int4"):
            est = _infer_required(m, "h200", dt) / GB
            out.append(_table_row(size, dt, TABLE_GB[size][dt], est, "inference, batch 1, 512+128 tokens"))
        est = _train_required(m) / GB
        out.append(_table_row(size, "train", TABLE_GB[size]["train"], est, "AMP + AdamW, micro-batch 1 x 2048"))
    return out


def _table_row(size, what, table, est, how) -> dict:
    diff = est / table - 1
    return {"model": size, "case": what, "table_gb": table, "estimate_gb": est, "diff": diff,
            "holds": abs(diff) <= TABLE_TOLERANCE, "how": how}


def build() -> str:
    m = load_model(MODEL)
    gpus = [load_hardware(g) for g in GPUS]
    econ = Economics()
    out = ["# The articles' case: which card for a 32B model", "",
           "<!-- generated by `python scripts/article_case.py`; do not edit by hand -->", "",
           f"Model: `{MODEL}` (QwQ-32B / Qwen2.5-32B architecture). Hardware: {', '.join(g.name for g in gpus)}. "
           f"Energy and cost defaults: {econ.usd_per_kwh} USD/kWh, PUE {econ.pue}, {econ.hours_per_year:g} h/year, "
           f"{econ.years:g}-year horizon, utilisation {econ.utilisation:g} (the articles' formula: hardware / 3 "
           "years + power x PUE x 3 years). All numbers are estimates (no measured results given); prices are "
           "those of `specs/data/prices.toml` with their sources listed under each table. A card without a price "
           "there (V100, L40S, H200) shows '-' for own-hardware cost: pass `--prices my.toml`.", "",
           "Regenerate: `python scripts/article_case.py`. The same tables from the CLI:", "",
           "```bash",
           f"gpuscope compare --model {MODEL} " + " ".join(f"--gpu {g}" for g in GPUS) +
           " infer --dtype int4 --markdown", "```", "",
           "## Inference: what fits, on how many cards, how fast, at what cost", "",
           "Batch 1, 512 prompt + 128 generated tokens, CUDA-graph decode (`--engine graph`), tensor parallel over "
           "the cards. 'fits' gives the fewest cards (1, 2, 4, 8) on which the dtype fits.", ""]
    for dt in ("bf16", "int8", "int4"):
        c = compare(m, gpus, InferWorkload(batch=1, prompt=512, gen=128, dtype=dt), econ=econ)
        out.append(compare_markdown(c, title=f"{dt}"))
    out += ["## Training (one card)", "",
            "AMP bf16 (fp16 on V100), AdamW, micro-batch 1 x 2048 tokens. A 32B model needs about 16 bytes per "
            "parameter before activations, so it fits on no single card here; gpuscope does not plan multi-GPU "
            "training yet and gives no numbers for several cards rather than inventing them.", ""]
    c = compare(m, gpus, TrainWorkload(), econ=econ)
    out += [f"- {r.hardware}: {r.verdict}" for r in c.rows]
    out += ["", "## The articles' rules of thumb, checked", ""]
    for r in (rule_fp32_120gb(), rule_gb_per_billion(), rule_v100_perf_per_watt()):
        verdict = r.get("verdict") or ("holds" if r["holds"] else "does not hold")
        out.append(f"- **\"{r['rule']}\"**: {verdict}. {r['numbers']}.")
    out += ["", "### The 7B/13B/70B memory table", "",
            "Table values: 2 bytes per parameter in fp16/bf16, 1 in int8, 0.5 in int4, 16 for full training with "
            "Adam in mixed precision (the table as commonly quoted; the articles' exact figures are not in this "
            f"repository). Estimator: Llama-2 7B/13B/70B presets. 'holds' = within {TABLE_TOLERANCE:.0%}.", "",
            "| model | case | table GB | estimator GB | difference | verdict | workload |", "|---|---|---|---|---|---|---|"]
    for r in rule_memory_table():
        out.append(f"| {r['model']} | {r['case']} | {r['table_gb']:g} | {r['estimate_gb']:.1f} | {r['diff']:+.0%} | "
                   f"{'holds' if r['holds'] else 'does not hold'} | {r['how']} |")
    out += ["", "Why they differ: int8/int4 keep embeddings, LM head and norms in 16 bit and carry scales (int4: "
            "~4.16 bits per weight with group size 128), and every run adds the CUDA context and allocator slack; "
            "training adds activations and the fp32 logits of the loss on top of the 16 bytes per parameter.", ""]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = build()
    if "--stdout" in argv:
        sys.stdout.write(text)
    else:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text)
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
