"""A serve case measured over HTTP: against a running server (``endpoint``) or a `transformers serve` this run
starts (``launch``); the in-process engine is inprocess.py. The result carries the same keys in every mode
(metrics.summarize), one record per request, and ``status: error`` with one sentence when no request completed."""

from __future__ import annotations

import tempfile

from gpuscope.measure.serve.loadgen import probe, run_http
from gpuscope.measure.serve.metrics import RequestRecord, slo_of, summarize
from gpuscope.measure.serve.schedule import Plan, plan_of, workload_blocks

WARMUP_REQUESTS = 4  # untimed requests before a launched server's timed run (its first requests load and compile);
# the case's warmup_requests (--warmup-requests) overrides it


def http_result(case: dict, plan: Plan, recs: list[RequestRecord], **fields) -> dict:
    """The result of an HTTP run: its figures, its requests, and, when none completed, the error they met."""
    res: dict = {"status": "ok", "kind": "serve", "model": case.get("model"), "mode": plan.mode, **fields}
    res.update(summarize(recs, slo_of(case)))
    res["request_records"] = [r.to_dict() for r in recs]
    res["timer"] = "time.perf_counter at the client (each token-carrying SSE chunk as read)"
    if not res["completed"]:
        first = max(res["errors"].items(), key=lambda kv: kv[1])[0] if res["errors"] else "no request completed"
        res.update(status="error", error=f"none of the {len(recs)} requests completed: {first}.")
    return res


def run_endpoint(case: dict) -> dict:
    """Drive a running server: the served model is ``served_model``, else the first the server lists."""
    plan = plan_of(case)
    model = case.get("served_model") or probe(case["endpoint"]) or case.get("model") or "default"
    recs = run_http(case["endpoint"], case.get("api", "completions"), model, plan, case.get("exact", "vllm"),
                    float(case.get("request_timeout_s", 600)), int(case.get("seed", 0)))
    return http_result(case, plan, recs, endpoint=case["endpoint"], served_model=model,
                       api=case.get("api", "completions"), exact=case.get("exact", "vllm"))


def run_launch(case: dict) -> dict:
    """Start `transformers serve` on the case's random-weight model, warm it, drive it, end it."""
    from gpuscope.measure.device.device import Device, pick_device
    from gpuscope.measure.serve.launch import Server, free_port, save_random_model, transformers_command

    plan = plan_of(case)
    api = case.get("api", "completions")
    dev = Device(pick_device(case.get("device")))  # the device the server is told to use, for the estimate
    if dev.type == "cpu" and case.get("num_blocks") is None:
        case = {**case, "num_blocks": workload_blocks(plan)}
    warm_n = case.get("warmup_requests")
    n_warm = min(WARMUP_REQUESTS if warm_n is None else int(warm_n), len(plan.prompt_lens))
    with tempfile.TemporaryDirectory(prefix="gpuscope-serve-") as d:
        save_random_model(case, d)
        port = free_port()
        base = f"http://127.0.0.1:{port}/v1"
        cmd = transformers_command(d, port, case.get("device"), case)
        with Server(cmd, base, log_dir=d) as srv:
            ready = srv.wait_ready(float(case.get("ready_timeout_s", 600)))
            if n_warm:
                warm = Plan(plan.prompt_lens[:n_warm], plan.output_lens[:n_warm], (0.0,) * n_warm)
                run_http(base, api, d, warm, "transformers", float(case.get("request_timeout_s", 600)))
            recs = run_http(base, api, d, plan, "transformers", float(case.get("request_timeout_s", 600)),
                            int(case.get("seed", 0)))
            tail = srv.log_tail(800)
        code = srv.stop()
    server = {"command": ["transformers", "serve", "<random-weight model>", *cmd[5:]], "ready_s": ready,
              "exit_code": code, "log_tail": tail}
    return http_result(case, plan, recs, launch="transformers", server=server, api=api, exact="transformers",
                       device=dev.name, device_name=dev.device_name())
