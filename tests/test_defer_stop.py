"""--defer-stop: transformers' DeferredStopCheck switched on for CUDA/XPU (measure/llm/defer_stop.py), its checks on the
command line, and the planner engine that models it (estimate/roofline.ENGINES["hf-graph-defer"])."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuscope.estimate.infer import alt_key, estimate_infer
from gpuscope.estimate.engines import ENGINES, planner_engine
from gpuscope.specs.hardware import load_hardware
from gpuscope.specs.models import load_model

H200 = load_hardware("h200")


def test_planner_engine_of_a_measured_case():
    assert planner_engine({"engine": "hf-graph", "defer_stop": True}) == "hf-graph-defer"
    assert planner_engine({"engine": "hf-graph"}) == "hf-graph"
    assert planner_engine({"engine": "hf-eager", "defer_stop": True}) == "eager"
    assert planner_engine({}) == "eager" and planner_engine({"engine": "gs-compile"}) == "graph"


def test_hf_graph_defer_is_the_slower_of_the_gpu_step_and_the_host():
    """The host runs a token ahead: decode = max(GPU + generate's own kernels (0.4 ms), host per step). A GPU-bound
    8B step costs what the graph loop's does; a tiny model's costs the host's 0.4 + 0.72 ms + 8.6 us per layer,
    nothing of it counted as in series."""
    eng = ENGINES["hf-graph-defer"]
    kw = dict(batch=1, prompt=128, gen=256)
    m = load_model("llama-3.1-8b")
    d, g, hf = (estimate_infer(m, H200, engine=e, **kw) for e in ("hf-graph-defer", "graph", "hf-graph"))
    assert d.time["decode_gpu_s"] == pytest.approx(g.time["decode_gpu_s"])
    assert d.time["decode_s_per_token"] == pytest.approx(d.time["decode_gpu_s"] + eng.gpu_step_s)
    assert d.time["decode_serial_host_s"] == 0 and d.time["decode_host_s"] == pytest.approx(eng.serial_host_s(32))
    assert d.time["decode_s_per_token"] < hf.time["decode_s_per_token"]
    assert hf.time[alt_key("hf-graph-defer")] == pytest.approx(d.time["decode_s_per_token"])
    (tip,) = [t for t in hf.suggestions if "waits on the GPU" in t]
    assert f"~{d.time['decode_s_per_token'] * 1e3:.2f} with its stop flag read one token late" in tip
    assert "--defer-stop" in tip
    assert any("runs ahead of the GPU" in a for a in d.assumptions)
    tiny = load_model("llama-3.2-1b")
    from dataclasses import replace

    tiny = replace(tiny, num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2,
                   head_dim=16, vocab_size=256)
    t = estimate_infer(tiny, H200, engine="hf-graph-defer", **kw).time
    assert t["decode_s_per_token"] == pytest.approx(eng.serial_host_s(2))


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_deferred_stop_allows_cuda_and_keeps_transformers_other_conditions():
    from gpuscope.measure.llm.defer_stop import deferred_stop, stop_check_class

    cls = stop_check_class()
    before = cls.__dict__["is_supported"]
    cuda = torch.device("cuda")
    assert not cls.is_supported(cuda, None, False, False)  # transformers' own rule: MPS only
    used: list = []
    with deferred_stop(used):
        assert cls.is_supported(cuda, None, False, is_assistant=False)
        assert cls.is_supported(torch.device("xpu"), None, False, False)
        assert not cls.is_supported(cuda, None, False, is_assistant=True)  # an assistant model: never deferred
        assert not cls.is_supported(torch.device("cpu"), None, False, False)  # no device events on CPU

        class Uncroppable:
            is_croppable = False

        assert not cls.is_supported(cuda, Uncroppable(), True, False)  # a returned cache it cannot roll back
        assert cls.is_supported(cuda, Uncroppable(), False, False)
    assert used == [True, True, False, False, False, True]
    assert cls.__dict__["is_supported"] is before  # restored


def test_deferred_stop_is_restored_after_an_error():
    from gpuscope.measure.llm.defer_stop import deferred_stop, stop_check_class

    cls = stop_check_class()
    before = cls.__dict__["is_supported"]
    with pytest.raises(RuntimeError):
        with deferred_stop():
            raise RuntimeError("generate failed")
    assert cls.__dict__["is_supported"] is before


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, says", [
    (("--engine", "hf-graph", "--device", "cpu"), "needs a device with events"),
    (("--engine", "gs-compile"), "applies to HF generate"),
])
def test_defer_stop_refusals_are_one_sentence_exit_2(args, says, tmp_path):
    db = tmp_path / "r.sqlite"
    for cmd in (["bench", "infer"], ["doctor", "infer"]):
        r = _cli(*cmd, "--model", "llama-3.2-1b", "--defer-stop", *args, *(["--db", str(db)] if cmd[0] == "bench"
                                                                           else []))
        assert r.returncode == 2, r.stderr
        assert says in r.stderr and r.stderr.strip().count("\n") == 0
    assert not db.exists()  # refused before any store was opened
