"""Prices: what one accelerator costs to buy and to rent, each figure with a source and a date.

The packaged table is ``specs/data/prices.toml`` (a snapshot; nothing is fetched live). A user file given with
``--prices`` has the same layout, and its tables may be named by any ``--gpu`` name or alias::

    [h100]
    purchase_usd = 24000
    cloud_usd_per_hour = 2.49
    source = "our vendor quote"      # used for both figures unless purchase_source / cloud_source are given
    date = "2026-02"

A user entry replaces the packaged figures it names and keeps the others. A hardware spec's own
``launch_price_usd`` (a user hardware TOML) is the next fallback for the purchase price; where a card has neither
but a cloud rate, its purchase figure is the cloud-rate equivalent: the hourly rate x the rent-to-buy ratio of
the packaged cards priced both ways (purchase / on-demand rate, their median: cloud_equivalent_hours), its source
saying so. (Three years of rental would not do: on-demand rates carry the provider's power, hosting and margin and
run about 10x a card's price over three years, so a rental-only card would look ten times dearer than a bought one.) So `advise --budget`,
`compare` and the hardware table read one number per card, and a card sold only as a rental is not ruled out for
lack of a list price. A packaged purchase figure whose source starts with "proxy" is a sibling card's sourced
figure standing in where none for the card itself was found (same die; the differences named in the source):
is_proxy tells it apart, as is_cloud_equivalent does a rental-derived one.
Pure Python: no torch here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from gpuscope.errors import UserError

PRICES_PATH = Path(__file__).parent / "data" / "prices.toml"
_FIELDS = {"purchase_usd", "purchase_source", "purchase_date", "cloud_usd_per_hour", "cloud_source", "cloud_date",
           "source", "date", "notes"}


@dataclass(frozen=True)
class Price:
    """One figure: value in USD (purchase) or USD per GPU-hour (cloud), with where it came from."""

    value: float
    source: str
    date: str

    def to_dict(self) -> dict:
        return {"value": self.value, "source": self.source, "date": self.date}

    @classmethod
    def from_dict(cls, d: dict | None) -> Price | None:
        """The Price of a ``to_dict`` (as a comparison row keeps it), None for None; ask it is_proxy and
        is_cloud_equivalent rather than reading its source."""
        return None if d is None else cls(float(d["value"]), str(d["source"]), str(d["date"]))


@dataclass(frozen=True)
class PriceEntry:
    key: str
    purchase: Price | None = None
    cloud: Price | None = None

    def to_dict(self) -> dict:
        return {"key": self.key,
                "purchase_usd": self.purchase.to_dict() if self.purchase else None,
                "cloud_usd_per_hour": self.cloud.to_dict() if self.cloud else None}


def _positive(value, field: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"field '{field}' in {where} must be a positive number of USD, not {value!r}.")
    if value <= 0:
        raise UserError(f"field '{field}' in {where} must be a positive number of USD, not {value!r}.")
    return float(value)


def _parse(data: dict, where: str, resolve) -> dict[str, PriceEntry]:
    out: dict[str, PriceEntry] = {}
    for name, entry in data.items():
        if not isinstance(entry, dict):
            continue  # schema_version and other top-level scalars
        key = resolve(name)
        unknown = set(entry) - _FIELDS
        if unknown:
            raise UserError(f"field '{sorted(unknown)[0]}' in [{name}] of {where} is not known; allowed: "
                            f"{', '.join(sorted(_FIELDS))}.")
        src, date = str(entry.get("source", where)), str(entry.get("date", "not given"))
        purchase = cloud = None
        if "purchase_usd" in entry:
            purchase = Price(_positive(entry["purchase_usd"], "purchase_usd", f"[{name}] of {where}"),
                             str(entry.get("purchase_source", src)), str(entry.get("purchase_date", date)))
        if "cloud_usd_per_hour" in entry:
            cloud = Price(_positive(entry["cloud_usd_per_hour"], "cloud_usd_per_hour", f"[{name}] of {where}"),
                          str(entry.get("cloud_source", src)), str(entry.get("cloud_date", date)))
        out[key] = PriceEntry(key, purchase, cloud)
    return out


@lru_cache(maxsize=1)
def _packaged() -> dict[str, PriceEntry]:
    with open(PRICES_PATH, "rb") as f:
        return _parse(tomllib.load(f), "the packaged price table", lambda k: k)


def _resolve_gpu_name(name: str) -> str:
    from gpuscope.specs.hardware import load_hardware

    if name.lower().endswith(".toml") or "/" in name:
        raise UserError(f"price table name [{name}] must be a catalog GPU name or alias, not a path.")
    return load_hardware(name).key


def load_prices(path: str | Path | None = None) -> dict[str, PriceEntry]:
    """The packaged table, with a user TOML's entries laid over it (figure by figure)."""
    table = dict(_packaged())
    if path is None:
        return table
    p = Path(str(path)).expanduser()
    if not p.is_file():
        raise UserError(f"--prices file '{p}' does not exist.")
    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"--prices file '{p}' is not valid TOML ({exc}).") from None
    for key, user in _parse(data, f"user price file {p}", _resolve_gpu_name).items():
        base = table.get(key, PriceEntry(key))
        table[key] = PriceEntry(key, user.purchase or base.purchase, user.cloud or base.cloud)
    return table


@lru_cache(maxsize=1)
def cloud_equivalent_hours() -> tuple[float, tuple[str, ...]]:
    """The rent-to-buy ratio (hours of on-demand rental that cost one card) of the packaged cards that carry both a
    sourced purchase price and a cloud rate: their median, and the cards it came from."""
    both = {k: e.purchase.value / e.cloud.value for k, e in _packaged().items()
            if e.purchase is not None and e.cloud is not None and e.cloud.value > 0}
    if not both:  # pragma: no cover - the packaged table has such cards
        raise UserError("the price table has no card with both a purchase price and a cloud rate.")
    ratios = sorted(both.values())
    mid = len(ratios) // 2
    median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
    return median, tuple(sorted(both))


def cloud_equivalent(cloud: Price) -> Price:
    """A purchase figure from a cloud rate: rate x cloud_equivalent_hours(), its source saying how."""
    hours, cards = cloud_equivalent_hours()
    return Price(cloud.value * hours,
                 f"cloud-rate equivalent, no purchase price published: {cloud.value:g} USD/h x {hours:,.0f} h (the "
                 f"median purchase / on-demand-rate ratio of {', '.join(cards)}; {cloud.source})",
                 cloud.date)


def price_for(hw, prices: dict[str, PriceEntry] | None = None) -> PriceEntry:
    """The price entry of one HardwareSpec; the purchase falls back to the spec's own launch_price_usd, then to
    the cloud-rate equivalent of its cloud rate (cloud_equivalent)."""
    prices = load_prices() if prices is None else prices
    entry = prices.get(hw.key, PriceEntry(hw.key))
    if entry.purchase is None and getattr(hw, "launch_price_usd", None):
        entry = PriceEntry(hw.key, Price(float(hw.launch_price_usd), f"launch_price_usd of {hw.origin}", "not given"),
                           entry.cloud)
    if entry.purchase is None and entry.cloud is not None:
        entry = PriceEntry(hw.key, cloud_equivalent(entry.cloud), entry.cloud)
    return entry


def is_cloud_equivalent(price: Price | None) -> bool:
    """Whether a purchase figure is a cloud rate's equivalent (cloud_equivalent), not a price paid for the card."""
    return price is not None and price.source.startswith("cloud-rate equivalent")


def is_proxy(price: Price | None) -> bool:
    """Whether a purchase figure is a sibling card's, standing in for a card with no price of its own."""
    return price is not None and price.source.startswith("proxy")
