"""The report and `gpuscope ui` in a real browser: Debian's headless Chromium driven through chromedriver
(selenium). A report of a CPU bench store (a micro run on this CPU, with the H200 records of research/results
loaded beside it) opens with no network, draws every chart and logs no console error; the ui's
plan form, submitted in the browser, returns the estimate `gpuscope plan infer --json` prints for the same inputs,
and bad input shows the command's own sentence. Screenshots go to the test's tmp folder.

Without chromium (apt-get install chromium chromium-driver) these tests skip, or fail where
GPUSCOPE_REQUIRE_BROWSER=1 (CI sets it in .ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_inproc import run_cli

RESULTS = Path(__file__).resolve().parents[1] / "research" / "results"
RECORDS = [RESULTS / "2026-12-01-h200" / "measurements.jsonl", RESULTS / "2026-11-29-h200-x2" / "dist_train.jsonl",
           RESULTS / "2026-11-29-h200-x2" / "collectives.jsonl"]
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1300,1800")
WAIT_S = 60  # a loaded 2-core host parses the 4.8 MB plotly.js in a few seconds


def _missing(why: str):
    if os.environ.get("GPUSCOPE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"GPUSCOPE_REQUIRE_BROWSER=1 but {why}")
    pytest.skip(why)


def _binaries() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists()
                                              else None)
    if not chromium or not driver:
        _missing("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    return chromium, driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install -e '.[test]')")
    pytest.importorskip("plotly")
    chromium, driver = _binaries()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=opts)  # the given driver: selenium downloads nothing
    d.set_page_load_timeout(WAIT_S)
    yield d
    d.quit()


_cli = run_cli  # tests/cli_inproc.py


def _wait(d, predicate, what: str):
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:
        v = predicate()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _drawn(d) -> tuple[int, int]:
    """(charts on the page, charts plotly has drawn: each has its plot container and at least one trace)."""
    return d.execute_script(
        "var c=document.querySelectorAll('.gs-chart');var n=0;c.forEach(function(el){"
        "if(el.querySelector('.plot-container') && el.querySelectorAll('.trace').length) n++;});return [c.length,n];")


def _console_errors(d) -> list[str]:
    return [e["message"] for e in d.get_log("browser") if e["level"] == "SEVERE"]


def _requests(d) -> list[str]:
    urls = []
    for e in d.get_log("performance"):
        msg = json.loads(e["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory) -> Path:
    """A CPU bench store (`bench micro --device cpu --dtype fp32 --benches matmul,memory` through the pipeline:
    fp32 matmul and memory bandwidth of this CPU) with research/results' H200 records loaded beside it, and its
    report (`gpuscope report --db`, in this process: one interpreter start less on a loaded host)."""
    pytest.importorskip("torch")
    from gpuscope.pipeline.micro import run_micro
    from gpuscope.pipeline.session import Session
    from gpuscope.report.html.records import load_records
    from gpuscope.report.html.store_report import write_store_report

    tmp = tmp_path_factory.mktemp("report")
    db = tmp / "cpu.sqlite"
    with Session(str(db), "bench micro", argv=["gpuscope", "bench", "micro", "--device", "cpu"]) as s:
        run_micro(s, "cpu", "quick", ["fp32"], ("matmul", "memory"))
        assert s.kept() == 4 and all(m["status"] == "ok" for m in s.out)
        for p in RECORDS:
            load_records(s.store, p)
    out = tmp / "report.html"
    write_store_report(str(db), str(out))
    return out


def test_report_draws_every_chart_with_no_network_and_no_console_error(browser, cpu_report, tmp_path):
    browser.get_log("performance"), browser.get_log("browser")  # start from empty logs
    browser.get(cpu_report.as_uri())
    total, drawn = _wait(browser, lambda: (lambda t: t if t[0] and t[0] == t[1] else None)(_drawn(browser)),
                         "every chart drawn")
    ids = browser.execute_script("return Array.from(document.querySelectorAll('section')).map(s => s.id)")
    assert {"accuracy", "scaling", "collectives", "provenance"} <= set(ids)
    assert sum(i.startswith("roofline-") for i in ids) == 2  # this CPU's, and the H200's
    assert total == 6  # predicted vs measured and the errors, two rooflines, scaling, collectives
    traces = browser.execute_script("return document.querySelectorAll('#accuracy .scatterlayer .trace').length")
    assert traces >= 4  # the two bands, the y = x lines, the measured rows
    assert _console_errors(browser) == []
    assert [u for u in _requests(browser) if not u.startswith(("file:", "data:", "blob:"))] == []
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 20_000


@pytest.fixture(scope="module")
def ui_url(tmp_path_factory):
    from gpuscope.ui.server import make_server

    srv = make_server("127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    host, port = srv.server_address[:2]
    assert host == "127.0.0.1"
    yield f"http://127.0.0.1:{port}/"
    srv.shutdown()
    srv.server_close()


def _submit(d, form: str, values: dict) -> str:
    d.execute_script("gsShow(arguments[0])", form)
    for name, v in values.items():
        el = d.find_element("id", f"{form}-{name}")
        if el.get_attribute("type") == "checkbox":
            if el.is_selected() != bool(v):
                el.click()
        elif el.tag_name == "select":
            d.execute_script("arguments[0].value = arguments[1]", el, v)
        else:
            el.clear()
            el.send_keys(str(v))
    d.execute_script("document.body.dataset.state = 'submitting'")  # never read the previous result's state
    d.find_element("id", f"{form}-submit").click()
    return _wait(d, lambda: d.execute_script("var s=document.body.dataset.state;return s=='done'||s=='error'?s:null"),
                 "the result")


def test_ui_form_returns_the_cli_estimate_and_the_cli_sentence(browser, ui_url, tmp_path):
    browser.get(ui_url)
    _wait(browser, lambda: browser.execute_script("return document.body.dataset.state == 'ready'"), "the page")
    values = {"model": "llama-3.2-1b", "gpu": "h200", "batch": 2, "prompt": 256, "gen": 32, "ops": True}
    assert _submit(browser, "plan-infer", values) == "done"
    got = json.loads(browser.find_element("id", "gs-json").text)
    cli = _cli("plan", "infer", "--model", "llama-3.2-1b", "--gpu", "h200", "--batch", "2", "--prompt", "256",
               "--gen", "32", "--ops", "--json")
    assert got == json.loads(cli.stdout) and got["ops"]
    assert browser.find_element("id", "gs-command").text == (
        "gpuscope plan infer --model=llama-3.2-1b --gpu=h200 --batch=2 --prompt=256 --gen=32 --dtype=bf16 "
        "--engine=eager --num-gpus=1 --tp=1 --ops --json")
    total, drawn = _wait(browser, lambda: (lambda t: t if t[0] and t[0] == t[1] else None)(_drawn(browser)),
                         "the estimate's charts")
    assert total == 2  # memory, and time by phase and operation
    browser.save_screenshot(str(tmp_path / "ui.png"))
    for bad, args in [({"model": "no-such-model"}, ["--model", "no-such-model"]), ({"batch": -1}, ["--batch", "-1"])]:
        assert _submit(browser, "plan-infer", dict(values, **bad)) == "error"
        shown = browser.find_element("id", "gs-error").text
        r = _cli("plan", "infer", "--model", "llama-3.2-1b", "--gpu", "h200", *args)
        assert r.returncode == 2 and r.stderr.strip() == f"error: {shown}"
        assert browser.find_element("id", "gs-views").text == ""
    assert _console_errors(browser) == []
