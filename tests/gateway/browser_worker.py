"""The JS SDK inside a real browser's Web Worker: Debian's headless Chromium (driven by
its chromedriver through selenium, as the admin UI's tests drive it) opens
clients/js/test/browser/worker.html from a local static server; the page starts
worker.js, a module worker that imports the SDK's own src/ and runs the named checks
against the gateway.

The page's origin is not the gateway's: the browser enforces cross-origin policy as it
would for any web app, and the gateway lets the page's origin in by its CORS setting
(GatewayConfig.cors_origins, SLUICE_CORS_ORIGINS), preflights included.
"""
from __future__ import annotations

import functools
import json
import shutil
import tempfile
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from backend_http import served
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

JS = Path(__file__).resolve().parents[2] / "clients" / "js"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 90   # generous: helpers share two cores


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def page_server():
    """clients/js served on a free loopback port; yields the page's URL."""
    handler = functools.partial(Quiet, directory=str(JS))
    with served(handler) as port:
        yield f"http://127.0.0.1:{port}/test/browser/worker.html"


def origin_of(page: str) -> str:
    """The origin a page's requests carry (scheme, host and port)."""
    parts = urlsplit(page)
    return f"{parts.scheme}://{parts.netloc}"


@contextmanager
def chromium():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    assert not missing, (f"{', '.join(missing)} missing: run scripts/setup.sh (it installs "
                         "Debian's chromium and chromium-driver)")
    profile = tempfile.mkdtemp(prefix="sluice-chromium-")
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options,
                              service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def run_checks(driver, page: str, gateway_url: str, key: str, checks: list[str]) -> dict:
    """What worker.js saw running `checks` against the gateway, by check name."""
    driver.get(page + "?" + urlencode({"base": gateway_url, "key": key,
                                       "checks": ",".join(checks)}))
    WebDriverWait(driver, WAIT_S).until(lambda d: d.title == "done")
    outcome = json.loads(driver.find_element("id", "result").text)
    assert "failed" not in outcome, outcome
    return outcome
