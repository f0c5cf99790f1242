"""`gpuscope ui` without a browser (tests/test_browser.py drives it in Chromium): a form becomes its command's
arguments, the server answers with the command's JSON and views or its one sentence, listens on 127.0.0.1 by
default, and refuses a request whose Host is not the loopback's."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
from cli_inproc import run_cli

pytest.importorskip("plotly")

from gpuscope.errors import UserError  # noqa: E402
from gpuscope.ui.forms import BY_ID, FORMS, to_argv  # noqa: E402
from gpuscope.ui.server import make_server  # noqa: E402


_cli = run_cli  # tests/cli_inproc.py


def test_form_to_argv():
    argv = to_argv("plan-infer", {"model": "llama-3.2-1b", "gpu": "h200", "batch": "-1", "kv-dtype": "",
                                  "ops": "1", "unknown": "x"})
    assert argv == ["plan", "infer", "--model=llama-3.2-1b", "--gpu=h200", "--batch=-1", "--ops"]
    assert to_argv("plan-train", {"fsdp": "", "lora-r": " 16 "}) == ["plan", "train", "--lora-r=16"]
    with pytest.raises(UserError, match="unknown form"):
        to_argv("rm", {})
    with pytest.raises(UserError, match="too long"):
        to_argv("plan-infer", {"model": "x" * 5000})


def test_every_form_with_its_defaults_is_a_command_that_runs():
    """The defaults each form shows are valid input for its command (no form opens on an error)."""
    for form in FORMS:
        values = {f.name: f.default for f in form.fields}
        r = _cli(*to_argv(form.id, values), "--json", "--no-db") if form.command[0] != "plan" else \
            _cli(*to_argv(form.id, values), "--json")
        assert r.returncode == 0, (form.id, r.stderr)


@pytest.fixture(scope="module")
def server():
    srv = make_server()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _post(srv, body: dict, host: str | None = None) -> tuple[int, dict]:
    port = srv.server_address[1]
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/run", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **({"Host": host} if host else {})})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}") if e.code != 421 else {}


def test_server_listens_on_the_loopback_by_default(server):
    assert server.server_address[0] == "127.0.0.1"


def test_server_answers_as_the_command_does(server):
    values = {"model": "llama-3.2-1b", "gpu": "h100", "batch": "3", "prompt": "100", "gen": "10"}
    status, doc = _post(server, {"form": "plan-infer", "values": values})
    assert status == 200 and doc["ok"], doc
    cli = _cli("plan", "infer", "--model", "llama-3.2-1b", "--gpu", "h100", "--batch", "3", "--prompt", "100",
               "--gen", "10", "--json")
    assert doc["result"] == json.loads(cli.stdout)
    assert doc["html"].count('class="gs-chart"') == 2
    status, bad = _post(server, {"form": "plan-infer", "values": dict(values, gpu="no-such-gpu")})
    r = _cli("plan", "infer", "--model", "llama-3.2-1b", "--gpu", "no-such-gpu")
    assert status == 200 and not bad["ok"] and r.returncode == 2 and r.stderr.strip() == f"error: {bad['error']}"
    status, bad = _post(server, {"form": "nope", "values": {}})
    assert status == 400 and "unknown form" in bad["error"]


def test_server_refuses_another_host(server):
    status, _ = _post(server, {"form": "plan-infer", "values": {}}, host="attacker.example:80")
    assert status == 421
    port = server.server_address[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as r:
        page = r.read().decode()
    assert all(f'id="{f}"' in page for f in BY_ID) and 'src="/plotly.min.js"' in page


def test_ui_command_prints_its_loopback_address():
    p = subprocess.Popen([sys.executable, "-m", "gpuscope", "ui", "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("gpuscope ui: serving on http://127.0.0.1:"), line
    finally:
        p.terminate()
        p.wait(timeout=60)
    bad = _cli("ui", "--port", "70000")
    assert bad.returncode == 2 and "--port" in bad.stderr


def test_a_port_in_use_is_one_sentence(server):
    with pytest.raises(UserError, match=r"cannot listen on 127.0.0.1:\d+"):
        make_server("127.0.0.1", server.server_address[1])
