"""`bench serve --model M --launch transformers` on CPU: a real `transformers serve --continuous-batching` started on
127.0.0.1 with a tiny random-weight Llama saved locally (and its word tokenizer), driven with streamed requests by
the load generator, ended; its result stored and read back with `plan serve`'s estimate beside it.

The server's dependencies (fastapi, uvicorn, openai, pydantic: transformers' `serving` extra) are in gpuscope's
`test` and `bench` extras, so they are required here, not skipped. Cheap: 4 short requests after 1 warm-up; the
cost is the server's start (its own torch import). No timing is asserted beyond order (p50 <= p99)."""

from __future__ import annotations

import importlib
import json
import socket

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuscope.measure.models.tiny import TINY  # noqa: E402

KEYS = ("throughput.output_tokens_per_s", "latency.ttft_p50_s", "latency.ttft_p99_s", "latency.tpot_p50_s",
        "latency.tpot_p99_s")
SERVER_DEPS = ("fastapi", "uvicorn", "openai", "pydantic", "aiohttp")
N, P, G = 4, 16, 6
pytestmark = pytest.mark.slow  # a server process of its own (its torch import is most of the ~20 s)


def test_the_server_dependencies_are_installed():
    """They come with `pip install gpuscope[test]` (pyproject.toml); without them the launch test cannot run."""
    missing = [m for m in SERVER_DEPS if importlib.util.find_spec(m) is None]
    assert not missing, f"install gpuscope[test]: {missing} missing"


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The case as `bench serve --model DIR --launch transformers --device cpu ...` builds it, run as its process
    runs it (workloads.run_case), once for the module."""
    for m in SERVER_DEPS:
        if importlib.util.find_spec(m) is None:
            pytest.fail(f"{m} is not installed (gpuscope[test] installs it)")
    from gpuscope import workloads
    from gpuscope.cli.bench_serve import serve_case

    d = tmp_path_factory.mktemp("tiny")
    (d / "config.json").write_text(json.dumps(dict(TINY["llama"], num_hidden_layers=2)))
    case = serve_case(str(d), None, "transformers", {"requests": N, "prompt": P, "gen": G, "device": "cpu",
                                                     "dtype": "fp32", "concurrency": 2, "warmup_requests": 1})
    return case, workloads.run_case(case)


def test_launched_server_streams_every_request(launched):
    case, res = launched
    assert case["launch"] == "transformers" and case["exact"] == "transformers"  # --launch picks its exact mode
    assert res["status"] == "ok", res.get("error")
    assert res["launch"] == "transformers" and res["mode"] == "concurrency" and res["device"] == "cpu"
    assert (res["requests"], res["completed"], res["failed"]) == (N, N, 0), res.get("errors")
    recs = res["request_records"]
    assert [r["error"] for r in recs] == [None] * N
    # the word tokenizer makes P words P tokens (the server's usage count); generation_config asks for exactly G
    assert all(r["prompt_tokens"] == P and r["output_tokens"] == G for r in recs), recs
    # streamed: several chunks a request (a loaded host may read two tokens' chunks at once: at most G - 1 gaps)
    assert all(1 <= len(r["itl_s"]) <= G - 1 for r in recs), [r["itl_s"] for r in recs]
    assert res["output_tokens"] == N * G
    for key in KEYS:
        group, name = key.split(".")
        assert res[group][name] > 0, key
    lat = res["latency"]
    assert lat["ttft_p50_s"] <= lat["ttft_p99_s"] and lat["tpot_p50_s"] <= lat["tpot_p99_s"]


def test_launched_server_is_ended_and_sized_to_the_workload(launched):
    _, res = launched
    srv = res["server"]
    cmd = srv["command"]
    assert cmd[:3] == ["transformers", "serve", "<random-weight model>"] and "--continuous-batching" in cmd
    assert cmd[cmd.index("--device") + 1] == "cpu"
    assert int(cmd[cmd.index("--cb-num-blocks") + 1]) == 2 * 2  # on a CPU: (P + G) / 256 + 1 blocks x 2 in flight
    assert srv["ready_s"] > 0 and srv["exit_code"] is not None  # it answered /v1/models, and it has exited
    port = int(cmd[cmd.index("--port") + 1])
    with socket.socket() as s:  # nothing listens on its port any more
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_launched_run_is_stored_with_plan_serve_beside(launched, tmp_path):
    from gpuscope import workloads
    from gpuscope.pipeline.estimate import estimate_beside, stored_record
    from gpuscope.store.db import Store

    case, res = launched
    with Store.open(tmp_path / "r.sqlite") as st:
        st.put(st.new_run("bench serve"), workloads.case_id(case), "serve", workloads.from_dict(case).name, case,
               res, {"hostname": "t"})
        row = st.all(kind="serve")[0]
    assert row["name"].endswith("-c2-launch-transformers") and row["status"] == "ok"
    assert row["result"]["latency"] == res["latency"] and len(row["result"]["request_records"]) == N
    est = estimate_beside(stored_record(row), "h200")
    assert "unavailable" not in est, est
    by_metric = {r["metric"]: r for r in est["rows"]}
    for key in KEYS:
        group, name = key.split(".")
        assert by_metric[key]["measured"] == res[group][name] and by_metric[key]["estimated"] > 0
