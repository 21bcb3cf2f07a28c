"""The agent loop: read the source, attach the GPU → backend mapping, POST the report.

Config file (JSON, ``--config``)::

    {"host": "gpu-1",                       # default: this machine's host name
     "backends": {"0": ["llama-a"], "1": ["llama-b", "llama-b-lp"]}}

A control plane that is down or answers an error is logged and retried at the next
interval (with the interval doubling up to 30 s while it stays down): the agent
never exits because the control plane restarted.
"""
from __future__ import annotations

import json
import logging
import socket
import threading
from pathlib import Path
from typing import Any

import requests

from control_plane.agent.sources import Source, SourceError

log = logging.getLogger("sluice.agent")

MAX_BACKOFF = 30.0


class ConfigError(ValueError):
    pass


def load_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {"host": socket.gethostname(), "backends": {}}
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read agent config {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: must be a JSON object")
    mapping = doc.get("backends", {})
    if not isinstance(mapping, dict) or not all(
            str(k).isdigit() and isinstance(v, list) and all(isinstance(n, str) for n in v)
            for k, v in mapping.items()):
        raise ConfigError(f'{path}: "backends" must map GPU indexes ("0") to lists of '
                          "backend names")
    host = doc.get("host") or socket.gethostname()
    return {"host": str(host), "backends": {int(k): v for k, v in mapping.items()}}


class Agent:
    def __init__(self, source: Source, control_plane: str, token: str,
                 config: dict[str, Any], interval: float = 5.0, timeout: float = 5.0):
        self.source = source
        self.url = control_plane.rstrip("/") + "/api/v1/telemetry"
        self.config = config
        self.interval = interval
        self.timeout = timeout
        self.stopping = threading.Event()
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"
        self.reports_sent = 0

    def report(self) -> dict[str, Any]:
        gpus = self.source.read()
        for g in gpus:
            g.setdefault("backends", self.config["backends"].get(int(g["index"]), []))
        return {"host": self.config["host"], "source": self.source.name, "gpus": gpus}

    def send_once(self) -> bool:
        """Read and send one report; True when the control plane took it."""
        try:
            body = self.report()
        except SourceError as exc:
            log.error("%s", exc)
            return False
        try:
            resp = self.http.post(self.url, json=body, timeout=self.timeout)
        except requests.RequestException as exc:
            log.warning("control plane unreachable at %s: %s", self.url, exc)
            return False
        if resp.status_code != 200:
            log.warning("control plane refused the report: HTTP %d %s",
                        resp.status_code, resp.text[:300])
            return False
        unknown = resp.json().get("unknown_backends") or []
        if unknown:
            log.warning("the control plane knows no backend named %s; check the agent "
                        "config's mapping", ", ".join(unknown))
        self.reports_sent += 1
        return True

    def run(self) -> None:
        log.info("agent: source=%s host=%s reporting to %s every %.1fs", self.source.name,
                 self.config["host"], self.url, self.interval)
        delay = self.interval
        while not self.stopping.is_set():
            ok = self.send_once()
            delay = self.interval if ok else min(max(delay, self.interval) * 2, MAX_BACKOFF)
            self.stopping.wait(self.interval if ok else delay)
        self.source.close()
        self.http.close()
