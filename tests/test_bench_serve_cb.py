"""`bench serve --model` on CPU: a tiny random Llama served in-process through transformers' continuous batching
(its keys, the store, plan serve beside it), and the load generator driving a real local HTTP server (in a thread
of this process, which has torch loaded already) that streams the same tiny model through continuous batching,
agreeing with that engine's own in-process timings. The CLI's end-to-end run is research/scripts/gpu_serve.sh
--tiny; its exit-2 paths are in test_bench_serve.py."""

from __future__ import annotations

import json
import statistics

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("aiohttp")

from gpuscope.measure.models.tiny import TINY  # noqa: E402
from gpuscope.measure.serve.loadgen import run_http  # noqa: E402
from gpuscope.measure.serve.schedule import make_plan  # noqa: E402
from serve_helpers import free_port, server_stats  # noqa: E402

LATE_S = 0.05  # a chunk's lateness on a loaded 2-core host (test_bench_serve.RESOLUTION_S)
KEYS = ("throughput.output_tokens_per_s", "latency.ttft_p50_s", "latency.ttft_p99_s", "latency.tpot_p50_s",
        "latency.tpot_p99_s")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    (d / "config.json").write_text(json.dumps(dict(TINY["llama"], num_hidden_layers=2)))
    return d


def test_in_process_serving_reports_the_contract_keys_with_plan_serve_beside(tiny_dir, tmp_path):
    """The case as `bench serve --model DIR --device cpu` builds it, run as its process runs it, then stored."""
    from gpuscope import workloads
    from gpuscope.cli.bench_serve import serve_case
    from gpuscope.specs.hardware import load_hardware
    from gpuscope.store.db import Store

    case = serve_case(str(tiny_dir), None, None, {"requests": 6, "prompt": 16, "gen": 8, "device": "cpu",
                                             "dtype": "fp32", "warmup_requests": 1, "concurrency": 3,
                                                   "slo_ttft_s": 1e-9, "slo_tpot_s": 60.0})
    assert case["config"]["model_type"] == "llama" and workloads.from_dict(case).name.endswith("c3-cb")
    res = workloads.run_case(case)
    assert res["status"] == "ok" and res["engine"] == "transformers-cb" and res["mode"] == "concurrency"
    assert (res["completed"], res["failed"], res["output_tokens"]) == (6, 0, 48)  # EOS off: exactly G each
    for key in KEYS:
        group, name = key.split(".")
        assert res[group][name] > 0
    lat = res["latency"]
    assert lat["ttft_p50_s"] <= lat["ttft_p99_s"] and lat["tpot_p50_s"] <= lat["tpot_p99_s"]
    assert res["steps"] >= 16 and res["tokens_per_step_max"] <= 3  # a closed loop of 3: two waves of 8 steps
    assert all(rec["output_tokens"] == 8 and rec["error"] is None for rec in res["request_records"])
    assert res["slo"] == {"ttft": 1e-9, "tpot": 60.0} and res["goodput_requests_per_s"] == 0  # no TTFT of 1 ns
    est = workloads.estimate_for(case, load_hardware("h200"))
    assert [m for m, _, _ in workloads.rows(case, est, res)] == list(KEYS)  # plan serve beside it
    with Store.open(tmp_path / "r.sqlite") as st:
        st.put(st.new_run("bench serve"), workloads.case_id(case), "serve", "n", case, res, {"hostname": "t"})
        assert st.all(kind="serve")[0]["result"]["throughput"] == res["throughput"]


def test_loadgen_over_http_agrees_with_the_engines_in_process_timing(tiny_dir):
    """The server streams each token as its continuous-batching engine makes it; the engine's record_timestamps
    are the in-process measurement of the same requests. Per request the client's TPOT matches the engine's to
    within one engine step (the engine stamps tokens once per step) and a chunk's lateness over the 7 gaps, and its
    TTFT, less the request's transit, is never earlier and at most two steps (a step's tokens are written one after
    the other) and a chunk's lateness later."""
    from serve_server import start_in_thread

    base, end = start_in_thread(["--port", str(free_port()), "--source", "model", "--config", str(tiny_dir)])
    try:
        recs = run_http(base, "completions", "tiny-test", make_plan(8, 16, 8, concurrency=4), "vllm", 60)
        stats = server_stats(base)
    finally:
        end()
    assert all(r.ok and r.output_tokens == 8 for r in recs), [r.error for r in recs]
    for r in recs:
        srv = stats[f"gpuscope-{r.index}"]
        t = srv["token_times_s"]
        assert len(t) == 8
        step = statistics.median(b - a for a, b in zip(t, t[1:]))
        engine_ttft, engine_tpot = t[0] - srv["recv_s"], (t[-1] - t[0]) / 7
        transit = srv["recv_s"] - r.sent_s
        assert transit >= 0
        assert r.tpot_s == pytest.approx(engine_tpot, abs=step + LATE_S / 7)
        assert 0 <= r.ttft_s - transit - engine_ttft <= 2 * step + LATE_S


def test_launch_saves_a_tokenizer_of_one_token_per_prompt_word(tmp_path):
    """`--launch transformers` serves text: its word tokenizer makes a prompt of P words exactly P tokens and
    decodes every id of the model's vocabulary to one word (so each generated token streams as text)."""
    from transformers import AutoTokenizer

    from gpuscope.measure.serve.launch import save_tokenizer, transformers_command
    from gpuscope.measure.serve.loadgen import prompt_text

    save_tokenizer(str(tmp_path), 300)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert len(tok(prompt_text(37, seed=4), add_special_tokens=False)["input_ids"]) == 37
    assert all(len(tok.decode([i]).split()) == 1 for i in (0, 150, 299))
    cmd = transformers_command(str(tmp_path), 8123, "cpu", {"dtype": "bf16", "num_blocks": 64})
    assert cmd[3:6] == ["serve", str(tmp_path), "--host"] and "127.0.0.1" in cmd and "--continuous-batching" in cmd
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16" and cmd[cmd.index("--cb-num-blocks") + 1] == "64"
