"""The planner against every measured row of the results folders listed in research/results/manifest.toml.

Each measured case is planned again with the current planner, on the hardware the manifest names for its folder (the
catalog entry of the device that ran, or the calibration its run wrote), and each planner-vs-measured row must be
within its target (research/tests/validation_rows.py: memory 5%, prefill and step 15%, decode 20%) or be one of the
folder's known misses, within its bound and still outside the target. What each folder measured, and the command
that produced it: research/results/<dir>/README.md. Adding a folder: research/README.md.
"""

from __future__ import annotations

import pytest

from validation_rows import RESULTS, check_row, manifest, result_sets

SETS = result_sets()


def _params() -> list:
    out = []
    for s in SETS:
        for rec, row in s.rows():
            attn = rec["case"].get("attn")
            run = rec.get("run_id", "")[-6:] if "{run_id}" in s.hardware else ""
            label = ":".join(x for x in (s.name, run, row.case, attn or "", row.metric) if x)
            out.append(pytest.param(s, rec, row, id=label))
    return out


@pytest.mark.parametrize("result_set, rec, row", _params())
def test_planned_row_within_target_or_known_miss(result_set, rec, row):
    miss = result_set.miss_for(rec, row)
    key = f"{row.case} {row.metric}"
    check_row(row, key, {key: (miss["bound"], miss["why"])} if miss else {}, tol=result_set.tolerance.get(row.metric))


@pytest.mark.parametrize("result_set", SETS, ids=[s.name for s in SETS])
def test_every_known_miss_names_a_row(result_set):
    """A known miss that no row matches (a renamed case, a mistyped metric) would hide nothing and say nothing."""
    rows = result_set.rows()
    for m in result_set.misses:
        assert any(result_set.miss_for(rec, row) is m for rec, row in rows), m


def test_the_manifest_covers_every_results_folder():
    """Each dated folder under research/results/ has a set in the manifest (or is named as held by counts only)."""
    folders = {p.name for p in RESULTS.iterdir() if p.is_dir() and (p / "README.md").is_file()}
    listed = ({s.dir for s in SETS} | set(manifest().get("checked_by_counts", ()))
              | set(manifest().get("kept_unchecked", ())))
    assert folders == listed
