"""Hardware specs: the packaged catalog (``specs/data/hardware.toml``) and user TOML files.

Pure Python: no torch, numpy or rich here (shared/DESIGN.md, "Layers").

Conventions
- ``peak_tflops`` holds DENSE peaks (no 2:4 sparsity) per dtype; int8/int4 values are TOPS. MFU is measured
  against these. ``fp32`` is the matrix-core FP32 rate where the vendor gives one (AMD), else plain FP32.
- ``memory_bytes`` = marketing ``memory_gb`` x 2**30 (vendor "GB" of HBM/GDDR are binary GiB in practice).
  ``device_total_bytes`` is what the runtime reports as total device memory (smaller: reserved regions);
  planners decide ``fits`` against it.
- Achievable ceilings: a measured value from a ``[measured]`` table wins; otherwise
  ``peak x matmul_efficiency`` and ``memory_bw_gbs x memory_bw_efficiency``.

A user TOML is either a full device (same keys as a catalog entry; ``name``, ``vendor``, ``memory_gb``,
``memory_bw_gbs`` and at least one dense peak are required) or ``base = "<catalog name>"`` plus overrides.
Either may carry::

    [measured]
    memory_bw_gbs = 4300.0        # device copy, read + write bytes per second / 1e9
    h2d_gbs = 55.0                # host-to-device copy
    [measured.matmul_tflops]
    bf16 = 788.0
"""

from __future__ import annotations

import copy
import re
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from gpuscope.errors import UserError, nearest
from gpuscope.specs.hardware_fields import DTYPES, GIB, entry_fields, lookup_form, normalize_dtype

CATALOG_PATH = Path(__file__).parent / "data" / "hardware.toml"
# Fields that are not passed from a base entry to the entry built on it.
_NOT_INHERITED = ("aliases", "key")


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator. Numbers carry units in their names; peaks are dense."""

    key: str
    name: str
    vendor: str
    memory_bytes: int
    device_total_bytes: int
    memory_bw_gbs: float
    peak_tflops: dict[str, float] = field(hash=False)
    matmul_efficiency: float
    memory_bw_efficiency: float
    interconnect_name: str
    interconnect_gbs_bidir: float
    host_interface: str
    tdp_w: float | None
    launch_price_usd: float | None
    source: str
    efficiency_source: str
    notes: str
    unconfirmed: tuple[str, ...]
    not_supported: tuple[str, ...]
    aliases: tuple[str, ...]
    measured: dict = field(hash=False)
    origin: str
    matmul_efficiency_by_dtype: dict[str, float] = field(default_factory=dict, hash=False)
    halved_from_sparse: tuple[str, ...] = ()
    sm_count: int | None = None  # multiprocessors / compute units, for GEMM wave quantization (estimate/roofline)

    # --- compute ---------------------------------------------------------------------------------
    def supports(self, dtype: str) -> bool:
        return normalize_dtype(dtype) in self.peak_tflops

    def _check(self, dtype: str) -> str:
        d = normalize_dtype(dtype)
        if d not in self.peak_tflops:
            supported = ", ".join(x for x in DTYPES if x in self.peak_tflops) or "none"
            raise UserError(
                f"dtype '{dtype}' is not supported on {self.key} ({self.name}); supported dtypes: {supported}."
            )
        return d

    def peak(self, dtype: str) -> float:
        """Dense datasheet peak in TFLOPS (TOPS for int8/int4)."""
        return self.peak_tflops[self._check(dtype)]

    def efficiency(self, dtype: str) -> float:
        """Default fraction of the dense peak that a large matmul reaches for this dtype."""
        d = self._check(dtype)
        return self.matmul_efficiency_by_dtype.get(d, self.matmul_efficiency)

    def achievable_tflops(self, dtype: str) -> float:
        """Measured matmul ceiling if the spec carries one, else dense peak x matmul efficiency."""
        d = self._check(dtype)
        measured = (self.measured or {}).get("matmul_tflops", {})
        if d in measured:
            return float(measured[d])
        return self.peak_tflops[d] * self.efficiency(d)

    def achievable_bw_gbs(self) -> float:
        """Measured device copy bandwidth (read + write bytes) if present, else datasheet x efficiency."""
        if "memory_bw_gbs" in (self.measured or {}):
            return float(self.measured["memory_bw_gbs"])
        return self.memory_bw_gbs * self.memory_bw_efficiency

    @property
    def is_calibrated(self) -> bool:
        """True when a measured ceiling (matmul or memory bandwidth) replaces a datasheet-based default."""
        m = self.measured or {}
        return bool(m.get("matmul_tflops")) or "memory_bw_gbs" in m

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, plus the achievable ceilings actually used by estimates."""
        supported = [d for d in DTYPES if d in self.peak_tflops]
        return {
            "key": self.key,
            "name": self.name,
            "vendor": self.vendor,
            "aliases": list(self.aliases),
            "memory_bytes": self.memory_bytes,
            "device_total_bytes": self.device_total_bytes,
            "memory_bw_gbs": self.memory_bw_gbs,
            "peak_tflops": {d: self.peak_tflops[d] for d in supported},
            "matmul_efficiency": self.matmul_efficiency,
            "matmul_efficiency_by_dtype": dict(self.matmul_efficiency_by_dtype),
            "memory_bw_efficiency": self.memory_bw_efficiency,
            "achievable_tflops": {d: self.achievable_tflops(d) for d in supported},
            "achievable_bw_gbs": self.achievable_bw_gbs(),
            "is_calibrated": self.is_calibrated,
            "measured": _plain(self.measured),
            "interconnect_name": self.interconnect_name,
            "interconnect_gbs_bidir": self.interconnect_gbs_bidir,
            "host_interface": self.host_interface,
            "tdp_w": self.tdp_w,
            "launch_price_usd": self.launch_price_usd,
            "source": self.source,
            "efficiency_source": self.efficiency_source,
            "notes": self.notes,
            "unconfirmed": list(self.unconfirmed),
            "not_supported": list(self.not_supported),
            "halved_from_sparse": list(self.halved_from_sparse),
            "sm_count": self.sm_count,
            "origin": self.origin,
        }


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


# --- catalog ---------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _catalog_raw() -> dict[str, dict]:
    """The packaged TOML, parsed once: {key: raw entry}."""
    with open(CATALOG_PATH, "rb") as f:
        data = tomllib.load(f)
    return {k: v for k, v in data.items() if isinstance(v, dict)}


@lru_cache(maxsize=1)
def _catalog() -> dict[str, HardwareSpec]:
    raw = _catalog_raw()
    return {key: _build(key, _resolve_base(key, entry, raw, "catalog"), "catalog") for key, entry in raw.items()}


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Normalised name -> catalog key, for the key, the key without its vendor prefix, and every alias."""
    index: dict[str, str] = {}

    def add(name: str, key: str) -> None:
        n = lookup_form(name)
        if index.get(n, key) != key:
            raise RuntimeError(f"hardware catalog: name '{name}' is used by both {index[n]} and {key}")
        index[n] = key

    for key, spec in _catalog().items():
        add(key, key)
        for alias in spec.aliases:
            add(alias, key)
    for key in _catalog():  # vendor-less forms ("h100_sxm"), only where they do not clash
        short = key.split("_", 1)[1] if "_" in key else key
        index.setdefault(lookup_form(short), key)
    return index


def catalog_names() -> list[str]:
    """Every catalog key and alias (for suggestions and help)."""
    names = []
    for key, spec in _catalog().items():
        names.append(key)
        names.extend(spec.aliases)
    return names


def _fresh(spec: HardwareSpec) -> HardwareSpec:
    """A copy whose dicts are the caller's own, so no caller can alter the cached catalog."""
    return replace(
        spec,
        peak_tflops=dict(spec.peak_tflops),
        measured=copy.deepcopy(spec.measured),
        matmul_efficiency_by_dtype=dict(spec.matmul_efficiency_by_dtype),
    )


def list_hardware() -> list[HardwareSpec]:
    """All catalog entries, in catalog order."""
    return [_fresh(s) for s in _catalog().values()]


def _lookup(name: str) -> HardwareSpec:
    n = lookup_form(name)
    index = _index()
    if n in index:
        return _fresh(_catalog()[index[n]])
    if len(n) >= 2:  # a unique substring of one catalog key ("a100 80gb sxm") also works
        hits = sorted({k for k in _catalog() if n in lookup_form(k)})
        if len(hits) == 1:
            return _fresh(_catalog()[hits[0]])
        if len(hits) > 1:
            raise UserError(f"GPU name '{name}' is ambiguous; it matches: {', '.join(hits)}.")
    raise UserError(
        f"unknown GPU '{name}' (not a catalog name, alias or TOML file; `gpuscope hardware` lists them)."
        + nearest(name, catalog_names())
    )


# Words of a runtime device name that name no model: vendors, product lines, marketing.
_DEVICE_NOISE = {"nvidia", "amd", "intel", "geforce", "tesla", "instinct", "corporation", "graphics", "generation"}


@lru_cache(maxsize=256)
def catalog_key_for_device(device_name: str | None) -> str | None:
    """The catalog key of a device name as the runtime reports it (``torch.cuda.get_device_name``, ``torch.xpu``:
    'NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-80GB', 'Tesla V100-SXM2-32GB', 'Intel(R) Arc(TM) A770 Graphics',
    'AMD Instinct MI250X/MI250'), or None: a CPU, or a GPU the catalog does not hold. The longest run of the name's
    leading words (vendor and product-line words dropped) that is a catalog key or alias picks the entry; a memory
    size ('40GB') or form factor (PCIe, SXM, NVL) that the name states and the entry contradicts rejects it, so an
    A100-SXM4-40GB is not planned as the 80 GB part nor a GH200 as an H200."""
    text = re.sub(r"\((r|tm)\)", " ", (device_name or "").lower())
    words = [w for w in re.split(r"[\s_\-/,]+", text) if w and w not in _DEVICE_NOISE]
    for n in range(len(words), 0, -1):
        key = _index().get(lookup_form(" ".join(words[:n])))
        if key:
            return key if _device_words_fit(key, words) else None
    return None


def _device_words_fit(key: str, words: list[str]) -> bool:
    """Whether the memory sizes and form factors a device name states agree with catalog entry ``key``."""
    entry = _resolve_base(key, _catalog_raw()[key], _catalog_raw(), "catalog")
    sizes = {float(g) for g in entry.get("memory_gb_options", ())} | {float(entry["memory_gb"])}
    form = str(entry.get("form_factor", "")).lower()
    for w in words:
        gb = re.fullmatch(r"(\d+)gb", w)
        if (gb and float(gb.group(1)) not in sizes) or (w == "pcie" and "pcie" not in form) \
                or (w.startswith("sxm") and "sxm" not in form) or (w == "nvl" and "nvl" not in key):
            return False
    return True


def hardware_for_device(device_name: str | None) -> HardwareSpec:
    """The catalog entry of a device name as the runtime reports it (catalog_key_for_device); one sentence where the
    catalog has none."""
    key = catalog_key_for_device(device_name)
    if key is None:
        raise UserError(f"device '{device_name}' is not in the hardware catalog; pass --gpu NAME or a calibrated TOML "
                        "(gpuscope hardware calibrate --out my.toml).")
    return load_hardware(key)


def load_hardware(arg: str | Path) -> HardwareSpec:
    """A catalog key or alias (case-insensitive; '_', '-' and ' ' alike), or a path to a hardware TOML."""
    if isinstance(arg, HardwareSpec):
        return arg
    text = str(arg).strip()
    if not text:
        raise UserError("--gpu is empty; give a catalog name (see `gpuscope hardware`) or a path to a TOML file.")
    path = Path(text).expanduser()
    looks_like_path = text.lower().endswith(".toml") or "/" in text or "\\" in text
    if looks_like_path or (path.is_file() and lookup_form(text) not in _index()):
        return _load_file(path)
    return _lookup(text)


# --- user TOML -------------------------------------------------------------------------------------
def _load_file(path: Path) -> HardwareSpec:
    if not path.is_file():
        raise UserError(f"hardware file '{path}' does not exist.")
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"hardware file '{path}' is not valid TOML ({exc}).") from None
    except OSError as exc:
        raise UserError(f"hardware file '{path}' cannot be read ({exc.strerror}).") from None
    where = str(path)
    if not any(k in data for k in ("base", "name")):
        tables = [k for k, v in data.items() if isinstance(v, dict) and k != "measured"]
        if len(tables) == 1 and isinstance(data[tables[0]], dict) and "name" in data[tables[0]]:
            data = {"key": tables[0], **data[tables[0]]}  # a single catalog-style [key] table
        else:
            raise UserError(
                f"hardware file '{path}' must set `base` (a catalog name) or define a device (`name`, `vendor`, "
                "`memory_gb`, `memory_bw_gbs` and a dense peak such as `bf16_tflops_dense`)."
            )
    key = str(data.get("key") or path.stem)
    entry = _resolve_base(key, data, _catalog_raw(), where)
    if "base" in data and "source" not in data:
        entry["source"] = f"user file {path} on catalog entry {_base_key(data['base'], where)}: " + str(
            entry.get("source", "")
        )
    changed = [k for k in ("matmul_efficiency", "matmul_efficiency_by_dtype", "memory_bw_efficiency") if k in data]
    if "base" in data and changed and "efficiency_source" not in data:
        entry["efficiency_source"] = f"{', '.join(changed)} set in user file {path}; catalog: " + str(
            entry.get("efficiency_source", "")
        )
    return _build(key, entry, where)


def _base_key(base: Any, where: str) -> str:
    if not isinstance(base, str) or not base.strip():
        raise UserError(f"field 'base' in {where} must be a catalog name such as \"h100\".")
    try:
        return _lookup(base).key
    except UserError as exc:
        raise UserError(f"field 'base' in {where}: {exc}") from None


def _resolve_base(key: str, entry: dict, raw: dict[str, dict], where: str) -> dict:
    """Merge `entry` over its `base` entry (one level of catalog entry; bases may chain)."""
    entry = dict(entry)
    if "base" not in entry:
        return entry
    base_name = entry.pop("base")
    if where == "catalog":
        if base_name not in raw or base_name == key:
            raise RuntimeError(f"hardware catalog: {key} has unknown base '{base_name}'")
        base_key = base_name
    else:
        base_key = _base_key(base_name, where)
    base = _resolve_base(base_key, raw[base_key], raw, "catalog")
    for k in _NOT_INHERITED:
        base.pop(k, None)
    if "memory_gb" in entry and "device_total_bytes" not in entry:
        base.pop("device_total_bytes", None)  # the runtime total belonged to the base's capacity
    merged = {**base, **entry}
    if isinstance(base.get("measured"), dict) and isinstance(entry.get("measured"), dict):
        merged["measured"] = {**base["measured"], **entry["measured"]}
    return merged


def _build(key: str, entry: dict, origin: str) -> HardwareSpec:
    return HardwareSpec(**entry_fields(key, entry, origin))
