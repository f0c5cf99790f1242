"""Hardware side by side: what fits and with what, speed, energy, cost, TCO and a training-token budget.

One row per accelerator, for one model and workload. Each number is marked "estimated" (the analytic planner and
the power model of ``estimate/cost.py``), "measured" (given by a measured-results provider: a mapping
``{hardware key: {metric: value}}``, e.g. from the results store), or "mixed" (derived from both).

Measured metrics a provider may give (per hardware key, for the same workload):
  inference: ``ttft_s``, ``decode_tokens_per_s``, ``e2e_tokens_per_s``, ``power_w`` (average board power per GPU),
             ``peak_gib_per_gpu`` (peak allocated memory; shown beside the estimate, the fit stays estimated)
  training:  ``tokens_per_s_per_gpu``, ``mfu``, ``power_w``, ``peak_gib_per_gpu``

Pure Python: uses the estimate layer only (no torch, no store import).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from gpuscope.errors import UserError
from gpuscope.estimate import cost as C

INFER_DTYPES_AUTO = ("bf16", "int8", "int4")
CARD_COUNTS = (1, 2, 4, 8, 16)
INFER_MEASURABLE = ("ttft_s", "decode_tokens_per_s", "e2e_tokens_per_s", "power_w", "peak_gib_per_gpu")
TRAIN_MEASURABLE = ("tokens_per_s_per_gpu", "mfu", "power_w", "peak_gib_per_gpu")
MULTI_GPU_TRAIN_NOTE = ("does not fit on one card; multi-GPU training planning (TP/PP/ZeRO/FSDP) is not built yet, "
                        "so no numbers are given for several cards")


@dataclass
class InferWorkload:
    batch: int = 1
    prompt: int = 512
    gen: int = 128
    dtype: str = "auto"  # auto = bf16, else int8, else int4: the highest precision on the fewest cards
    kv_dtype: str | None = None
    engine: str = "graph"  # hardware comparison: CUDA-graph decode (eager HF decode is host-bound on every card)
    max_gpus: int = 8

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class TrainWorkload:
    micro_batch: int = 1
    seq: int = 2048
    precision: str = "amp-bf16"
    optimizer: str = "adamw"
    recompute: str = "none"
    grad_accum: int = 1
    offload: str = "none"
    tokens: float = 1e9  # token budget D for the 6ND cost
    num_gpus: int = 1  # cards the budget's wall time is spread over (data parallel)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Row:
    hardware: str
    name: str
    vendor: str
    fits: bool
    config: dict
    metrics: dict[str, float | None]
    sources: dict[str, str]
    verdict: str = ""
    notes: list[str] = field(default_factory=list)
    fit_matrix: dict[str, int | str | None] = field(default_factory=dict)
    tco: dict | None = None
    budget: dict | None = None
    prices: dict = field(default_factory=dict)
    cost_terms: dict = field(default_factory=dict)  # per-year pieces, for "what would change the decision"

    def to_dict(self) -> dict:
        return {"hardware": self.hardware, "name": self.name, "vendor": self.vendor, "fits": self.fits,
                "config": self.config, "metrics": self.metrics, "sources": self.sources, "verdict": self.verdict,
                "notes": self.notes, "fit_matrix": self.fit_matrix, "tco": self.tco, "budget": self.budget,
                "prices": self.prices}


@dataclass
class Comparison:
    kind: str
    model: str
    workload: dict
    economics: dict
    rows: list[Row]
    assumptions: list[str]


# --- helpers ---------------------------------------------------------------------------------------------------
def _fp16_for_bf16(hw):
    """A spec whose bf16 is its fp16 (cards without bf16, e.g. V100: weight-only int8/int4 dequantize to fp16 there
    at the same tensor-core rate; activations are 2 bytes either way)."""
    peaks = dict(hw.peak_tflops)
    peaks["bf16"] = peaks["fp16"]
    eff = dict(hw.matmul_efficiency_by_dtype)
    if "fp16" in eff:
        eff["bf16"] = eff["fp16"]
    measured = dict(hw.measured or {})
    mm = dict(measured.get("matmul_tflops", {}))
    if "fp16" in mm:
        mm["bf16"] = mm["fp16"]
        measured["matmul_tflops"] = mm
    return replace(hw, peak_tflops=peaks, matmul_efficiency_by_dtype=eff, measured=measured)


def _tp_ok(m, n: int) -> bool:
    return m.num_heads % n == 0 and (m.num_kv_heads % n == 0 or n % m.num_kv_heads == 0)


def _source(inputs: list[str], measured: set[str]) -> str:
    hits = [i in measured for i in inputs]
    return "measured" if all(hits) else ("mixed" if any(hits) else "estimated")


def check_measured(measured: Mapping | None, allowed: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Measured figures per hardware key, each a positive number of an allowed metric (one sentence otherwise)."""
    out: dict[str, dict[str, float]] = {}
    for key, vals in (measured or {}).items():
        for k, v in vals.items():
            if k not in allowed:
                raise UserError(f"measured metric '{k}' for {key} is not known here; allowed: {', '.join(allowed)}.")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise UserError(f"measured metric '{k}' for {key} must be a positive number, got {v!r}.")
        out[key] = {k: float(v) for k, v in vals.items()}
    return out


def _measured_peak(row: Row, measured: dict) -> None:
    """Measured peak allocated memory per card, beside the estimate (the fit decision stays the estimate's)."""
    if "peak_gib_per_gpu" in measured:
        row.metrics["peak_gib_per_gpu"] = measured["peak_gib_per_gpu"]
        row.sources["peak_gib_per_gpu"] = "measured"


def _economics_rows(row: Row, hw, n: int, tokens_per_s: float | None, tput_inputs: list[str], measured: dict,
                    price, econ: C.Economics) -> None:
    """Fill power, energy, perf/W, cost per 1M tokens and TCO of a row (n cards busy at tokens_per_s)."""
    msr = set(measured)
    busy = C.busy_power_w(hw.tdp_w, measured.get("power_w"))
    m = row.metrics
    m["power_w"] = None if busy is None else busy.watts_per_gpu * n
    row.sources["power_w"] = "measured" if "power_w" in msr else "estimated"
    row.prices = {"purchase_usd": price.purchase.to_dict() if price.purchase else None,
                  "cloud_usd_per_hour": price.cloud.to_dict() if price.cloud else None}
    m["price_usd"] = price.purchase.value * n if price.purchase else None
    if busy is None:
        row.notes.append("no TDP or measured power: energy and own-hardware cost are not computed")
    deriv = tput_inputs + ["power_w"]
    if busy is not None and tokens_per_s:
        m["tokens_per_j"] = tokens_per_s / m["power_w"]
        m["energy_usd_per_m_tokens"] = C.energy_cost_per_million_tokens(m["power_w"], tokens_per_s, econ)
        row.sources["tokens_per_j"] = row.sources["energy_usd_per_m_tokens"] = _source(deriv, msr)
    avg = None
    if busy is not None:
        idle = econ.idle_fraction * (hw.tdp_w or busy.watts_per_gpu)
        avg = idle + (busy.watts_per_gpu - idle) * econ.utilisation
        t = C.tco(price.purchase.value if price.purchase else None, n, avg, econ)
        row.tco = t.to_dict() | {"avg_power_w_per_gpu": avg}
        m["tco_usd"] = t.total_usd
        m["tco_energy_usd"] = t.energy_usd
        row.sources["tco_usd"] = row.sources["tco_energy_usd"] = "measured" if "power_w" in msr else "estimated"
    if tokens_per_s and price.purchase and avg is not None:
        m["usd_per_m_tokens_owned"] = C.cost_per_million_tokens_owned(price.purchase.value, n, avg, tokens_per_s,
                                                                      econ)
        row.sources["usd_per_m_tokens_owned"] = _source(deriv, msr)
        row.cost_terms = {"capex_per_year": price.purchase.value * n / econ.years,
                          "kwh_per_year": C.energy_kwh(avg * n, econ.hours_per_year, econ.pue),
                          "tokens_per_year": tokens_per_s * 3600 * econ.hours_per_year * econ.utilisation,
                          "n": n}
    elif tokens_per_s and avg is not None:
        row.cost_terms = {"capex_per_year": None, "kwh_per_year": C.energy_kwh(avg * n, econ.hours_per_year, econ.pue),
                          "tokens_per_year": tokens_per_s * 3600 * econ.hours_per_year * econ.utilisation, "n": n}
    if tokens_per_s and price.cloud:
        m["usd_per_m_tokens_cloud"] = C.cost_per_million_tokens_cloud(price.cloud.value, n, tokens_per_s)
        row.sources["usd_per_m_tokens_cloud"] = _source(tput_inputs, msr)


# --- inference -------------------------------------------------------------------------------------------------
def fit_infer(m, hw, w: InferWorkload):
    """For each candidate dtype, the fewest cards (tensor parallel) on which the workload fits.

    Returns (fit_matrix {dtype: cards | None | 'unsupported: ...'}, chosen (dtype, n, Estimate) or None, notes)."""
    from gpuscope.estimate.infer import estimate_infer

    dtypes = INFER_DTYPES_AUTO if w.dtype == "auto" else (w.dtype,)
    notes: list[str] = []
    matrix: dict[str, int | str | None] = {}
    found: dict[str, tuple[int, object]] = {}
    used: dict[str, str] = {}
    for d in dtypes:
        spec, dt = hw, d
        if not hw.supports("bf16") and hw.supports("fp16") and d in ("bf16", "int8", "int4"):
            spec = _fp16_for_bf16(hw)
            dt = "fp16" if d == "bf16" else d
            note = f"{hw.key} has no bf16: fp16 used instead (16-bit weights; int8/int4 dequantize to fp16)"
            if note not in notes:
                notes.append(note)
        matrix[d] = None
        for n in CARD_COUNTS:
            if n > w.max_gpus or not _tp_ok(m, n):
                continue
            try:
                est = estimate_infer(m, spec, batch=w.batch, prompt=w.prompt, gen=w.gen, dtype=dt,
                                     kv_dtype=w.kv_dtype, engine=w.engine, num_gpus=n, tp=n)
            except UserError as exc:
                if "not supported" in str(exc) or "needs" in str(exc) or "does not support" in str(exc):
                    matrix[d] = f"unsupported: {exc}"
                    break
                raise
            if est.fits:
                matrix[d] = n
                found[d] = (n, est)
                used[d] = dt
                break
    if not found:
        return matrix, None, notes
    best_n = min(n for n, _ in found.values())
    single = [d for d in dtypes if d in found and found[d][0] == 1]
    pick = single[0] if single else next(d for d in dtypes if d in found and found[d][0] == best_n)
    return matrix, (used[pick], found[pick][0], found[pick][1]), notes


def evaluate_infer(m, hw, w: InferWorkload, price, econ: C.Economics, measured: dict | None = None) -> Row:
    measured = dict(measured or {})
    matrix, chosen, notes = fit_infer(m, hw, w)
    row = Row(hw.key, hw.name, hw.vendor, chosen is not None, {}, {}, {}, notes=notes, fit_matrix=matrix)
    if chosen is None:
        tried = ", ".join(matrix)
        row.verdict = f"does not fit in {tried} on up to {w.max_gpus} card(s)"
        row.config = {"dtype": None, "num_gpus": None, "tp": None, "offload": "not modelled for inference"}
        _economics_rows(row, hw, 1, None, [], {k: v for k, v in measured.items() if k == "power_w"},
                        _price_or_empty(price), econ)
        return row
    dtype, n, est = chosen
    row.config = {"dtype": dtype, "num_gpus": n, "tp": n, "engine": w.engine, "offload": "none"}
    mt = row.metrics
    mt["required_gib_per_gpu"] = est.required_bytes / 2**30
    mt["device_gib"] = est.device_total_bytes / 2**30
    mt["ttft_s"] = measured.get("ttft_s", est.time["prefill_s"])
    mt["decode_tokens_per_s"] = measured.get("decode_tokens_per_s", est.throughput["decode_tokens_per_s"])
    mt["e2e_tokens_per_s"] = measured.get("e2e_tokens_per_s", est.throughput["e2e_tokens_per_s"])
    mt["tpot_s"] = w.batch / mt["decode_tokens_per_s"]
    for k in ("required_gib_per_gpu", "device_gib"):
        row.sources[k] = "estimated"
    _measured_peak(row, measured)
    for k in ("ttft_s", "decode_tokens_per_s", "e2e_tokens_per_s"):
        row.sources[k] = "measured" if k in measured else "estimated"
    row.sources["tpot_s"] = row.sources["decode_tokens_per_s"]
    cdt = "fp16" if (not hw.supports("bf16") and hw.supports("fp16")) else "bf16"
    if hw.tdp_w and hw.supports(cdt):
        mt["peak_tflops_per_w"] = hw.peak(cdt) / hw.tdp_w
        row.sources["peak_tflops_per_w"] = "datasheet"
    _economics_rows(row, hw, n, mt["e2e_tokens_per_s"], ["e2e_tokens_per_s"], measured, _price_or_empty(price),
                    econ)
    row.verdict = (f"fits in {dtype} on {n} card(s): {mt['required_gib_per_gpu']:.1f} of "
                   f"{mt['device_gib']:.1f} GiB per card")
    return row


# --- training --------------------------------------------------------------------------------------------------
def evaluate_train(m, hw, w: TrainWorkload, price, econ: C.Economics, measured: dict | None = None) -> Row:
    from gpuscope.estimate.train import estimate_train

    measured = dict(measured or {})
    precision, notes = w.precision, []
    if precision in ("amp-bf16", "bf16") and not hw.supports("bf16") and hw.supports("fp16"):
        precision = "amp-fp16"
        notes.append(f"{hw.key} has no bf16: {precision} used instead of {w.precision}")
    try:
        est = estimate_train(m, hw, micro_batch=w.micro_batch, seq=w.seq, precision=precision,
                             optimizer=w.optimizer, recompute=w.recompute, grad_accum=w.grad_accum,
                             offload=w.offload, num_gpus=1)
    except UserError as exc:
        if "does not support" not in str(exc):
            raise
        row = Row(hw.key, hw.name, hw.vendor, False, {"precision": precision, "num_gpus": None}, {}, {},
                  verdict=f"unsupported: {exc}", notes=notes)
        return row
    row = Row(hw.key, hw.name, hw.vendor, est.fits,
              {"precision": precision, "num_gpus": 1, "offload": w.offload, "recompute": w.recompute}, {}, {},
              notes=notes)
    mt = row.metrics
    mt["required_gib_per_gpu"] = est.required_bytes / 2**30
    mt["device_gib"] = est.device_total_bytes / 2**30
    row.sources["required_gib_per_gpu"] = row.sources["device_gib"] = "estimated"
    _measured_peak(row, measured)
    cdt = {"amp-bf16": "bf16", "bf16": "bf16", "amp-fp16": "fp16", "fp32": "fp32", "fp8": "fp8"}[precision]
    if hw.tdp_w:
        mt["peak_tflops_per_w"] = hw.peak(cdt) / hw.tdp_w
        row.sources["peak_tflops_per_w"] = "datasheet"
    if not est.fits:
        row.verdict = est.verdict
        row.notes.append(MULTI_GPU_TRAIN_NOTE)
        row.notes.extend(f"to fit on one card: {s}" for s in est.suggestions[:3])
        _economics_rows(row, hw, 1, None, [], {k: v for k, v in measured.items() if k == "power_w"},
                        _price_or_empty(price), econ)
        return row
    mt["tokens_per_s_per_gpu"] = measured.get("tokens_per_s_per_gpu", est.throughput["tokens_per_s_per_gpu"])
    mt["mfu"] = measured.get("mfu", est.mfu)
    for k in ("tokens_per_s_per_gpu", "mfu"):
        row.sources[k] = "measured" if k in measured else "estimated"
    _economics_rows(row, hw, 1, mt["tokens_per_s_per_gpu"], ["tokens_per_s_per_gpu"], measured,
                    _price_or_empty(price), econ)
    p = _price_or_empty(price)
    busy = C.busy_power_w(hw.tdp_w, measured.get("power_w"))
    b = C.train_budget(w.tokens, est.params["active"], hw.peak(cdt), mt["mfu"], w.num_gpus,
                       watts_per_gpu=busy.watts_per_gpu if busy else None,
                       cloud_usd_per_hour=p.cloud.value if p.cloud else None,
                       price_usd=p.purchase.value if p.purchase else None, econ=econ)
    row.budget = b.to_dict()
    row.budget["source"] = _source(["mfu"], set(measured))
    mt["budget_gpu_hours"] = b.gpu_hours
    mt["budget_wall_days"] = b.wall_days
    mt["budget_usd_cloud"] = b.cloud_usd
    mt["budget_usd_owned"] = b.owned_usd
    for k in ("budget_gpu_hours", "budget_wall_days", "budget_usd_cloud", "budget_usd_owned"):
        row.sources[k] = row.budget["source"]
    row.verdict = est.verdict
    return row


def _price_or_empty(price):
    from gpuscope.specs.prices import PriceEntry

    return price if price is not None else PriceEntry("")


# --- entry point -----------------------------------------------------------------------------------------------
def compare(model, gpus: list, workload, *, prices: dict | None = None, econ: C.Economics | None = None,
            measured: Mapping[str, Mapping[str, float]] | None = None) -> Comparison:
    """Evaluate `model` on each HardwareSpec in `gpus` for an InferWorkload or TrainWorkload."""
    from gpuscope.specs.prices import load_prices, price_for

    econ = econ or C.Economics()
    prices = load_prices() if prices is None else prices
    infer = isinstance(workload, InferWorkload)
    meas = check_measured(measured, INFER_MEASURABLE if infer else TRAIN_MEASURABLE)
    if not gpus:
        raise UserError("--gpu: give at least one GPU to compare.")
    check_workload(workload)
    rows = []
    for hw in gpus:
        fn = evaluate_infer if infer else evaluate_train
        rows.append(fn(model, hw, workload, price_for(hw, prices), econ, meas.get(hw.key)))
    assumptions = [
        f"power: measured where given, else TDP while busy; idle {econ.idle_fraction:g} x TDP; average = idle + "
        f"(busy - idle) x utilisation {econ.utilisation:g}",
        f"energy: x PUE {econ.pue:g} at {econ.usd_per_kwh:g} USD/kWh, {econ.hours_per_year:g} h/year",
        f"own hardware: price amortised over {econ.years:g} years; tokens counted only while busy "
        f"(utilisation {econ.utilisation:g})",
        "cloud: on-demand USD per GPU-hour, billed only while busy",
    ]
    if infer:
        assumptions.insert(0, "speed and cost use end-to-end generated tokens/s (prefill included); "
                              f"engine {workload.engine}; tensor parallel over the cards")
    else:
        assumptions.insert(0, "training on one card (multi-GPU plans are not built yet); the token budget uses "
                              "6 N D at the estimated MFU and perfect data-parallel scaling over --num-gpus")
    return Comparison("infer" if infer else "train", model.name, workload.to_dict(), econ.to_dict(), rows,
                      assumptions)


def check_workload(w) -> None:
    """One sentence for the first bad field of an inference or training workload."""
    if isinstance(w, InferWorkload):
        if not isinstance(w.max_gpus, int) or w.max_gpus < 1:
            raise UserError(f"--max-gpus must be a positive integer, got {w.max_gpus!r}.")
        allowed = ("auto", "bf16", "fp16", "fp32", "fp8", "int8", "int4")
        if w.dtype not in allowed:
            raise UserError(f"--dtype must be one of {', '.join(allowed)}, got '{w.dtype}'.")
    else:
        if not isinstance(w.num_gpus, int) or w.num_gpus < 1:
            raise UserError(f"--num-gpus must be a positive integer, got {w.num_gpus!r}.")
        if not w.tokens or w.tokens <= 0:
            raise UserError(f"--tokens must be positive, got {w.tokens!r}.")
