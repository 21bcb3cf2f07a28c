"""Backends' Prometheus endpoints: admin validation, the controller's scraper against
real demo servers, staleness, and what the API shows."""
from __future__ import annotations

import socket
import time
from datetime import datetime, timedelta, timezone

import pytest

from control_plane.controller.scraper import Scraper
from control_plane.db import make_engine, make_sessionmaker
from control_plane.demo.backends import serve
from control_plane.demo.metrics import DemoMetrics
from control_plane.services import scrapes


@pytest.fixture
def sessions(db_url):
    engine = make_engine(db_url)
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture
def server():
    servers = []

    def start(fmt: str, used: float):
        s = serve("openai", "127.0.0.1", 0, f"m-{fmt}")
        s.metrics = DemoMetrics(fmt, s.name, used=used)
        servers.append(s)
        return s
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _scrape_until_stored(scraper, sessions, backend_ids, timeout=10.0):
    """Kick until every backend has a stored outcome (scrapes finish in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        scraper.kick(sessions)
        with sessions() as s:
            done = {e["backend_id"] for e in scrapes.latest(s, 60) if e["error"] or
                    e["scraped_at"]}
        if set(backend_ids) <= done:
            return
        assert time.monotonic() < deadline, f"scraped {done}, wanted {backend_ids}"
        time.sleep(0.05)


@pytest.mark.parametrize("body, field", [
    ({"metrics_url": "http://127.0.0.1:9/metrics"}, "metrics_format"),
    ({"metrics_format": "vllm"}, "metrics_url"),
    ({"metrics_url": "http://127.0.0.1:9/metrics", "metrics_format": "tgi"},
     "metrics_format"),
    ({"metrics_url": "ftp://h/metrics", "metrics_format": "vllm"}, "metrics_url"),
])
def test_metrics_fields_are_validated(api, make, body, field):
    model = make("model")
    r = api("post", "/backends", json={"name": "b", "model_id": model["id"],
                                       "url": "http://127.0.0.1:9", "protocol": "openai",
                                       **body})
    assert r.status_code == 422, r.get_json()
    assert field in r.get_json()["error"]["fields"]


def test_metrics_fields_are_set_and_cleared_together(api, make):
    b = make("backend", metrics_url="http://127.0.0.1:9/metrics/", metrics_format="triton")
    assert (b["metrics_url"], b["metrics_format"]) == ("http://127.0.0.1:9/metrics", "triton")
    r = api("patch", f"/backends/{b['id']}", json={"metrics_url": None})
    assert r.status_code == 422 and "metrics_url" in r.get_json()["error"]["fields"]
    r = api("patch", f"/backends/{b['id']}", json={"metrics_url": None,
                                                   "metrics_format": None})
    assert r.status_code == 200 and r.get_json()["metrics_url"] is None


def test_scraper_stores_figures_and_failures_age_into_staleness(api, make, sessions, server):
    v, t = server("vllm", 0.3), server("triton", 0.6)
    bv = make("backend", name="bv", metrics_url=v.url + "/metrics", metrics_format="vllm")
    bt = make("backend", name="bt", metrics_url=t.url + "/metrics", metrics_format="triton")
    make("backend", name="plain")                       # not scraped at all
    scraper = Scraper()
    try:
        _scrape_until_stored(scraper, sessions, [bv["id"], bt["id"]])
        with sessions() as s:
            assert scrapes.fresh_free(s, 60) == pytest.approx({"bv": 0.7, "bt": 0.4})

        # The vLLM server's /metrics fails: the error shows, the last figure stays...
        v.metrics.update({"fail": True})
        deadline = time.monotonic() + 10
        while True:
            scraper.kick(sessions)
            with sessions() as s:
                latest = {e["backend"]: e for e in scrapes.latest(s, 60)}
            if latest["bv"]["error"]:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert latest["bv"]["error"] == "HTTPError: HTTP 500"
        assert latest["bv"]["free_fraction"] == pytest.approx(0.7)
        assert set(latest) == {"bv", "bt"}
        # ...until it is older than stale_after; then it is no input to the weights.
        later = datetime.now(timezone.utc) + timedelta(seconds=61)
        with sessions() as s:
            assert scrapes.fresh_free(s, 60, now=later) == {}
            assert set(scrapes.fresh_free(s, 60)) == {"bv", "bt"}
    finally:
        scraper.close()

    r = api("get", "/telemetry/scrapes")
    assert r.status_code == 200
    shown = {e["backend"]: e for e in r.get_json()["scrapes"]}
    assert shown["bt"]["values"]["memory_used_bytes"] == pytest.approx(0.6 * 80 * 1024 ** 3)
    assert shown["bt"]["stale"] is False
    h = api("get", f"/telemetry/scrapes/{bt['id']}/history?seconds=60").get_json()
    assert h["samples"] and h["samples"][-1]["free_fraction"] == pytest.approx(0.4)
    assert api("get", "/telemetry/scrapes/999999/history").status_code == 404


def test_a_hanging_endpoint_is_not_scraped_twice_at_once(make, sessions):
    # A listener that accepts and never answers: the scrape waits for its read timeout.
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(8)
    url = f"http://127.0.0.1:{hang.getsockname()[1]}/metrics"
    make("backend", name="hangs", metrics_url=url, metrics_format="dcgm")
    scraper = Scraper()
    try:
        assert scraper.kick(sessions) == 1
        assert scraper.kick(sessions) == 0        # still in flight: not started again
    finally:
        scraper.close()
        hang.close()


def test_affinity_report_shows_who_may_serve(api, make):
    model = make("model", name="cv", gpu_class="A100")
    make("backend", name="declared", model_id=model["id"], gpu_class="A100")
    make("backend", name="unknown", model_id=model["id"])
    r = api("get", "/telemetry/affinity")
    assert r.get_json() == {"models": [{"model": "cv", "gpu_class": "A100", "backends": [
        {"backend": "declared", "declared": "A100", "reported": [], "eligible": True},
        {"backend": "unknown", "declared": None, "reported": [], "eligible": False}]}]}
