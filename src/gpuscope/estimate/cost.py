"""Energy and cost: power, joules per token, cost per million tokens, TCO, and training-token budgets.

Pure arithmetic on numbers the estimator (or a measurement) already produced; no torch, no I/O.

Power model (used only where no measured power exists)
    P = P_idle + (TDP - P_idle) x utilisation,   P_idle = IDLE_FRACTION x TDP
``utilisation`` is the fraction of the time the card is busy; a busy card is taken to draw its TDP (an upper
bound: memory-bound decode often draws 50-80% of TDP). IDLE_FRACTION = 0.2 is a rough figure inside the
0.1-0.3 x TDP that `nvidia-smi` shows for data-centre boards sitting idle with the driver loaded (e.g. ~70-100 W
of a 700 W H100/H200 SXM, ~25-40 W of a 250-300 W V100); consumer cards idle lower. Measured power replaces it.

Own hardware (the articles' formula, generalised)
    TCO(years) = price x n + P x n x PUE x hours_per_year x years / 1000 x usd_per_kwh
With P = TDP and utilisation 1 this is exactly "hardware + power x PUE x 3 years" over a 3-year horizon.
    cost per 1M tokens = (price x n / years + P x n x PUE x hours_per_year / 1000 x usd_per_kwh)
                         / (tokens_per_s x 3600 x hours_per_year x utilisation) x 1e6
Cloud: billed only while busy: usd_per_gpu_hour x n / (tokens_per_s x 3600) x 1e6.

Training budget (Kaplan et al. 2020, "Scaling laws", C = 6ND): FLOPs = 6 x N_active x D (attention FLOPs not
included), GPU-seconds = FLOPs / (dense peak x MFU); wall days on n GPUs assume the per-GPU MFU holds (perfect
data-parallel scaling).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.errors import UserError

# Documented defaults (every one is a CLI option).
DEFAULT_USD_PER_KWH = 0.12    # about the 2024 US commercial average (EIA: ~0.12-0.13 USD/kWh)
DEFAULT_PUE = 1.3             # typical data centre: 1.2-1.5 (Uptime Institute surveys ~1.5; hyperscale ~1.1-1.2)
DEFAULT_HOURS_PER_YEAR = 8760.0
DEFAULT_YEARS = 3.0           # the articles' horizon
DEFAULT_UTILISATION = 1.0     # busy all year: the articles' formula; lower it for a real fleet
IDLE_FRACTION = 0.2           # idle power as a fraction of TDP (see the module docstring)


def _check(name: str, value: float, *, low: float = 0.0, high: float | None = None, allow_low: bool = False):
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise UserError(f"{name} must be a number, got {value!r}.")
    bad_low = value < low or (value == low and not allow_low)
    if bad_low or (high is not None and value > high):
        rng = f"{'at least' if allow_low else 'above'} {low:g}" + (f" and at most {high:g}" if high is not None else "")
        raise UserError(f"{name} must be {rng}, got {value:g}.")
    return float(value)


@dataclass(frozen=True)
class Economics:
    """The user's energy and accounting assumptions (all validated)."""

    usd_per_kwh: float = DEFAULT_USD_PER_KWH
    pue: float = DEFAULT_PUE
    hours_per_year: float = DEFAULT_HOURS_PER_YEAR
    years: float = DEFAULT_YEARS
    utilisation: float = DEFAULT_UTILISATION
    idle_fraction: float = IDLE_FRACTION

    def __post_init__(self):
        _check("--electricity (USD per kWh)", self.usd_per_kwh)
        _check("--pue", self.pue, low=1.0, high=3.0, allow_low=True)
        _check("--hours-per-year", self.hours_per_year, high=8784.0)
        _check("--years", self.years, high=20.0)
        _check("--utilisation", self.utilisation, high=1.0)
        _check("--idle-fraction", self.idle_fraction, high=1.0, allow_low=True)

    def to_dict(self) -> dict:
        return dict(usd_per_kwh=self.usd_per_kwh, pue=self.pue, hours_per_year=self.hours_per_year,
                    years=self.years, utilisation=self.utilisation, idle_fraction=self.idle_fraction)


@dataclass(frozen=True)
class Power:
    watts_per_gpu: float
    source: str  # "measured" or "estimated"
    formula: str = ""


def power_w(tdp_w: float | None, utilisation: float = 1.0, idle_fraction: float = IDLE_FRACTION,
            measured_w: float | None = None) -> Power | None:
    """Average power of one card: measured if given, else idle + (TDP - idle) x utilisation; None without a TDP."""
    if measured_w is not None:
        return Power(_check("measured power_w", measured_w), "measured", "measured average board power")
    if not tdp_w:
        return None
    idle = idle_fraction * tdp_w
    w = idle + (tdp_w - idle) * utilisation
    return Power(w, "estimated", f"{idle:.0f} W idle + ({tdp_w:.0f} - {idle:.0f}) W x {utilisation:g} utilisation")


def busy_power_w(tdp_w: float | None, measured_w: float | None = None) -> Power | None:
    """Power while generating or training (utilisation 1): TDP, or the measured figure."""
    return power_w(tdp_w, 1.0, 0.0, measured_w)


def joules_per_token(watts: float, tokens_per_s: float) -> float:
    """J/token = W / (tokens/s). Tokens per joule is its inverse, and equals (tokens/s) per watt."""
    return watts / tokens_per_s


def energy_kwh(watts: float, hours: float, pue: float = 1.0) -> float:
    return watts * hours * pue / 1000.0


@dataclass
class TCO:
    hardware_usd: float | None
    energy_kwh: float
    energy_usd: float
    total_usd: float | None
    years: float

    def to_dict(self) -> dict:
        return {"hardware_usd": self.hardware_usd, "energy_kwh": self.energy_kwh, "energy_usd": self.energy_usd,
                "total_usd": self.total_usd, "years": self.years}


def tco(price_usd: float | None, n_gpus: int, watts_per_gpu: float, econ: Economics = Economics()) -> TCO:
    """Hardware + average power x n x PUE x hours x years x $/kWh (price None: energy part only)."""
    kwh = energy_kwh(watts_per_gpu * n_gpus, econ.hours_per_year * econ.years, econ.pue)
    e_usd = kwh * econ.usd_per_kwh
    hw_usd = None if price_usd is None else price_usd * n_gpus
    return TCO(hw_usd, kwh, e_usd, None if hw_usd is None else hw_usd + e_usd, econ.years)


def cost_per_million_tokens_owned(price_usd: float, n_gpus: int, avg_watts_per_gpu: float, tokens_per_s: float,
                                  econ: Economics = Economics()) -> float:
    """(amortised hardware per year + energy per year) / tokens per year x 1e6 (tokens only while busy)."""
    per_year = price_usd * n_gpus / econ.years + energy_kwh(avg_watts_per_gpu * n_gpus, econ.hours_per_year,
                                                           econ.pue) * econ.usd_per_kwh
    tokens_per_year = tokens_per_s * 3600.0 * econ.hours_per_year * econ.utilisation
    return per_year / tokens_per_year * 1e6


def cost_per_million_tokens_cloud(usd_per_gpu_hour: float, n_gpus: int, tokens_per_s: float) -> float:
    return usd_per_gpu_hour * n_gpus / (tokens_per_s * 3600.0) * 1e6


def energy_cost_per_million_tokens(watts_total: float, tokens_per_s: float, econ: Economics = Economics()) -> float:
    """Electricity alone (with PUE) for 1M tokens at busy power."""
    return watts_total * econ.pue / tokens_per_s * 1e6 / 3.6e6 * econ.usd_per_kwh


@dataclass
class TrainBudget:
    tokens: float
    active_params: float
    flops: float
    gpu_hours: float
    num_gpus: int
    wall_days: float
    energy_kwh: float | None
    energy_usd: float | None
    cloud_usd: float | None
    owned_usd: float | None
    assumptions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("tokens", "active_params", "flops", "gpu_hours", "num_gpus",
                                              "wall_days", "energy_kwh", "energy_usd", "cloud_usd", "owned_usd",
                                              "assumptions")}


def train_budget(tokens: float, active_params: float, peak_tflops: float, mfu: float, num_gpus: int = 1, *,
                 watts_per_gpu: float | None = None, cloud_usd_per_hour: float | None = None,
                 price_usd: float | None = None, econ: Economics = Economics()) -> TrainBudget:
    """Tokens D -> 6 N D FLOPs -> GPU-hours at peak x MFU -> days on n GPUs, energy and cost."""
    _check("--tokens", tokens)
    _check("MFU", mfu, high=1.0)
    if not isinstance(num_gpus, int) or num_gpus < 1:
        raise UserError(f"--num-gpus must be a positive integer, got {num_gpus!r}.")
    flops = 6.0 * active_params * tokens
    gpu_hours = flops / (peak_tflops * 1e12 * mfu) / 3600.0
    kwh = None if watts_per_gpu is None else energy_kwh(watts_per_gpu, gpu_hours, econ.pue)
    e_usd = None if kwh is None else kwh * econ.usd_per_kwh
    cloud = None if cloud_usd_per_hour is None else cloud_usd_per_hour * gpu_hours
    # Own hardware: the share of the amortised price that these GPU-hours use, plus their energy.
    owned = None
    if price_usd is not None and e_usd is not None:
        owned = price_usd / (econ.years * econ.hours_per_year) * gpu_hours + e_usd
    return TrainBudget(tokens, active_params, flops, gpu_hours, num_gpus, gpu_hours / num_gpus / 24.0, kwh, e_usd,
                       cloud, owned, [
                           "FLOPs = 6 N D (N = active parameters, attention FLOPs not counted; Kaplan et al. 2020)",
                           f"MFU {mfu:.1%} of the dense peak {peak_tflops:g} TFLOP/s holds on all {num_gpus} GPU(s)",
                       ])
