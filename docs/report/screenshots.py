"""Screenshots of docs/report/h200.html and of `gpuscope ui` for docs/report.md, taken in headless Chromium as
tests/test_browser.py drives it (apt-get install chromium chromium-driver; pip install selenium plotly).

    PYTHONPATH=src python docs/report/screenshots.py     # from the repository root, after docs/report/build.sh
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

HERE = Path(__file__).resolve().parent
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1000", "--hide-scrollbars")
REPORT_SECTIONS = ("accuracy", "roofline-0", "scaling", "collectives")


def driver():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='gpuscope-shots-')}")
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def wait(d, script: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not d.execute_script(script):
        if time.monotonic() > end:
            raise SystemExit(f"timed out: {script}")
        time.sleep(0.2)


DRAWN = ("return Array.from(document.querySelectorAll('.gs-chart')).every(e => e.querySelector('.plot-container'))"
         " && document.querySelectorAll('.gs-chart').length > 0")


def report_shots(d) -> None:
    d.get((HERE / "h200.html").as_uri())
    wait(d, DRAWN)
    for sid in REPORT_SECTIONS:
        for i, el in enumerate(d.find_elements("css selector", f"#{sid} .gs-chart")):
            d.execute_script("arguments[0].scrollIntoView()", el)
            el.screenshot(str(HERE / f"h200-{sid.split('-')[0]}{'-errors' if i else ''}.png"))


def ui_shots(d) -> None:
    from gpuscope.ui.server import make_server

    srv = make_server("127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        d.get(f"http://127.0.0.1:{srv.server_address[1]}/")
        wait(d, "return document.body.dataset.state == 'ready'")
        for form, name in (("plan-infer", "ui-plan-infer"), ("compare-infer", "ui-compare-infer"),
                           ("plan-serve", "ui-plan-serve")):
            d.execute_script("gsShow(arguments[0])", form)
            d.find_element("id", f"{form}-submit").click()
            wait(d, "return document.body.dataset.state == 'done'", 300)
            wait(d, DRAWN)
            d.set_window_size(1280, d.execute_script("return document.body.scrollHeight") + 40)
            d.find_element("id", "gs-views").screenshot(str(HERE / f"{name}.png"))
            d.execute_script("window.scrollTo(0, 0)")
            d.find_element("tag name", "body").screenshot(str(HERE / f"{name}-page.png")) if form == "plan-infer" \
                else None
            d.set_window_size(1280, 1000)
    finally:
        srv.shutdown()
        srv.server_close()


def main() -> int:
    d = driver()
    try:
        report_shots(d)
        ui_shots(d)
    finally:
        d.quit()
    print("\n".join(sorted(str(p.relative_to(HERE.parents[1])) for p in HERE.glob("*.png"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
