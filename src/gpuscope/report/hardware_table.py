"""Render hardware specs: a rich table for the catalog, a field list for one device, and JSON documents.

Renders value objects only; every number comes from ``gpuscope.specs.hardware``.
"""

from __future__ import annotations

import json

from rich.table import Table

from gpuscope.specs.hardware import DTYPES, GIB, HardwareSpec

SCHEMA = "gpuscope.hardware/1"
DASH = "-"
UNCONFIRMED_MARK = "?"


def _fmt(value: float | None, digits: int = 2) -> str:
    """Thousands separators, at most `digits` decimals, trailing zeros dropped (989.5, 362.05, 1,979)."""
    if value is None:
        return DASH
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _unconfirmed_fields(spec: HardwareSpec) -> set[str] | None:
    """Field names listed as unconfirmed (first word of each note); None means every field is unconfirmed."""
    names: set[str] = set()
    for note in spec.unconfirmed:
        if "all fields" in note.lower():
            return None
        names.add(note.split()[0].strip(",;:") if note.split() else note)
    return names


def _mark(spec: HardwareSpec, text: str, *fields: str) -> str:
    flagged = _unconfirmed_fields(spec)
    if text != DASH and (flagged is None or any(f in flagged for f in fields)):
        return text + UNCONFIRMED_MARK
    return text


def _peak_cell(spec: HardwareSpec, dtype: str) -> str:
    if not spec.supports(dtype):
        return DASH
    return _mark(spec, _fmt(spec.peak(dtype)), f"{dtype}_tflops_dense", f"{dtype}_tops_dense")


def _price_cell(spec: HardwareSpec) -> str:
    """The purchase figure compare and advise use (specs/prices.price_for); ~ marks a cloud-rate equivalent."""
    from gpuscope.specs.prices import is_cloud_equivalent, price_for

    p = price_for(spec).purchase
    if p is None:
        return DASH
    return _fmt(p.value, 0) + ("~" if is_cloud_equivalent(p) else "")


def _purchase_row(spec: HardwareSpec) -> str:
    from gpuscope.specs.prices import price_for

    p = price_for(spec).purchase
    return DASH if p is None else f"{_fmt(p.value, 0)} USD ({p.source}; {p.date})"


def catalog_table(specs: list[HardwareSpec]) -> Table:
    table = Table(
        title="gpuscope hardware catalog (dense peaks, no sparsity)",
        caption=f"{UNCONFIRMED_MARK} = unconfirmed, a planning estimate (`gpuscope hardware show NAME` says why). "
        "GiB = memory_gb x 2**30. Bandwidths in GB/s (decimal); interconnect is per GPU, bidirectional. Price: the "
        "purchase figure compare and advise use (`hardware show NAME` gives its source); ~ = a cloud-rate "
        "equivalent (the on-demand rate x the rent-to-buy ratio of the cards priced both ways; no purchase price published).",
        caption_justify="left",
    )
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("aliases", overflow="fold", max_width=28)
    table.add_column("mem GiB", justify="right", no_wrap=True)
    table.add_column("bf16 TFLOPS", justify="right", no_wrap=True)
    table.add_column("fp8 TFLOPS", justify="right", no_wrap=True)
    table.add_column("mem GB/s", justify="right", no_wrap=True)
    table.add_column("link GB/s", justify="right", no_wrap=True)
    table.add_column("TDP W", justify="right", no_wrap=True)
    table.add_column("price USD", justify="right", no_wrap=True)
    for s in specs:
        table.add_row(
            s.key,
            ", ".join(s.aliases),
            _fmt(s.memory_bytes / GIB),
            _peak_cell(s, "bf16"),
            _peak_cell(s, "fp8"),
            _mark(s, _fmt(s.memory_bw_gbs, 0), "memory_bw_gbs"),
            _mark(s, _fmt(s.interconnect_gbs_bidir) if s.interconnect_gbs_bidir else "none",
                  "interconnect_gbs_bidir"),
            _mark(s, _fmt(s.tdp_w, 0), "tdp_w"),
            _price_cell(s),
        )
    return table


def detail_table(spec: HardwareSpec) -> Table:
    """Every field of one device, one per row."""
    table = Table(title=f"{spec.key}: {spec.name}", show_header=True, title_justify="left")
    table.add_column("field", no_wrap=True, style="bold")
    table.add_column("value", overflow="fold")
    rows: list[tuple[str, str]] = [
        ("key", spec.key),
        ("name", spec.name),
        ("vendor", spec.vendor),
        ("aliases", ", ".join(spec.aliases) or DASH),
        ("memory", f"{_fmt(spec.memory_bytes / GIB)} GiB ({spec.memory_bytes:,} bytes)"),
        ("device_total_bytes",
         f"{spec.device_total_bytes:,} ({spec.device_total_bytes / GIB:.2f} GiB; used for `fits`)"),
        ("memory_bw_gbs", f"{_fmt(spec.memory_bw_gbs, 0)} GB/s datasheet"),
        ("memory_bw_efficiency", f"{spec.memory_bw_efficiency:.2f}"),
        ("achievable memory bandwidth", f"{_fmt(spec.achievable_bw_gbs(), 1)} GB/s"
         + (" (measured)" if "memory_bw_gbs" in spec.measured else " (datasheet x efficiency)")),
    ]
    measured_mm = spec.measured.get("matmul_tflops", {})
    for d in DTYPES:
        if spec.supports(d):
            how = "measured" if d in measured_mm else f"x {spec.efficiency(d):.2f}"
            unit = "TOPS" if d.startswith("int") else "TFLOPS"
            rows.append((f"{d} dense peak", f"{_fmt(spec.peak(d))} {unit}; achievable "
                         f"{_fmt(spec.achievable_tflops(d), 1)} ({how})"))
    rows += [
        ("matmul_efficiency", f"{spec.matmul_efficiency:.2f}"
         + "".join(f"; {d} {e:.2f}" for d, e in spec.matmul_efficiency_by_dtype.items())),
        ("efficiency_source", spec.efficiency_source),
        ("interconnect", f"{spec.interconnect_name}: {_fmt(spec.interconnect_gbs_bidir)} GB/s bidirectional"),
        ("host_interface", spec.host_interface),
        ("tdp_w", _fmt(spec.tdp_w, 0)),
        ("launch_price_usd", _fmt(spec.launch_price_usd, 0)),
        ("purchase price", _purchase_row(spec)),
        ("not_supported", ", ".join(spec.not_supported) or DASH),
        ("halved_from_sparse", ", ".join(spec.halved_from_sparse) or DASH),
        ("unconfirmed", "; ".join(spec.unconfirmed) or DASH),
        ("measured", json.dumps(spec.measured, sort_keys=True) if spec.measured else DASH),
        ("calibrated", "yes" if spec.is_calibrated else "no"),
        ("source", spec.source),
        ("notes", spec.notes or DASH),
        ("origin", spec.origin),
    ]
    for k, v in rows:
        table.add_row(k, v)
    return table


def catalog_json(specs: list[HardwareSpec]) -> str:
    return json.dumps({"schema": SCHEMA, "devices": [s.to_dict() for s in specs]}, indent=2)


def device_json(spec: HardwareSpec) -> str:
    return json.dumps({"schema": SCHEMA, "device": spec.to_dict()}, indent=2)
