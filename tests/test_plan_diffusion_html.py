"""`plan diffusion --html`: the diffusion views (report/diffusion_view.html_sections: the plan's figures, memory per
phase, the time of a call and a step, each component's forward and its largest operations, the limits) for one
command; the printed JSON unchanged; every figure a valid plotly figure that draws what the plan holds."""

from __future__ import annotations

import json

import pytest
from cli_inproc import run_cli

go = pytest.importorskip("plotly.graph_objects")

from gpuscope.report.diffusion_view import call_time_figure, component_time_figure, ops_figures  # noqa: E402
from gpuscope.report.html.views import sections_for  # noqa: E402

GIB = 2**30


def _plan(*args: str) -> dict:
    r = run_cli("plan", "diffusion", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_html_draws_the_diffusion_views_and_leaves_the_json_unchanged(tmp_path):
    args = ("plan", "diffusion", "--model", "sdxl", "--gpu", "h200", "--steps", "30", "--json")
    plain = run_cli(*args)
    out = tmp_path / "d.html"
    with_html = run_cli(*args, "--html", str(out))
    assert with_html.returncode == 0, with_html.stderr
    assert with_html.stdout == plain.stdout
    text = out.read_text()
    for sid in ("diffusion", "diffusion-memory", "diffusion-time", "diffusion-limits", "assumptions"):
        assert f'id="{sid}"' in text, sid
    # memory, the call, the components, one operations chart per component (SDXL: two CLIPs, the UNet, the VAE)
    assert text.count('class="gs-chart"') == 3 + 4
    assert "largest batch" in text and "<script src=" not in text


@pytest.mark.parametrize("args", [("--model", "sdxl"), ("--model", "sdxl", "--offload", "model"),
                                  ("--model", "svd-xt", "--component", "denoiser"),
                                  ("--model", "flux.1-schnell", "--component", "vae-decode")])
def test_every_figure_is_valid_and_draws_the_plans_figures(args):
    d = _plan(*args, "--gpu", "h200")
    figs = [f for s in sections_for(d) for f in s.figures if f]
    assert figs
    for f in figs:
        go.Figure(f)  # raises ValueError on any property plotly does not know
    call = call_time_figure(d)
    drawn = sum(t["y"][0] for t in call["data"] if t["x"] == ["one call"])
    assert drawn == pytest.approx(d["time"]["total_s"] * 1e3, rel=1e-9)  # the phases add up to the call
    step = {t["name"]: t["y"][0] for t in call["data"] if t["x"] == ["one step"]}
    assert step.get("denoiser forward", 0.0) == pytest.approx(d["time"]["step_s"] * 1e3)
    comp = component_time_figure(d)
    assert [t["x"] for t in comp["data"]] == [list(d["components"])] * 3
    assert len(ops_figures(d)) == len([v for v in d["top_ops"].values() if v])


def test_offload_copies_are_inside_the_phases():
    d = _plan("--model", "sdxl", "--gpu", "h200", "--offload", "sequential", "--steps", "4")
    bars = {t["name"]: t for t in call_time_figure(d)["data"]}
    copies = bars["of which offload copies"]
    assert copies["x"] == ["offload copies"] and copies["y"][0] == pytest.approx(d["time"]["offload_transfer_s"] * 1e3)
    assert 0 < copies["y"][0] < sum(t["y"][0] for t in bars.values() if t["x"] == ["one call"])
    assert "of which offload copies" not in {t["name"] for t in call_time_figure(_plan("--model", "sdxl", "--gpu",
                                                                                       "h200"))["data"]}


def test_limits_table_holds_the_plans_limits(tmp_path):
    d = _plan("--model", "svd-xt", "--gpu", "h200")
    (lim,) = [s for s in sections_for(d) if s.id == "diffusion-limits"]
    for k, v in d["limits"].items():
        assert f"{v:,}" in lim.html, k
