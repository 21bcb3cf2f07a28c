"""Reading what a test gateway reports: its /metrics (parsed by prometheus_client's
parser) and its JSON access log. Shared by the gateway test modules (a plain module:
importing conftest is fragile)."""
from __future__ import annotations

import json
import time

import requests
from prometheus_client.parser import text_string_to_metric_families


def scrape(gw) -> dict:
    """name -> list of samples, parsed by prometheus_client's parser."""
    r = requests.get(gw.internal_url + "/metrics", timeout=5,
                     headers={"Authorization": f"Bearer {gw.cfg.token}"})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def value(samples: dict, name: str, **labels) -> float:
    found = [s.value for s in samples.get(name, [])
             if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def access_lines(gw, expected: int, timeout: float = 10.0) -> list[dict]:
    """The JSON lines of logs/access.log once `expected` of them are there (the log
    is buffered: flush=1s); on a module's shared gateway, those written since the
    test's turn began (SharedGateway.access_offset)."""
    path = gw.prefix / "logs" / "access.log"
    offset = getattr(gw, "access_offset", 0)
    deadline = time.monotonic() + timeout
    while True:
        text = ""
        if path.exists():
            with open(path, "rb") as f:
                f.seek(offset)
                text = f.read().decode()
        lines = [json.loads(line) for line in text.splitlines()]
        if len(lines) >= expected or time.monotonic() > deadline:
            return lines
        time.sleep(0.2)
