"""compare / advise / cost: each computation by hand, the CLI through its entry point, the articles' rules."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.errors import UserError
from gpuscope.estimate import cost as C
from gpuscope.explain.advise import Constraints, advise, stack_of
from gpuscope.explain.compare_hw import InferWorkload, TrainWorkload, compare
from gpuscope.report.compare_view import advise_to_json, compare_markdown, compare_to_json
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model
from gpuscope.specs.prices import load_prices, price_for

ROOT = Path(__file__).resolve().parents[1]


# --- cost: hand-checkable numbers ----------------------------------------------------------------------------------
def test_tco_700w_card_articles_formula():
    # 0.7 kW x 1.3 PUE x 8760 h x 3 y = 23,914.8 kWh; x 0.12 = 2,869.78 USD; + 25,000 hardware
    t = C.tco(25000.0, 1, 700.0, C.Economics(usd_per_kwh=0.12, pue=1.3, years=3))
    assert t.energy_kwh == pytest.approx(23914.8)
    assert t.energy_usd == pytest.approx(2869.776)
    assert t.total_usd == pytest.approx(27869.776)
    assert C.tco(None, 2, 700.0).total_usd is None and C.tco(None, 2, 700.0).energy_usd == pytest.approx(2 * 2869.776)


def test_power_model_and_energy_per_token():
    p = C.power_w(700, utilisation=0.5, idle_fraction=0.2)
    assert p.watts_per_gpu == pytest.approx(140 + 560 * 0.5) and p.source == "estimated"
    assert C.power_w(700, 0.5, measured_w=420).watts_per_gpu == 420
    assert C.power_w(None) is None
    assert C.joules_per_token(700, 100) == pytest.approx(7.0)
    # 1000 W for 1M tokens at 1000 tok/s = 1000 s = 0.2778 kWh x 1.3 x 0.12
    assert C.energy_cost_per_million_tokens(1000, 1000) == pytest.approx(1000 / 3600 * 1.3 * 0.12)


def test_cost_per_million_tokens_owned_and_cloud():
    e = C.Economics(usd_per_kwh=0.10, pue=1.0, hours_per_year=8760, years=3, utilisation=1.0)
    # 30,000 USD over 3 y = 10,000/y; 1 kW all year = 8760 kWh = 876 USD/y; 100 tok/s -> 3.1536e9 tok/y
    assert C.cost_per_million_tokens_owned(30000, 1, 1000, 100, e) == pytest.approx(10876 / 3.1536e9 * 1e6)
    assert C.cost_per_million_tokens_cloud(3.6, 2, 1000) == pytest.approx(2.0)  # 7.2 $/h over 3.6M tok/h


def test_train_budget_6nd():
    # 7e9 params x 1e12 tokens x 6 = 4.2e22 FLOPs; at 1000 TFLOP/s x 0.4 MFU = 1.05e8 s = 29,166.7 GPU-hours
    b = C.train_budget(1e12, 7e9, 1000.0, 0.4, 8, watts_per_gpu=700, cloud_usd_per_hour=2.0)
    assert b.flops == pytest.approx(4.2e22)
    assert b.gpu_hours == pytest.approx(29166.67, rel=1e-5)
    assert b.wall_days == pytest.approx(29166.67 / 8 / 24, rel=1e-5)
    assert b.cloud_usd == pytest.approx(58333.3, rel=1e-5)
    assert b.energy_kwh == pytest.approx(29166.67 * 0.7 * 1.3, rel=1e-5)


@pytest.mark.parametrize("kw", [dict(usd_per_kwh=-0.1), dict(pue=0.9), dict(utilisation=0), dict(years=0),
                                dict(utilisation=1.5)])
def test_economics_rejects_bad_values(kw):
    with pytest.raises(UserError):
        C.Economics(**kw)


# --- prices --------------------------------------------------------------------------------------------------------
def test_price_table_has_sources_and_dates():
    table = load_prices()
    assert table["intel_arc_a770_16gb"].purchase.value == 349
    for e in table.values():
        for p in (e.purchase, e.cloud):
            if p:
                assert p.value > 0 and p.source and p.date
    assert "nvidia_v100_sxm2_32gb" not in table or table["nvidia_v100_sxm2_32gb"].purchase is None  # left out


def test_price_override_and_bad_price(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('[v100]\npurchase_usd = 500\nsource = "my quote"\ndate = "2026-01"\n')
    e = price_for(load_hardware("v100"), load_prices(f))
    assert e.purchase.value == 500 and e.purchase.source == "my quote"
    assert e.cloud is not None  # the packaged cloud rate is kept
    f.write_text("[h100]\npurchase_usd = -5\n")
    with pytest.raises(UserError, match="purchase_usd"):
        load_prices(f)
    f.write_text("[h9000]\npurchase_usd = 5\n")
    with pytest.raises(UserError, match="h9000"):
        load_prices(f)


# --- compare -------------------------------------------------------------------------------------------------------
def test_compare_infer_fit_matrix_and_measured_marking():
    m = load_model("article-32b")
    gpus = [load_hardware(g) for g in ("a770", "v100", "h100")]
    c = compare(m, gpus, InferWorkload(), measured={"nvidia_h100_sxm": {"decode_tokens_per_s": 50.0}})
    rows = {r.hardware: r for r in c.rows}
    a770, v100, h100 = rows["intel_arc_a770_16gb"], rows["nvidia_v100_sxm2_32gb"], rows["nvidia_h100_sxm"]
    # 32.8B parameters: bf16 (65 GB) fits one 80 GB H100; A770 16 GB needs int4 on 2 cards; V100 32 GB int4 on 1
    assert h100.config["dtype"] == "bf16" and h100.config["num_gpus"] == 1
    assert a770.fit_matrix == {"bf16": 8, "int8": 4, "int4": 2} and a770.config["num_gpus"] == 2
    assert v100.config["dtype"] == "int4" and v100.config["num_gpus"] == 1
    assert any("no bf16" in n for n in v100.notes)
    assert h100.metrics["decode_tokens_per_s"] == 50.0 and h100.sources["decode_tokens_per_s"] == "measured"
    assert h100.sources["ttft_s"] == "estimated"
    assert a770.metrics["power_w"] == 450  # 2 x 225 W TDP
    assert a770.metrics["tokens_per_j"] == pytest.approx(a770.metrics["e2e_tokens_per_s"] / 450)
    d = compare_to_json(c)
    assert d["schema"] == "gpuscope.compare/1" and json.loads(json.dumps(d))
    assert "| fits (dtype on N cards) |" in compare_markdown(c)


def test_compare_train_budget_and_no_multi_gpu_invention():
    c = compare(load_model("llama-3.2-1b"), [load_hardware("h100"), load_hardware("a770")], TrainWorkload(tokens=1e9))
    h100, a770 = c.rows
    b = h100.budget
    assert b["gpu_hours"] == pytest.approx(6 * b["active_params"] * 1e9 / (989.5e12 * h100.metrics["mfu"]) / 3600)
    assert not a770.fits and a770.budget is None
    assert any("not built yet" in n for n in a770.notes)


# --- advise --------------------------------------------------------------------------------------------------------
def test_advise_decision_path_and_ranking():
    m = load_model("llama-3.1-8b")
    a = advise(m, [], InferWorkload(), Constraints(budget_usd=10000, max_power_w=600, stacks=("cuda",)))
    assert all(c.stack == "cuda" for c in a.ranked)
    scores = [c.score for c in a.ranked if c.score is not None]
    assert scores == sorted(scores)
    out = {c.row.hardware: c for c in a.ruled_out}
    assert [s.check for s in out["intel_arc_a770_16gb"].failed] == ["stack"]
    assert "budget" in [s.check for s in out["nvidia_h100_sxm"].failed]
    assert a.changes and a.recommendation.startswith(a.ranked[0].row.name)
    assert any("A770" in x and "software stack" in x for x in a.changes)
    assert advise_to_json(a)["schema"] == "gpuscope.advise/1"


def test_advise_impossible_and_bad_constraints():
    m = load_model("llama-3.1-8b")
    with pytest.raises(UserError, match="no hardware meets"):
        advise(m, [load_hardware("h100")], InferWorkload(), Constraints(max_power_w=50))
    with pytest.raises(UserError, match="--stack"):
        Constraints(stacks=("metal",))
    with pytest.raises(UserError, match="--budget"):
        Constraints(budget_usd=-1)
    assert stack_of("Intel (Habana)") == "synapseai" and stack_of("AMD") == "rocm"


# --- the articles' rules of thumb ----------------------------------------------------------------------------------
def _article():
    spec = importlib.util.spec_from_file_location("article_case", ROOT / "scripts" / "article_case.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rules_of_thumb():
    a = _article()
    r = a.rule_fp32_120gb()
    assert r["holds"] and 125 < r["values"]["weights_gb"] < 135
    r = a.rule_gb_per_billion()
    assert 2.0 <= r["values"]["infer_gb_per_b"] <= 2.3 and r["values"]["train_gb_per_b"] > 15
    r = a.rule_v100_perf_per_watt()
    v = r["values"]
    assert v["peak 16-bit TFLOPS per W (V100 PCIe vs A770)"] < 0  # on datasheet compute the A770 leads
    assert v["memory GB/s per W (V100 PCIe vs A770)"] == pytest.approx(900 / 250 / (560 / 225) - 1)
    rows = {(x["model"], x["case"]): x for x in a.rule_memory_table()}
    assert rows[("70b", "bf16")]["holds"] and rows[("7b", "train")]["holds"]
    assert not rows[("7b", "int4")]["holds"]  # 16-bit embeddings and the runtime dominate a small int4 model


# --- CLI -----------------------------------------------------------------------------------------------------------
def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=60)


def test_cli_compare_json_and_text():
    r = run("compare", "--model", "article-32b", "--gpu", "a770", "--gpu", "h100", "infer", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuscope.compare/1" and [x["hardware"] for x in d["rows"]] == [
        "intel_arc_a770_16gb", "nvidia_h100_sxm"]
    r = run("compare", "train", "--model", "llama-3.2-1b", "--gpu", "h100,v100", "--tokens", "1e9")
    assert r.returncode == 0, r.stderr
    assert "budget: GPU-hours" in r.stdout


def test_cli_advise_json():
    r = run("advise", "infer", "--model", "llama-3.1-8b", "--stack", "cuda", "--budget", "5000", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuscope.advise/1" and d["ranked"] and d["what_would_change"]


def test_cli_bad_inputs(tmp_path):
    neg = tmp_path / "neg.toml"
    neg.write_text("[h100]\npurchase_usd = -1\n")
    cases = [
        ["compare", "--model", "article-32b", "--gpu", "h9000", "infer"],
        ["compare", "infer", "--model", "article-32b", "--gpu", "h100", "--prices", str(neg)],
        ["compare", "infer", "--model", "article-32b", "--gpu", "h100", "--electricity", "-0.1"],
        ["advise", "infer", "--model", "llama-3.1-8b", "--gpu", "h100", "--max-power-w", "10"],
        ["advise", "infer", "--model", "llama-3.1-8b", "--stack", "metal"],
    ]
    for args in cases:
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
