"""Which hardware for this workload: rank the catalog under the user's constraints, with a decision path.

Every candidate walks the same checks, in this order, and each check is recorded (pass or fail, with numbers):
  1. software stack  vendor -> CUDA (NVIDIA), ROCm (AMD), oneAPI (Intel Arc/Data Center GPUs), SynapseAI (Intel
                     Gaudi), XLA (Google TPU)
  2. memory per card --min-memory-gb
  3. fits            the workload fits (inference: in the dtype(s) asked, on up to --max-gpus cards with tensor
                     parallelism; training: on one card)
  4. budget          purchase price of the cards needed <= --budget (a cloud rate only: its cloud-rate
                     equivalent, said; neither known: ruled out, say so)
  5. power           busy power of the cards needed <= --max-power-w (unknown TDP: ruled out)
  6. latency SLO     TTFT <= --max-ttft-ms and TPOT <= --max-tpot-ms (inference)
  7. throughput      tokens/s >= --min-tokens-per-s (inference: decode tokens/s of the batch; training: per card)
Candidates passing all are ranked by the objective: cost (USD per 1M tokens, own hardware or cloud), speed
(tokens/s) or efficiency (tokens per joule). "What would change the decision" reports the thresholds at which the
order flips: a single relaxed constraint that lets a better candidate in, the runner-up's price that would tie,
and the electricity price at which the top two swap (cost per token is linear in USD/kWh).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.errors import UserError
from gpuscope.estimate import cost as C
from gpuscope.explain.compare_hw import InferWorkload, Row, TrainWorkload, evaluate_infer, evaluate_train
from gpuscope.specs.prices import Price, is_cloud_equivalent, is_proxy

STACKS = ("cuda", "rocm", "oneapi", "synapseai", "xla")
OBJECTIVES = ("cost", "speed", "efficiency")
PRICING = ("own", "cloud")


def stack_of(vendor: str) -> str:
    v = vendor.lower()
    if "habana" in v:
        return "synapseai"
    return {"nvidia": "cuda", "amd": "rocm", "intel": "oneapi", "google": "xla"}.get(v.split()[0], "unknown")


@dataclass
class Constraints:
    budget_usd: float | None = None
    max_power_w: float | None = None
    max_ttft_s: float | None = None
    max_tpot_s: float | None = None
    min_tokens_per_s: float | None = None
    stacks: tuple[str, ...] = ()
    min_memory_gb: float | None = None
    objective: str = "cost"
    pricing: str = "own"

    def __post_init__(self):
        for name, v in (("--budget", self.budget_usd), ("--max-power-w", self.max_power_w),
                        ("--max-ttft-ms", self.max_ttft_s), ("--max-tpot-ms", self.max_tpot_s),
                        ("--min-tokens-per-s", self.min_tokens_per_s), ("--min-memory-gb", self.min_memory_gb)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
                raise UserError(f"{name} must be a positive number, got {v!r}.")
        bad = [s for s in self.stacks if s not in STACKS]
        if bad:
            raise UserError(f"--stack must be one of {', '.join(STACKS)}, got '{bad[0]}'.")
        if self.objective not in OBJECTIVES:
            raise UserError(f"--objective must be one of {', '.join(OBJECTIVES)}, got '{self.objective}'.")
        if self.pricing not in PRICING:
            raise UserError(f"--pricing must be one of {', '.join(PRICING)}, got '{self.pricing}'.")

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["stacks"] = list(self.stacks)
        return d


@dataclass
class Step:
    check: str
    ok: bool
    detail: str

    def to_dict(self) -> dict:
        return {"check": self.check, "ok": self.ok, "detail": self.detail}


@dataclass
class Candidate:
    row: Row
    stack: str
    path: list[Step]
    score: float | None = None
    rank: int | None = None

    @property
    def failed(self) -> list[Step]:
        return [s for s in self.path if not s.ok]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict:
        return {"hardware": self.row.hardware, "name": self.row.name, "stack": self.stack, "rank": self.rank,
                "score": self.score, "ruled_out_by": [s.check for s in self.failed],
                "decision_path": [s.to_dict() for s in self.path], "row": self.row.to_dict()}


@dataclass
class Advice:
    kind: str
    model: str
    workload: dict
    constraints: dict
    economics: dict
    objective_metric: str
    ranked: list[Candidate]
    ruled_out: list[Candidate]
    recommendation: str
    changes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)


def objective_metric(kind: str, c: Constraints) -> tuple[str, bool]:
    """(metric key, higher is better)."""
    if c.objective == "cost":
        return ("usd_per_m_tokens_owned" if c.pricing == "own" else "usd_per_m_tokens_cloud", False)
    if c.objective == "speed":
        return ("decode_tokens_per_s" if kind == "infer" else "tokens_per_s_per_gpu", True)
    return ("tokens_per_j", True)


def _fmt_usd(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _basis(row: Row) -> str:
    """What the row's purchase figure is, where it is not the card's own price: asked of the Price
    (specs/prices.is_cloud_equivalent, is_proxy)."""
    price = Price.from_dict((row.prices or {}).get("purchase_usd"))
    if is_cloud_equivalent(price):
        return " (a cloud-rate equivalent: its on-demand rate x the rent-to-buy ratio of the cards priced both ways)"
    return " (a proxy: a sibling card's price, none of its own known)" if is_proxy(price) else ""


def _walk(row: Row, hw, stack: str, kind: str, c: Constraints, metric: str) -> list[Step]:
    m, path = row.metrics, []
    n = row.config.get("num_gpus") or 1
    if c.stacks:
        path.append(Step("stack", stack in c.stacks, f"{stack} ({'in' if stack in c.stacks else 'not in'} "
                                                     f"{'/'.join(c.stacks)})"))
    if c.min_memory_gb is not None:
        have = hw.memory_bytes / 2**30  # the vendor's "GB" (binary in practice; see specs/hardware.py)
        path.append(Step("memory per card", have >= c.min_memory_gb, f"{have:.0f} GB vs >= {c.min_memory_gb:g} GB"))
    path.append(Step("fits", row.fits, row.verdict))
    if not row.fits:
        return path
    if c.budget_usd is not None:
        price = m.get("price_usd")
        if price is None:
            path.append(Step("budget", False, "no purchase price or cloud rate known (add one with --prices)"))
        else:  # a card with a cloud rate only is priced at its cloud-rate equivalent (specs/prices.price_for)
            path.append(Step("budget", price <= c.budget_usd,
                             f"{n} card(s) cost {_fmt_usd(price)}{_basis(row)} vs budget {_fmt_usd(c.budget_usd)}"))
    if c.max_power_w is not None:
        pw = m.get("power_w")
        if pw is None:
            path.append(Step("power", False, "no TDP or measured power known"))
        else:
            path.append(Step("power", pw <= c.max_power_w, f"{pw:,.0f} W busy vs limit {c.max_power_w:,.0f} W"))
    if kind == "infer" and c.max_ttft_s is not None:
        path.append(Step("latency SLO (TTFT)", m["ttft_s"] <= c.max_ttft_s,
                         f"TTFT {m['ttft_s'] * 1e3:,.0f} ms vs <= {c.max_ttft_s * 1e3:,.0f} ms"))
    if kind == "infer" and c.max_tpot_s is not None:
        path.append(Step("latency SLO (TPOT)", m["tpot_s"] <= c.max_tpot_s,
                         f"TPOT {m['tpot_s'] * 1e3:,.1f} ms vs <= {c.max_tpot_s * 1e3:,.1f} ms"))
    if c.min_tokens_per_s is not None:
        key = "decode_tokens_per_s" if kind == "infer" else "tokens_per_s_per_gpu"
        path.append(Step("throughput", m[key] >= c.min_tokens_per_s,
                         f"{m[key]:,.1f} tok/s vs >= {c.min_tokens_per_s:,.1f} tok/s"))
    v = m.get(metric)
    if v is None:
        why = "no price for this pricing" if metric.startswith("usd") else "no power figure"
        path.append(Step("objective", True, f"{metric} unknown ({why}): ranked after those with a value"))
    return path


def advise(model, gpus: list, workload, constraints: Constraints, *, prices: dict | None = None,
           econ: C.Economics | None = None, measured: dict | None = None) -> Advice:
    """Rank `gpus` (HardwareSpecs; the whole catalog if empty) for `workload` under `constraints`."""
    from gpuscope.specs.hardware import list_hardware
    from gpuscope.specs.prices import load_prices, price_for

    econ = econ or C.Economics()
    prices = load_prices() if prices is None else prices
    gpus = gpus or list_hardware()
    kind = "infer" if isinstance(workload, InferWorkload) else "train"
    if kind == "train" and not isinstance(workload, TrainWorkload):
        raise TypeError("workload must be an InferWorkload or a TrainWorkload")
    from gpuscope.explain.compare_hw import INFER_MEASURABLE, TRAIN_MEASURABLE, check_measured, check_workload

    check_workload(workload)
    meas = check_measured(measured, INFER_MEASURABLE if kind == "infer" else TRAIN_MEASURABLE)
    metric, higher = objective_metric(kind, constraints)
    cands: list[Candidate] = []
    for hw in gpus:
        fn = evaluate_infer if kind == "infer" else evaluate_train
        row = fn(model, hw, workload, price_for(hw, prices), econ, meas.get(hw.key))
        stack = stack_of(hw.vendor)
        cands.append(Candidate(row, stack, _walk(row, hw, stack, kind, constraints, metric)))
    for cd in cands:
        cd.score = cd.row.metrics.get(metric)
    ok = [cd for cd in cands if cd.ok]
    out = [cd for cd in cands if not cd.ok]
    ok.sort(key=lambda cd: _key(cd.score, higher))
    for i, cd in enumerate(ok, 1):
        cd.rank = i
    if not ok:
        raise UserError(_impossible(cands, constraints))
    advice = Advice(kind, model.name, workload.to_dict(), constraints.to_dict(), econ.to_dict(), metric, ok, out,
                    _recommendation(ok, metric, constraints))
    advice.changes = what_would_change(ok, out, metric, higher, econ, constraints)
    advice.assumptions = [
        f"objective: {constraints.objective} ({metric}, {'higher' if higher else 'lower'} is better)",
        "inference speed and cost use end-to-end generated tokens/s; fits = smallest tensor-parallel group",
        "training: one card only (multi-GPU planning is not built yet)" if kind == "train" else
        f"engine {workload.engine}; up to {workload.max_gpus} cards",
        "budget and power apply to all the cards a candidate needs",
    ]
    return advice


def _key(score, higher):
    if score is None:
        return (1, 0.0)
    return (0, -score if higher else score)


def _better(a, b, higher) -> bool:
    return a is not None and (b is None or (a > b if higher else a < b))


def _fmt_metric(metric: str, v: float | None) -> str:
    if v is None:
        return "unknown"
    if metric.startswith("usd"):
        return f"{_fmt_usd(v)} per 1M tokens"
    if metric == "tokens_per_j":
        return f"{v:.3g} tokens/J"
    return f"{v:,.1f} tok/s"


def _recommendation(ok: list[Candidate], metric: str, c: Constraints) -> str:
    best = ok[0]
    cfg = best.row.config
    how = (f"{cfg.get('dtype') or cfg.get('precision')} on {cfg.get('num_gpus')} card(s)")
    text = f"{best.row.name}: {how}, {_fmt_metric(metric, best.score)}"
    if len(ok) > 1:
        nxt = ok[1]
        text += f"; next {nxt.row.name} at {_fmt_metric(metric, nxt.score)}"
    return text + "."


def _impossible(cands: list[Candidate], c: Constraints) -> str:
    counts: dict[str, int] = {}
    for cd in cands:
        for s in cd.failed:
            counts[s.check] = counts.get(s.check, 0) + 1
    unknown = ("no purchase price", "no TDP")
    near = min(cands, key=lambda cd: (len(cd.failed), any(u in s.detail for s in cd.failed for u in unknown),
                                      [s.check == "fits" for s in cd.failed], _key(cd.score, False)))
    why = "; ".join(f"{s.check}: {s.detail}" for s in near.failed)
    summary = ", ".join(f"{k} rules out {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    return (f"no hardware meets the constraints ({summary}); the nearest, {near.row.hardware}, fails on {why} "
            "- relax that constraint.")


def _cost_at(cd: Candidate, econ: C.Economics, usd_per_kwh: float | None = None,
             capex_per_year: float | None = None) -> float | None:
    t = cd.row.cost_terms
    if not t or not t.get("tokens_per_year"):
        return None
    capex = t["capex_per_year"] if capex_per_year is None else capex_per_year
    if capex is None:
        return None
    kwh = econ.usd_per_kwh if usd_per_kwh is None else usd_per_kwh
    return (capex + t["kwh_per_year"] * kwh) / t["tokens_per_year"] * 1e6


def what_would_change(ok: list[Candidate], out: list[Candidate], metric: str, higher: bool, econ: C.Economics,
                      c: Constraints) -> list[str]:
    best = ok[0]
    changes: list[str] = []
    # 1. a candidate ruled out by one constraint only, that would beat the winner
    for cd in sorted(out, key=lambda x: _key(x.score, higher)):
        if (len(cd.failed) == 1 and cd.failed[0].check not in ("fits", "stack")
                and _better(cd.score, best.score, higher)):
            s = cd.failed[0]
            changes.append(f"{cd.row.name} would win ({_fmt_metric(metric, cd.score)}) if the {s.check} constraint "
                           f"allowed it ({s.detail}).")
        if len(changes) >= 3:
            break
    for cd in out:
        if [s.check for s in cd.failed] == ["stack"] and cd.row.fits and _better(cd.score, best.score, higher):
            changes.append(f"{cd.row.name} ({cd.stack}) would win ({_fmt_metric(metric, cd.score)}) if that "
                           "software stack were acceptable.")
            break
    if metric == "usd_per_m_tokens_owned":
        # 2. the runner-up's price that ties the winner; unpriced candidates' break-even price
        target = best.score
        for cd in ok[1:4]:
            t = cd.row.cost_terms
            if target is None or not t:
                continue
            capex_year = target / 1e6 * t["tokens_per_year"] - t["kwh_per_year"] * econ.usd_per_kwh
            price = capex_year * econ.years / t["n"]
            now = cd.row.metrics.get("price_usd")
            if price <= 0:
                changes.append(f"{cd.row.name} cannot match {best.row.name}: its energy alone costs more per token.")
            elif now is None:
                changes.append(f"{cd.row.name} has no price; it would beat {best.row.name} below "
                               f"{_fmt_usd(price)} per card.")
            else:
                changes.append(f"{cd.row.name} would tie {best.row.name} at {_fmt_usd(price)} per card "
                               f"(now {_fmt_usd(now / t['n'])}).")
        # 3. the electricity price at which the top two swap
        if len(ok) > 1 and ok[1].score is not None:
            a, b = best.row.cost_terms, ok[1].row.cost_terms
            ea, eb = a["kwh_per_year"] / a["tokens_per_year"], b["kwh_per_year"] / b["tokens_per_year"]
            ca, cb = a["capex_per_year"] / a["tokens_per_year"], b["capex_per_year"] / b["tokens_per_year"]
            if ea != eb:
                k = (cb - ca) / (ea - eb)
                if k > 0:
                    side = "above" if ea > eb else "below"
                    changes.append(f"{ok[1].row.name} would overtake {best.row.name} {side} {k:.3g} USD/kWh "
                                   f"(now {econ.usd_per_kwh:g}).")
                else:
                    changes.append(f"no electricity price swaps {best.row.name} and {ok[1].row.name}.")
    elif len(ok) > 1 and ok[1].score is not None and best.score:
        gap = abs(best.score - ok[1].score) / abs(best.score)
        changes.append(f"{ok[1].row.name} is {gap:.0%} behind on {metric}; a measured result of that size would "
                       "change the order (estimates are typically within 15%).")
    if not changes:
        changes.append("nothing within the constraints given: no excluded candidate would beat the winner.")
    return changes
