"""A small OpenAI-compatible server for the serving tests (aiohttp.web on 127.0.0.1): ``/v1/models``,
``/v1/completions`` and ``/v1/chat/completions``, streamed as server-sent events, from one of two token sources:

- ``fake``: a token source with known timing: token i of a request at recv + TTFT + i * ITL (absolute times, so
  the schedule does not drift with the loop's delays);
- ``model``: a tiny random model (a config.json) through transformers' continuous batching in this process, each
  token streamed as the engine makes it (``streaming=True`` and ``register_result_handler``).

``GET /stats`` returns the server's own timings per request (its in-process measurement): when the request came
in, each token's time (the engine's record_timestamps, or the fake schedule) and when its chunk was written.
``--fail 500|malformed|odd``: every completion answers 500; the stream breaks after one token; every other request
answers 500. Prints ``READY <port>`` on stdout once listening.

    python tests/serve_server.py --port P [--source fake|model] [--config DIR] [--ttft S --itl S] [--fail MODE]

(or ``start_in_thread([...])`` from a test process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from aiohttp import web

STATS: list[dict] = []


def _chunk(api: str, text: str | None, usage: dict | None = None) -> bytes:
    if usage is not None:
        body = {"object": "text_completion", "choices": [], "usage": usage}
    elif api == "chat":
        body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}
    else:
        body = {"object": "text_completion", "choices": [{"index": 0, "text": text}]}
    return f"data: {json.dumps(body)}\n\n".encode()


async def fake_tokens(args, recv: float, n: int, prompt_ids: list[int], stat: dict):
    for i in range(n):
        due = recv + args.ttft + i * args.itl
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        stat["token_times_s"].append(due)
        yield f" w{i}"


async def model_tokens(app, recv: float, n: int, prompt_ids: list[int], stat: dict):
    manager = app["manager"]
    rid = f"q{len(STATS)}-{id(stat)}"
    queue: asyncio.Queue = asyncio.Queue()
    manager.register_result_handler(rid, queue.put_nowait)
    manager.add_request(prompt_ids, request_id=rid, max_new_tokens=n, streaming=True, record_timestamps=True)
    sent = 0
    while True:
        out = await queue.get()
        for tok in out.generated_tokens[sent:]:
            sent += 1
            yield f" t{tok}"
        if out.is_finished():
            stat["token_times_s"] = list(out.timestamps or [])
            return


def _prompt(api: str, body: dict) -> str:
    if api == "chat":
        return " ".join(m.get("content", "") for m in body.get("messages", []))
    return body.get("prompt", "")


async def complete(request: web.Request, api: str):
    args, recv = request.app["args"], time.perf_counter()
    body = await request.json()
    stat = {"id": request.headers.get("X-Request-Id"), "recv_s": recv, "token_times_s": [], "chunk_sent_s": [], "body": {k: v for k, v in body.items()
                                                                               if k not in ("prompt", "messages")}}
    STATS.append(stat)
    if args.fail == "500" or (args.fail == "odd" and len(STATS) % 2 == 0):
        return web.json_response({"error": {"message": "the test server fails this request"}}, status=500)
    words = _prompt(api, body).split()
    vocab = request.app.get("vocab", 256)
    ids = [hash(w) % vocab for w in words] or [0]
    n = int(body.get("max_tokens") or 16)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    source = fake_tokens(args, recv, n, ids, stat) if args.source == "fake" else \
        model_tokens(request.app, recv, n, ids, stat)
    count = 0
    async for text in source:
        await resp.write(_chunk(api, text))
        stat["chunk_sent_s"].append(time.perf_counter())
        count += 1
        if args.fail == "malformed":
            await resp.write(b"data: {this is not json\n\n")
            return resp
    await resp.write(_chunk(api, None, {"prompt_tokens": len(ids), "completion_tokens": count,
                                        "total_tokens": len(ids) + count}))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def completions(request: web.Request):
    return await complete(request, "completions")


async def chat(request: web.Request):
    return await complete(request, "chat")


async def models(request: web.Request):
    return web.json_response({"object": "list", "data": [{"id": "tiny-test", "object": "model"}]})


async def stats(request: web.Request):
    return web.json_response(STATS)


def start_model(app, config_dir: str):
    import torch

    from gpuscope.measure.device.device import Device
    from gpuscope.measure.models.hf_model import build_model, case_config, silence_generation, vocab_size
    from gpuscope.measure.serve.inprocess import cb_config, manager_for
    from gpuscope.measure.serve.schedule import make_plan

    torch.manual_seed(0)
    model, config = build_model(case_config({"model": config_dir}), Device("cpu"), torch.float32)
    silence_generation(model)
    plan = make_plan(64, 64, 64)  # sizes the cache for up to 64 requests of 64 + 64 tokens
    manager = manager_for(model, plan, cb_config({}, plan, Device("cpu")))
    manager.warmup()
    manager.start()
    app["manager"], app["vocab"] = manager, vocab_size(config)


async def main(args, ready=None, stop: asyncio.Event | None = None) -> None:
    """Serve until ``args.lifetime`` seconds pass or ``stop`` is set; ``ready()`` is called once listening."""
    app = web.Application()
    app["args"] = args
    if args.source == "model":
        start_model(app, args.config)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()
    (ready or (lambda: print(f"READY {args.port}", flush=True)))()
    try:
        await asyncio.wait_for((stop or asyncio.Event()).wait(), args.lifetime)  # bounded: it ends by itself
    except asyncio.TimeoutError:
        pass
    finally:
        if "manager" in app:
            app["manager"].stop(block=True, timeout=5)
        await runner.cleanup()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--source", choices=("fake", "model"), default="fake")
    p.add_argument("--config")
    p.add_argument("--ttft", type=float, default=0.05)
    p.add_argument("--itl", type=float, default=0.01)
    p.add_argument("--fail", choices=("none", "500", "malformed", "odd"), default="none")
    p.add_argument("--lifetime", type=float, default=120.0)
    return p.parse_args(argv)


def start_in_thread(argv: list[str], ready_s: float = 120.0):
    """The server in a thread of this process (a process that has torch loaded already saves its import):
    (the base URL, a function that stops it and waits for the thread)."""
    import threading

    args, loop, started = parse(argv), asyncio.new_event_loop(), threading.Event()
    stop: dict = {}

    async def run():
        stop["event"] = asyncio.Event()
        await main(args, ready=started.set, stop=stop["event"])

    th = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    th.start()
    if not started.wait(ready_s):
        raise RuntimeError("the test server did not start")

    def end():
        loop.call_soon_threadsafe(stop["event"].set)
        th.join(30)
    return f"http://127.0.0.1:{args.port}/v1", end


if __name__ == "__main__":
    sys.path.insert(0, "src")
    asyncio.run(main(parse(sys.argv[1:])))
