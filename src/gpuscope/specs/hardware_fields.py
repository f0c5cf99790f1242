"""Validation of one hardware entry's fields (catalog or user TOML): one sentence per bad field, exit code 2."""

from __future__ import annotations

import re

from gpuscope.errors import UserError, nearest
from gpuscope.specs.numbers import MIN_RATE, count, number

GIB = 2**30
# Default efficiencies for a user-defined device with none given (same as the catalog's "other" default).
DEFAULT_MATMUL_EFFICIENCY = 0.70
DEFAULT_MEMORY_BW_EFFICIENCY = 0.80
_DEFAULT_EFFICIENCY_SOURCE = "matmul 0.70 and bandwidth 0.80: default, not measured."
_REQUIRED = ("name", "vendor", "memory_gb", "memory_bw_gbs")

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4")
# Spellings accepted for a dtype (normalised to the names in DTYPES).
_DTYPE_ALIASES = {
    "float32": "fp32", "float": "fp32", "tensorfloat32": "tf32", "bfloat16": "bf16", "float16": "fp16",
    "half": "fp16", "float8": "fp8", "fp8e4m3": "fp8", "fp8e5m2": "fp8", "nvfp4": "fp4", "mxfp4": "fp4",
}

# Keys a hardware entry may carry besides per-dtype peaks (catalog informational fields included).
_KNOWN_KEYS = {
    "base", "key", "name", "vendor", "form_factor", "release_year", "memory_gb", "memory_gb_options",
    "memory_type", "memory_bw_gbs", "interconnect_name", "interconnect_gbs_bidir", "host_interface", "tdp_w",
    "tdp_range_w", "launch_price_usd", "not_supported", "halved_from_sparse", "unconfirmed", "source", "notes",
    "aliases", "matmul_efficiency", "memory_bw_efficiency", "matmul_efficiency_by_dtype", "efficiency_source",
    "device_total_bytes", "measured", "peak_tflops", "sm_count",
}
_PEAK_KEY = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)*_(tflops|tops)(_dense)?$")
_MEASURED_NUMBERS = (
    "memory_bw_gbs", "h2d_gbs", "d2h_gbs",  # ceilings (gpuscope hardware calibrate)
    "intra_gbs", "inter_gbs", "allreduce_busbw_gbs", "intra_latency_s", "inter_latency_s",  # links (comm.py)
    "host_launch_s", "host_prefill_launch_s", "host_forward_s", "host_step_s", "host_setup_s",  # engines.EngineModel
    # eager training host costs in units of host_launch_s (engines.TrainHost)
    "host_train_fwd", "host_train_bwd", "host_train_recompute", "host_train_ckpt_layer", "host_train_fwd_fixed",
    "host_train_bwd_fixed", "host_train_other_kernels", "host_opt_fixed", "host_opt_tensor",
    "host_probe_s", "host_probe_train_s",  # the host's speed when its costs were measured (measure/host/probe.py)
)
# values a calibration may write as 0 (measure/micro/calibrate.py: intercepts floored at 0, the checkpoint split a
# noisy fit leaves out, no kernels netted from the per-call costs): a measured 0 is a value, not a missing one
_MEASURED_MAY_BE_ZERO = {"host_forward_s", "host_step_s", "host_setup_s", "host_train_fwd_fixed",
                         "host_train_bwd_fixed", "host_opt_fixed", "host_train_ckpt_layer", "host_train_other_kernels"}


_COUNTS = {"sm_count": 2**31 - 1, "device_total_bytes": 2**62}  # integers, not rates


def lookup_form(name: str) -> str:
    """Lookup form of a name: lower case, with '_', '-' and spaces dropped ('H100-SXM' == 'h100 sxm')."""
    return re.sub(r"[\s_\-]+", "", name.strip().lower())


def normalize_dtype(dtype: str) -> str:
    d = lookup_form(str(dtype))
    return _DTYPE_ALIASES.get(d, d)


def _num(entry: dict, field_name: str, where: str, *, allow_zero: bool = False, required: bool = False):
    if field_name not in entry:
        if required:
            raise UserError(f"field '{field_name}' is missing in {where}.")
        return None
    value = entry[field_name]
    # finite, and inside the range where bytes or FLOPs over it stay a float64 (specs/numbers.py)
    if field_name in _COUNTS:
        return count(value, f"field '{field_name}' in {where}", maximum=_COUNTS[field_name])
    return number(value, f"field '{field_name}' in {where}", allow_zero=allow_zero)


def _str(entry: dict, field_name: str, where: str, default: str | None = None) -> str:
    value = entry.get(field_name, default)
    if value is None:
        raise UserError(f"field '{field_name}' is missing in {where}.")
    if not isinstance(value, str):
        raise UserError(f"field '{field_name}' in {where} must be a string, not {value!r}.")
    return value


def _strs(entry: dict, field_name: str, where: str) -> tuple[str, ...]:
    value = entry.get(field_name, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"field '{field_name}' in {where} must be a list of strings.")
    return tuple(value)


def _efficiency(entry: dict, field_name: str, where: str, default: float) -> float:
    value = entry.get(field_name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_RATE <= value <= 1:
        raise UserError(f"field '{field_name}' in {where} must be a fraction in (0, 1], not {value!r}.")
    return float(value)


def _peaks(entry: dict, where: str) -> dict[str, float]:
    """Dense peaks per dtype from `<d>_tflops_dense` / `<d>_tops_dense` / fp32 keys / a [peak_tflops] table."""
    peaks: dict[str, float] = {}
    for d in DTYPES:
        for k in (f"{d}_tflops_dense", f"{d}_tops_dense"):
            if k in entry:
                peaks[d] = float(_num(entry, k, where))
    if "fp32" not in peaks:
        for k in ("fp32_matrix_tflops", "fp32_tflops"):  # matrix-core FP32 (AMD) is the matmul rate
            if k in entry:
                peaks["fp32"] = float(_num(entry, k, where))
                break
    table = entry.get("peak_tflops", {})
    if not isinstance(table, dict):
        raise UserError(f"field 'peak_tflops' in {where} must be a table of dtype = dense TFLOPS.")
    for d, v in table.items():
        nd = normalize_dtype(d)
        if nd not in DTYPES:
            raise UserError(f"field 'peak_tflops.{d}' in {where} is not a dtype; allowed: {', '.join(DTYPES)}.")
        peaks[nd] = float(_num(table, d, f"{where} [peak_tflops]"))
    return {d: peaks[d] for d in DTYPES if d in peaks}


def _measured(entry: dict, where: str, peaks: dict[str, float]) -> dict:
    m = entry.get("measured", {})
    if not isinstance(m, dict):
        raise UserError(f"field 'measured' in {where} must be a table.")
    out = dict(m)
    for k in _MEASURED_NUMBERS:
        if k in m:
            out[k] = float(_num(m, k, f"{where} [measured]", allow_zero=k in _MEASURED_MAY_BE_ZERO))
    mm = m.get("matmul_tflops", {})
    if not isinstance(mm, dict):
        raise UserError(f"field 'measured.matmul_tflops' in {where} must be a table of dtype = TFLOPS.")
    clean = {}
    for d, v in mm.items():
        nd = normalize_dtype(d)
        if nd not in DTYPES:
            raise UserError(
                f"field 'measured.matmul_tflops.{d}' in {where} is not a dtype; allowed: {', '.join(DTYPES)}."
            )
        if nd not in peaks:
            raise UserError(
                f"field 'measured.matmul_tflops.{d}' in {where} names a dtype the device has no dense peak for; "
                f"add `{nd}_tflops_dense` or remove it."
            )
        clean[nd] = float(_num(mm, d, f"{where} [measured.matmul_tflops]"))
    if clean or "matmul_tflops" in m:
        out["matmul_tflops"] = clean
    return out


def _check_keys(entry: dict, where: str) -> None:
    for k in entry:
        if k in {f"{d}_tflops" for d in DTYPES if d != "fp32"} | {f"{d}_tops" for d in ("int8", "int4")}:
            raise UserError(
                f"field '{k}' in {where} is ambiguous; write '{k}_dense' with the dense peak (without sparsity)."
            )
        if k not in _KNOWN_KEYS and not _PEAK_KEY.match(k):
            raise UserError(f"field '{k}' in {where} is not a hardware field." + nearest(k, sorted(_KNOWN_KEYS)))


def entry_fields(key: str, entry: dict, origin: str) -> dict:
    """The HardwareSpec fields of one catalog entry or user TOML (its base already merged), each checked."""
    where = "the hardware catalog entry " + key if origin == "catalog" else origin
    _check_keys(entry, where)
    for f in _REQUIRED:
        if f not in entry:
            raise UserError(f"field '{f}' is missing in {where}.")
    peaks = _peaks(entry, where)
    if not peaks:
        raise UserError(f"{where} gives no dense peak; add e.g. `bf16_tflops_dense` (TFLOPS, without sparsity).")
    memory_bytes = int(round(_num(entry, "memory_gb", where, required=True) * GIB))
    device_total = _num(entry, "device_total_bytes", where)
    by_dtype = entry.get("matmul_efficiency_by_dtype", {})
    if not isinstance(by_dtype, dict):
        raise UserError(f"field 'matmul_efficiency_by_dtype' in {where} must be a table of dtype = fraction.")
    by_dtype = {normalize_dtype(d): _efficiency(by_dtype, d, where, 0) for d in by_dtype}
    tdp = _num(entry, "tdp_w", where)
    price = _num(entry, "launch_price_usd", where)
    sms = _num(entry, "sm_count", where)
    return dict(
        key=key,
        name=_str(entry, "name", where),
        vendor=_str(entry, "vendor", where),
        memory_bytes=memory_bytes,
        device_total_bytes=int(device_total) if device_total is not None else memory_bytes,
        memory_bw_gbs=float(_num(entry, "memory_bw_gbs", where, required=True)),
        peak_tflops=peaks,
        matmul_efficiency=_efficiency(entry, "matmul_efficiency", where, DEFAULT_MATMUL_EFFICIENCY),
        memory_bw_efficiency=_efficiency(entry, "memory_bw_efficiency", where, DEFAULT_MEMORY_BW_EFFICIENCY),
        interconnect_name=_str(entry, "interconnect_name", where, "none"),
        interconnect_gbs_bidir=float(_num(entry, "interconnect_gbs_bidir", where, allow_zero=True) or 0.0),
        host_interface=_str(entry, "host_interface", where, "unknown"),
        tdp_w=float(tdp) if tdp is not None else None,
        launch_price_usd=float(price) if price is not None else None,
        source=_str(entry, "source", where, f"user file {origin}" if origin != "catalog" else None),
        efficiency_source=_str(entry, "efficiency_source", where, _DEFAULT_EFFICIENCY_SOURCE),
        notes=_str(entry, "notes", where, ""),
        unconfirmed=_strs(entry, "unconfirmed", where),
        not_supported=_strs(entry, "not_supported", where),
        aliases=_strs(entry, "aliases", where),
        measured=_measured(entry, where, peaks),
        origin=origin,
        matmul_efficiency_by_dtype=by_dtype,
        halved_from_sparse=_strs(entry, "halved_from_sparse", where),
        sm_count=int(sms) if sms is not None else None,
    )
