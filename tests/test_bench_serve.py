"""`bench serve` without a model: the metrics' definitions on synthetic requests, the arrival schedules, the case's
checks, the load generator against a real local HTTP server with a token source of known timing, its error cases
(a refused connection, HTTP 500, a malformed stream, some requests failing) and the launcher's clean-up."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("aiohttp")

from gpuscope.errors import UserError  # noqa: E402
from gpuscope.measure.serve.launch import Server  # noqa: E402
from gpuscope.measure.serve.loadgen import probe, run_http  # noqa: E402
from gpuscope.measure.serve.metrics import RequestRecord, percentile, summarize  # noqa: E402
from gpuscope.measure.serve.schedule import make_plan  # noqa: E402
from gpuscope.workloads.serve import ServeCase  # noqa: E402
from serve_helpers import ROOT, SERVER, free_port, running_server, server_stats  # noqa: E402

# The fake source's schedule: token i of a request at its arrival + TTFT + i * ITL
TTFT, ITL, GEN = 0.06, 0.02, 6
# What the client may add to the server's own timings on a shared, loaded 2-core host (load average 7): the
# loopback transit of a chunk and a pass of each side's event loop (seen: 0.3-6 ms, a new connection's set-up up to
# 22 ms, a late wake-up 40 ms). Lateness only: nothing arrives before the server sent it.
RESOLUTION_S = 0.05


def test_metrics_follow_vllms_definitions():
    a = RequestRecord(0, 10, 4, sent_s=100.0, token_times_s=[100.5, 100.6, 100.8, 101.1], output_tokens=4)
    b = RequestRecord(1, 10, 4, sent_s=100.2, token_times_s=[100.4, 100.5], output_tokens=4)  # 2 chunks, 4 tokens
    c = RequestRecord(2, 10, 4, sent_s=100.1, error="HTTP 500 Internal Server Error")
    assert a.ttft_s == pytest.approx(0.5) and a.e2e_s == pytest.approx(1.1)
    assert a.tpot_s == pytest.approx(0.6 / 3) and a.itl_s == pytest.approx([0.1, 0.2, 0.3])
    assert b.tpot_s == pytest.approx(0.1 / 3)  # TPOT divides by the tokens, ITL counts the chunks
    s = summarize([a, b, c], {"ttft": 0.3, "tpot": None})
    assert (s["completed"], s["failed"], s["errors"]) == (2, 1, {"HTTP 500 Internal Server Error": 1})
    assert s["duration_s"] == pytest.approx(1.1)  # first send (100.0) to last token (101.1)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(8 / 1.1)
    assert s["latency"]["ttft_p50_s"] == pytest.approx(0.35)  # between 0.2 and 0.5
    assert s["goodput_requests_per_s"] == pytest.approx(1 / 1.1)  # only b's TTFT is within 0.3 s
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)  # numpy.percentile([1,2,3,4], 99)
    assert summarize([c])["throughput"]["output_tokens_per_s"] is None


def test_schedules_are_seeded_and_shaped():
    off = make_plan(5, 100, 10)
    assert off.mode == "offline" and off.arrivals_s == (0.0,) * 5 and off.prompt_lens == (100,) * 5
    p1, p2 = make_plan(2000, 100, 10, rate=50.0, seed=3), make_plan(2000, 100, 10, rate=50.0, seed=3)
    assert p1 == p2 and p1.mode == "poisson" and p1.arrivals_s[0] == 0.0
    gaps = [b - a for a, b in zip(p1.arrivals_s, p1.arrivals_s[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 50.0, rel=0.1)
    u = make_plan(500, 100, 10, prompt_dist="uniform", prompt_spread=0.5, seed=1)
    assert min(u.prompt_lens) >= 50 and max(u.prompt_lens) <= 150 and len(set(u.prompt_lens)) > 50
    assert make_plan(4, 8, 8, concurrency=2).mode == "concurrency"


@pytest.mark.parametrize("fields, said", [
    ({"rate": 2.0, "concurrency": 4}, "exclude each other"),
    ({"rate": -1.0}, "--rate"),
    ({"requests": 0}, "--requests"),
    ({"endpoint": "localhost:8000"}, "not an http(s) URL"),
    ({"launch": "vllm"}, "--launch 'vllm'"),
    ({"api": "responses"}, "--api 'responses'"),
    ({"prompt_spread": 1.5, "prompt_dist": "uniform"}, "--prompt-spread"),
])
def test_case_checks_say_one_sentence(fields, said):
    base = {"kind": "serve", "model": "llama-3.1-8b", "requests": 4, "prompt": 8, "gen": 8}
    with pytest.raises(UserError, match=said.replace("(", r"\(").replace(")", r"\)")):
        ServeCase.from_dict({**base, **fields})


def test_sse_lines_and_urls():
    from gpuscope.measure.serve.loadgen import api_url, read_event

    assert api_url("http://h:1/v1/", "chat") == "http://h:1/v1/chat/completions"
    assert api_url("http://h:1/v1/completions", "completions") == "http://h:1/v1/completions"
    rec = RequestRecord(0, 4, 4, 0.0)
    lines = [b": ping\n", b"event: x\n", b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n',
             b'data: {"choices": [{"delta": {"content": "a"}}]}\n', b"\n",
             b'data: {"choices": [{"text": "", "finish_reason": "length"}], "usage": {"completion_tokens": 1}}\n']
    assert not any(read_event(x, rec) for x in lines)
    assert len(rec.token_times_s) == 1 and rec.output_tokens == 1  # the role-only and closing chunks carry no text
    assert read_event(b"data: [DONE]\n", rec) and rec.error is None
    assert read_event(b'data: {"error": {"message": "boom"}}\n', rec) and "error event" in rec.error


@pytest.fixture(scope="module")
def fake():
    with running_server("--ttft", str(TTFT), "--itl", str(ITL)) as base:
        yield base


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_loadgen_agrees_with_the_servers_own_timing(fake, api):
    recs = run_http(fake, api, "tiny-test", make_plan(6, 16, GEN, concurrency=3), "vllm", 30)
    stats = server_stats(fake)
    assert all(r.ok and r.output_tokens == GEN and len(r.token_times_s) == GEN for r in recs)
    for r in recs:
        srv = stats[f"gpuscope-{r.index}"]
        assert srv["body"]["ignore_eos"] is True and srv["body"]["min_tokens"] == GEN
        transit = srv["recv_s"] - r.sent_s  # one monotonic clock for both processes (CLOCK_MONOTONIC)
        assert transit >= 0  # the server cannot have the request before it was sent
        assert TTFT - 1e-6 <= r.ttft_s - transit <= TTFT + RESOLUTION_S  # its first token is due at recv + TTFT
        assert r.tpot_s == pytest.approx(ITL, abs=RESOLUTION_S / (GEN - 1))
    s = summarize(recs)
    assert s["latency"]["tpot_p50_s"] == pytest.approx(ITL, abs=RESOLUTION_S / (GEN - 1))
    # a closed loop of 3: two waves of TTFT + 5 ITL each
    assert s["duration_s"] == pytest.approx(2 * (TTFT + (GEN - 1) * ITL), abs=4 * RESOLUTION_S)


def test_poisson_arrivals_are_sent_on_schedule(fake):
    plan = make_plan(6, 8, 2, rate=20.0, seed=5)
    t0 = time.perf_counter()  # before the run's own start (loadgen's clock): no request may go before t0 + arrival
    recs = run_http(fake, "completions", "tiny-test", plan, "none", 30)
    for r, at in zip(recs, plan.arrivals_s):
        # never early (measured from the first send instead, a first request sent late made the others look
        # early on a loaded host); late by at most a loaded loop's wake-up, with room for a host far busier
        assert at <= r.sent_s - t0 <= at + 20 * RESOLUTION_S
    assert "ignore_eos" not in server_stats(fake)[f"gpuscope-{recs[0].index}"]["body"]


@pytest.mark.parametrize("mode, said, failed", [("500", "HTTP 500", 4), ("malformed", "malformed stream", 4),
                                                ("odd", "HTTP 500", 2)])
def test_failed_requests_are_recorded_with_their_error(mode, said, failed):
    with running_server("--fail", mode, "--ttft", "0.01", "--itl", "0.005") as base:
        recs = run_http(base, "completions", "tiny-test", make_plan(4, 8, 4, concurrency=1), "vllm", 30)
    s = summarize(recs)
    assert s["failed"] == failed and s["completed"] == 4 - failed
    assert all(said in e for e in s["errors"])


def test_a_refused_connection_is_one_sentence_and_a_recorded_error():
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(UserError, match="connection refused"):
        probe(dead)
    recs = run_http(dead, "completions", "m", make_plan(2, 4, 4), "vllm", 10)
    assert [r.error for r in recs] == ["connection refused"] * 2


def cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "gpuscope", "bench", "serve", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_cli_dead_endpoint_and_bad_arguments_exit_2_and_store_nothing(tmp_path):
    db = tmp_path / "r.sqlite"
    dead = cli("--endpoint", f"http://127.0.0.1:{free_port()}/v1", "--requests", "2", "--db", str(db))
    assert dead.returncode == 2 and "connection refused" in dead.stderr and "Traceback" not in dead.stderr
    assert len(dead.stderr.strip().splitlines()) == 1
    bad = cli("--endpoint", "http://127.0.0.1:1/v1", "--rate", "2", "--concurrency", "3", "--db", str(db))
    assert bad.returncode == 2 and "exclude each other" in bad.stderr
    assert not db.exists()


def test_server_errors_make_an_error_result_that_stores_and_reads_back(tmp_path):
    """The endpoint kind run as the case process runs it (workloads.run_case, no torch), then stored: a run where
    no request completed is status error with one sentence, and the store reads it back whole."""
    from gpuscope import workloads
    from gpuscope.store.db import Store

    with running_server("--fail", "500") as base:
        case = workloads.from_dict({"kind": "serve", "endpoint": base, "requests": 3, "prompt": 8, "gen": 4})
        res = workloads.run_case(case.to_dict())
        with running_server("--fail", "odd", "--ttft", "0.01", "--itl", "0.005") as half:
            part = workloads.run_case({**case.to_dict(), "endpoint": half, "concurrency": 1})
    assert res["status"] == "error" and res["error"].startswith("none of the 3 requests completed: HTTP 500")
    assert workloads.headline(res).startswith("error none of the 3 requests completed")
    assert part["status"] == "ok" and part["failed"] == 1 and "1 of 3 requests failed (HTTP 500" in \
        workloads.headline(part)
    with Store.open(tmp_path / "r.sqlite") as st:
        run = st.new_run("bench serve")
        for r in (res, part):
            st.put(run, case.key, "serve", case.name, case.to_dict(), r, {"hostname": "test"})
            run = st.new_run("bench serve")
    with Store.open(tmp_path / "r.sqlite") as st:
        rows = st.all(kind="serve")
    assert [r["result"]["status"] for r in rows] == ["error", "ok"]
    assert rows[0]["result"]["request_records"][0]["error"].startswith("HTTP 500")


def test_launcher_waits_for_readiness_and_leaves_no_process():
    port = free_port()
    cmd = [sys.executable, str(SERVER), "--port", str(port), "--lifetime", "60"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    with Server(cmd, f"http://127.0.0.1:{port}/v1", env=env) as srv:
        assert srv.wait_ready(60) >= 0
        assert probe(f"http://127.0.0.1:{port}/v1") == "tiny-test"
        pid = srv.proc.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with Server([sys.executable, "-c", "print('no server here'); raise SystemExit(3)"], "http://127.0.0.1:1/v1") as s:
        with pytest.raises(RuntimeError, match="exited with code 3.*no server here"):
            s.wait_ready(30)
