"""LoRA / QLoRA fine-tuning on several cards side by side (`gpuscope compare train --lora-r R [--qlora]`).

Per card, from estimate/lora_search.py (HF transformers + peft on one GPU):
- the fastest configuration that fits at the requested sequence length (micro-batch, gradient checkpointing and the
  adapters' optimizer searched; gradient accumulation keeps ``tokens_per_step``) and its tokens per second;
- the longest sequence that fits at micro-batch 1 with gradient checkpointing and the requested optimizer (the
  stock Trainer setup for long sequences), and with a paged 8-bit AdamW where that reaches further;
- for a token budget D: GPU-hours = D / (tokens/s) / 3600 on one card; cloud cost = GPU-hours x the price table's
  cloud USD per GPU-hour (specs/prices.py; none where the table has none); electricity = TDP x GPU-hours x PUE x
  USD per kWh (the board at its TDP for the whole run: an upper bound on the card's own draw, the host excluded).
Pure Python: the estimate layer only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.estimate.lora import ALL_LINEAR, lora_shape
from gpuscope.estimate.lora_search import longest_seq, rank_configs
from gpuscope.estimate.cost import DEFAULT_PUE, DEFAULT_USD_PER_KWH

SCHEMA = "gpuscope.compare.lora/1"


@dataclass
class LoraCard:
    hardware: str
    name: str
    memory_bytes: int
    best: dict | None  # the fastest fitting configuration at the requested seq (LoraConfig.to_json)
    longest: dict | None  # the longest sequence that fits (micro-batch 1, checkpointing)
    budget: dict | None  # GPU-hours and cost for the token budget at the best configuration's speed
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class LoraComparison:
    model: str
    r: int
    targets: str
    qlora: bool
    seq: int
    tokens: float
    trainable_params: int
    cards: list[LoraCard]

    def to_json(self) -> dict:
        return {"schema": SCHEMA, **{k: v for k, v in self.__dict__.items() if k != "cards"},
                "cards": [c.to_json() for c in self.cards]}


def token_budget(tokens: float, tokens_per_s: float, hw, prices=None, usd_per_kwh: float = DEFAULT_USD_PER_KWH,
                 pue: float = DEFAULT_PUE) -> dict:
    """GPU-hours, cloud and electricity cost of ``tokens`` at ``tokens_per_s`` on one card (module docstring)."""
    from gpuscope.specs.prices import price_for

    hours = tokens / tokens_per_s / 3600.0
    cloud = price_for(hw, prices).cloud
    tdp = getattr(hw, "tdp_w", None)
    return {"gpu_hours": hours, "cloud_usd_per_hour": cloud.value if cloud else None,
            "cloud_usd": hours * cloud.value if cloud else None, "cloud_source": cloud.source if cloud else None,
            "energy_kwh": tdp * hours * pue / 1000.0 if tdp else None,
            "electricity_usd": tdp * hours * pue / 1000.0 * usd_per_kwh if tdp else None}


def _card(m, hw, shape, *, r, targets, qlora, seq, precision, optimizer, tokens, prices, econ) -> LoraCard:
    notes = []
    if not hw.supports("bf16"):
        precision = "amp-fp16"
        notes.append(f"{hw.name} has no bf16: planned with fp16 autocast (amp-fp16)")
    ranked = rank_configs(m, hw, r=r, targets=targets, qlora=qlora, seq=seq, precision=precision, top=1)
    best = ranked[0] if ranked else None
    longest = longest_seq(m, hw, shape, qlora=qlora, recompute="full", optimizer=optimizer, precision=precision)
    paged = longest_seq(m, hw, shape, qlora=qlora, recompute="full", optimizer="paged-adamw-8bit",
                        precision=precision)
    if paged is not None and (longest is None or paged.seq > longest.seq):
        notes.append(f"a paged 8-bit AdamW reaches {paged.seq:,} tokens")
    if best is None:
        notes.append(f"no configuration fits at --seq {seq}")
    budget = token_budget(tokens, best.tokens_per_s, hw, prices, *econ) if best else None
    return LoraCard(hw.key, hw.name, hw.device_total_bytes, best.to_json() if best else None,
                    longest.to_json() if longest else None, budget, notes)


def compare_lora(m, gpus, *, r: int, targets: str | None = None, qlora: bool = False, seq: int = 2048,
                 precision: str = "amp-bf16", optimizer: str = "adamw", tokens: float = 1e9, prices=None,
                 usd_per_kwh: float = DEFAULT_USD_PER_KWH, pue: float = DEFAULT_PUE) -> LoraComparison:
    """Every card of ``gpus`` for LoRA (``qlora``: QLoRA) of ``m`` (module docstring)."""
    from gpuscope.errors import UserError

    if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not tokens > 0 or tokens == float("inf"):
        raise UserError(f"--tokens must be a positive number of tokens, got {tokens!r}.")
    targets = targets or ALL_LINEAR
    shape = lora_shape(m, r, targets)
    cards = [_card(m, hw, shape, r=r, targets=targets, qlora=qlora, seq=seq, precision=precision,
                   optimizer=optimizer, tokens=tokens, prices=prices, econ=(usd_per_kwh, pue)) for hw in gpus]
    return LoraComparison(m.name, r, targets, qlora, seq, float(tokens), shape.trainable, cards)
