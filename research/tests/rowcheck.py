"""The checks the dated H200 validation tests share (test_h200_dec02_*.py, test_h200_dec02b_*.py).

- A stored bench record's planner-vs-measured rows: ``records`` (a results JSONL by case id), ``rows`` (one record
  planned again on the catalog entry of the device that ran it), ``check_rows`` (the rows a test needs are there,
  each within its target or a known miss: validation_rows.check_row), ``qlora_results`` (a QLoRA results file's
  runs, each on the bitsandbytes path the planner prices).
- An error asserted as a results note reports it: ``check_reported`` (to REPORTED_ABS; inside its target unless
  listed as a known miss, and not listed once inside).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from validation_rows import check_row

from gpuscope.explain.compare import compare_record, read_records
from gpuscope.specs.hardware import hardware_for_device

# a training record's rows: its peak, the peak of each phase and the step
TRAIN_METRICS = ("peak_bytes", "forward_peak_bytes", "backward_peak_bytes", "optimizer_peak_bytes", "step_s")
REPORTED_ABS = 0.005  # the results notes give errors to three decimals


def records(path: Path) -> dict[str, dict]:
    """The records of a results JSONL by case id (its '#...' tail dropped)."""
    return {rec["case_id"].split("#")[0]: rec for rec in read_records(path)}


def rows(rec: dict) -> dict[str, object]:
    """One record's rows by metric, planned on the catalog entry of the device that ran it."""
    return {r.metric: r for r in compare_record(rec, hardware_for_device(rec["result"]["device_name"]))}


def check_rows(got: dict[str, object], case: str, metrics=TRAIN_METRICS, known_misses: dict | None = None) -> None:
    """Every one of ``metrics`` among ``got``'s rows, and each row within its target (``case:metric`` the key
    of a known miss)."""
    assert set(metrics) <= set(got), sorted(set(metrics) - set(got))
    for metric, row in got.items():
        check_row(row, f"{case}:{metric}", known_misses or {})


def qlora_results(path: Path, cases: set[str]) -> list[dict]:
    """The results of a QLoRA results file: exactly ``cases``, each ok under bitsandbytes 0.50.2 NF4 with double
    quantization on Llama-3.1-8B's 224 Linears."""
    recs = records(path)
    assert set(recs) == cases
    out = [rec["result"] for rec in recs.values()]
    for res in out:
        assert res["status"] == "ok" and res["qlora"] and res["bnb_version"] == "0.50.2"
        assert res["bnb_quant_type"] == "nf4" and res["bnb_double_quant"] and res["quantized_linears"] == 224
    return out


def check_reported(key: tuple[str, str], host: str, got: float, reported: dict, known_misses: dict,
                   target: float) -> None:
    """``got`` (the error of ``key`` = (point, metric) planned on ``host``: "catalog" or "run_host") as
    ``reported`` gives it ((point, metric) -> (error on the catalog entry, error on the run's host)), and inside
    ``target`` exactly when (point, metric, host) is not in ``known_misses``."""
    name, metric = key
    want = reported[key][host == "run_host"]
    assert got == pytest.approx(want, abs=REPORTED_ABS), f"{name} {metric} on {host}: {got:+.4f}, reported {want:+.3f}"
    inside = abs(got) <= target
    assert inside != ((name, metric, host) in known_misses), (
        f"{name} {metric} on {host}: {got:+.3f}; " + ("listed as a miss" if inside else "an unlisted miss"))
