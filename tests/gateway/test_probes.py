"""/healthz and /readyz on the public listener, for orchestrators: no auth, no
secrets, ready only with a snapshot (pushed, or the last-known-good file)."""
from __future__ import annotations

import pytest
import requests

from gateway_readings import access_lines, scrape


@pytest.fixture
def served(own_gateway, default_snapshot):
    """A gateway of its own serving `default_snapshot`: these tests count metrics and
    access-log lines from a fresh start."""
    assert own_gateway.push(default_snapshot).status_code == 200
    return own_gateway


def test_fresh_gateway_is_alive_but_not_ready(own_gateway, helpers):
    r = requests.get(own_gateway.url + "/healthz", timeout=5)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = requests.get(own_gateway.url + "/readyz", timeout=5)
    assert "no snapshot" in helpers.assert_error(r, 503, "not_ready")["message"]


def test_ready_once_a_snapshot_is_pushed_and_after_a_restart_on_lkg(
        gateway_factory, default_snapshot):
    gw = gateway_factory()
    assert requests.get(gw.url + "/readyz", timeout=5).status_code == 503
    assert gw.push(dict(default_snapshot, version=4)).status_code == 200
    r = requests.get(gw.url + "/readyz", timeout=5)
    assert r.status_code == 200 and r.json() == {"status": "ready"}
    gw.stop()
    gw.start()                           # same prefix: its last-known-good file
    assert gw.snapshot_status() | {"loaded_at": 0} == {"version": 4, "source": "lkg",
                                                       "loaded_at": 0}
    assert requests.get(gw.url + "/readyz", timeout=5).status_code == 200


def test_probes_answer_no_secrets_and_are_neither_logged_nor_counted(served, helpers):
    for path in ("/healthz", "/readyz"):
        r = requests.get(served.url + path, timeout=5)
        assert r.status_code == 200
        assert served.cfg.token not in r.text and "version" not in r.text
        helpers.assert_error(requests.post(served.url + path, timeout=5), 405,
                             "method_not_allowed")
    assert helpers.chat(served).status_code == 200   # one real request, for contrast
    lines = access_lines(served, 1)
    assert [line["path"] for line in lines] == ["/v1/chat/completions"]
    paths = {s.labels.get("path") for s in scrape(served).get("sluice_requests_total", [])}
    assert not paths & {"/healthz", "/readyz"}
