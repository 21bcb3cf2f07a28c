"""Scaling recommendations (services/scaling.py) out of the controller: every one
into the sluice_scaling_recommendation gauge, and those that changed since the last
round POSTed to SLUICE_SCALING_WEBHOOK (best effort, 2 s timeout; the URL may carry
a token, so it is never logged)."""
from __future__ import annotations

import logging
from typing import Any

import requests

from control_plane.controller import cp_metrics

log = logging.getLogger("sluice.controller.scaling")

TIMEOUT = 2.0


class ScalingWebhook:
    def __init__(self) -> None:
        self.http = requests.Session()
        self._actions: dict[str, str] = {}   # model -> the last action announced

    def publish(self, url: str | None, recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Export `recs`; POST the changed ones to `url` when set. Returns them."""
        cp_metrics.SCALING.clear()
        for r in recs:
            cp_metrics.SCALING.labels(r["model"]).set(cp_metrics.SCALING_VALUES[r["action"]])
        changed = [r for r in recs if self._actions.get(r["model"]) != r["action"]]
        self._actions = {r["model"]: r["action"] for r in recs}
        if changed and url:
            try:
                self.http.post(url, timeout=TIMEOUT,
                               json={"source": "sluice", "recommendations": changed})
            except requests.RequestException as exc:
                log.warning("scaling webhook failed: %s", type(exc).__name__)
        return changed

    def close(self) -> None:
        self.http.close()
