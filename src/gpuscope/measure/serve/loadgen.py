"""A load generator for any OpenAI-compatible server (vLLM, SGLang, TGI, TensorRT-LLM's trtllm-serve,
`transformers serve`): ``/v1/completions`` or ``/v1/chat/completions``, streamed (server-sent events), offline,
Poisson or fixed-concurrency arrivals (schedule.py), one RequestRecord per request (metrics.py), failures recorded
with their error, never raised. aiohttp is the client (as vLLM's benchmark uses it); no torch.

- Each request is sent at its arrival offset (or when a concurrency slot frees); its clock starts just before the
  POST, as vLLM's request functions start theirs.
- A token-carrying chunk is a ``data:`` event whose ``choices`` carry text. vLLM's benchmark counts any chunk with
  ``choices``; `transformers serve` opens a chat stream with a role-only delta before it generates and closes
  every stream with an empty choice holding the finish_reason, which that rule would read as a TTFT of ~0 and one
  more gap (a token that decodes to no text is missed instead: rare, special tokens). A ``usage`` event gives the
  completion_tokens (asked with ``stream_options.include_usage``); without one the chunks are counted.
- Exactly G tokens (``EXACT``): ``vllm`` sends ``ignore_eos`` and ``min_tokens`` (vLLM, SGLang, TensorRT-LLM);
  ``transformers``: `transformers serve` refuses unknown fields (HTTP 422) and takes a ``generation_config`` JSON;
  ``none``: the server may stop at EOS (the output tokens it reports are what is counted).
- Prompts (the server tokenises): ``prompt_text`` words, one token each in Llama/Qwen/GPT-style BPE vocabularies,
  seeded per request so no two share a prefix.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from urllib.parse import urlsplit

from gpuscope.errors import UserError
from gpuscope.measure.serve.metrics import RequestRecord
from gpuscope.measure.serve.schedule import Plan

APIS = {"completions": "/completions", "chat": "/chat/completions"}
WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if so no will more time can out up about "
         "other into than its some could them only new these two may first then do any like my now over such our "
         "man me even most made after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world still own see men work "
         "long get here between both life being under never day same another know while last might us great old "
         "year off come since against go came right used take three").split()


def prompt_text(tokens: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(tokens))


def api_url(endpoint: str, api: str) -> str:
    """The URL requests go to: ``endpoint`` as given when it already names the API, else endpoint + the API's path
    (``http://host:port/v1`` + ``/completions``)."""
    e = endpoint.rstrip("/")
    return e if e.endswith(APIS[api]) else e + APIS[api]


def check_endpoint_url(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--endpoint '{endpoint}' is not an http(s) URL (e.g. http://127.0.0.1:8000/v1).")
    try:
        parts.port
    except ValueError:
        raise UserError(f"--endpoint '{endpoint}' has a port that is not a number.") from None
    return endpoint.rstrip("/")


def _base(endpoint: str) -> str:
    e = endpoint.rstrip("/")
    for path in sorted(APIS.values(), key=len, reverse=True):
        if e.endswith(path):
            return e[: -len(path)]
    return e


async def _probe(endpoint: str, timeout_s: float) -> str | None:
    import aiohttp

    url = _base(endpoint) + "/models"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
        async with s.get(url) as r:
            if r.status != 200:
                return None
            try:
                data = await r.json(content_type=None)
                return (data.get("data") or [{}])[0].get("id")
            except (ValueError, AttributeError, IndexError, aiohttp.ContentTypeError):
                return None


def probe(endpoint: str, timeout_s: float = 10.0) -> str | None:
    """The first model the server lists (GET <base>/models), or None where it lists none; a server that cannot be
    reached is a UserError of one sentence (refused, unknown host, no answer in ``timeout_s``)."""
    import aiohttp

    try:
        return asyncio.run(_probe(endpoint, timeout_s))
    except aiohttp.ClientConnectorError as e:
        why = "connection refused (is the server running?)" if isinstance(e.os_error, ConnectionRefusedError) \
            else f"cannot connect ({e.os_error})"
        raise UserError(f"--endpoint {endpoint}: {why}.") from None
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
        raise UserError(f"--endpoint {endpoint}: no answer within {timeout_s:.0f} s.") from None
    except aiohttp.ClientError as e:
        raise UserError(f"--endpoint {endpoint}: {type(e).__name__}: {e}.") from None


EXACT = ("vllm", "transformers", "none")


def exact_fields(exact: str, gen: int) -> dict:
    """The request fields that make a server return exactly ``gen`` tokens (EXACT)."""
    if exact == "vllm":
        return {"ignore_eos": True, "min_tokens": gen}
    if exact == "transformers":
        return {"generation_config": json.dumps({"max_new_tokens": gen, "min_new_tokens": gen, "do_sample": False})}
    return {}


def payload(api: str, model: str, prompt: str, max_tokens: int, extra: dict | None) -> dict:
    body: dict = {"model": model, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.0}
    if api == "chat":
        body.update(messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens)
    else:
        body.update(prompt=prompt, max_tokens=max_tokens)
    body.update(extra or {})
    return body


def carries_text(choices: list) -> bool:
    """Whether a chunk's choices carry generated text (a completion's ``text``, a chat delta's ``content``)."""
    return any(isinstance(c, dict) and (c.get("text") or (c.get("delta") or {}).get("content")) for c in choices)


def read_event(line: bytes, rec: RequestRecord) -> bool:
    """Read one SSE line into ``rec``; True at the end of the stream ([DONE]). A data line that is not JSON, or an
    error event, ends the request with its error."""
    text = line.decode("utf-8", errors="replace").strip()
    if not text.startswith("data:"):
        return False  # blank separators, comments (": ping"), event/id fields
    data = text[5:].strip()
    if data == "[DONE]":
        return True
    try:
        obj = json.loads(data)
    except ValueError:
        rec.error = f"malformed stream: a data event is not JSON ({data[:60]!r})"
        return True
    if not isinstance(obj, dict) or obj.get("error") is not None:
        err = obj.get("error") if isinstance(obj, dict) else obj
        rec.error = f"the server sent an error event: {str(err)[:200]}"
        return True
    if obj.get("choices") and carries_text(obj["choices"]):
        rec.token_times_s.append(time.perf_counter())
    usage = obj.get("usage")
    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
        rec.output_tokens = int(usage["completion_tokens"])
        if usage.get("prompt_tokens") is not None:  # the server's own count of the prompt (words here)
            rec.prompt_tokens = int(usage["prompt_tokens"])
    return False


async def _stream(session, url: str, body: dict, rec: RequestRecord) -> None:
    rec.sent_s = time.perf_counter()
    async with session.post(url, json=body, headers={"X-Request-Id": f"gpuscope-{rec.index}"}) as resp:
        if resp.status != 200:
            text = (await resp.text())[:200].strip()
            rec.error = f"HTTP {resp.status} {resp.reason}: {text}" if text else f"HTTP {resp.status} {resp.reason}"
            return
        ended = False
        async for line in resp.content:
            if read_event(line, rec):
                ended = True
                break
        if rec.error is None and not rec.token_times_s:
            rec.error = "the stream carried no token" + ("" if ended else " and ended without [DONE]")
    if rec.error is None and rec.output_tokens == 0:
        rec.output_tokens = len(rec.token_times_s)


def _failure(e: BaseException, timeout_s: float) -> str:
    import aiohttp

    if isinstance(e, aiohttp.ClientConnectorError):
        return "connection refused" if isinstance(e.os_error, ConnectionRefusedError) else f"cannot connect: {e}"
    if isinstance(e, asyncio.TimeoutError):
        return f"no complete answer within {timeout_s:.0f} s"
    if isinstance(e, aiohttp.ClientPayloadError):
        return f"malformed stream: {e}"
    return f"{type(e).__name__}: {e}"[:300]


async def _one(session, url, body, rec, start, at, slots, timeout_s) -> None:
    delay = start + at - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    async with slots:
        try:
            await asyncio.wait_for(_stream(session, url, body, rec), timeout_s)
        except Exception as e:  # every failure is this request's record, never the run's end
            rec.error = _failure(e, timeout_s)
            rec.token_times_s.clear()


async def _run(url: str, bodies: list[dict], plan: Plan, timeout_s: float) -> list[RequestRecord]:
    import aiohttp

    recs = [RequestRecord(i, plan.prompt_lens[i], plan.output_lens[i], 0.0) for i in range(len(bodies))]
    slots = asyncio.Semaphore(plan.concurrency or len(bodies))
    conn = aiohttp.TCPConnector(limit=plan.concurrency or 0, force_close=False)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None),
                                     read_bufsize=2 ** 16) as session:
        start = time.perf_counter()
        await asyncio.gather(*(_one(session, url, b, r, start, at, slots, timeout_s)
                               for b, r, at in zip(bodies, recs, plan.arrivals_s)))
    return recs


def run_http(endpoint: str, api: str, model: str, plan: Plan, exact: str = "vllm", timeout_s: float = 600,
             seed: int = 0) -> list[RequestRecord]:
    """Send the plan's requests to ``endpoint`` and return one record per request (errors inside)."""
    url = api_url(endpoint, api)
    bodies = [payload(api, model, prompt_text(p, seed * 1_000_003 + i), g, exact_fields(exact, g))
              for i, (p, g) in enumerate(zip(plan.prompt_lens, plan.output_lens))]
    return asyncio.run(_run(url, bodies, plan, timeout_s))
