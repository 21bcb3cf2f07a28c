"""Push a snapshot to one gateway's internal listener (docs/contracts.md)."""
from __future__ import annotations

from typing import Any

import requests


class PushError(Exception):
    """The gateway did not take the snapshot; the message says why, for last_error."""


def _gateway_message(resp: requests.Response) -> str:
    try:
        body = resp.json()
        return str(body["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return resp.text[:200].strip() or resp.reason or ""


def push(gateway_internal_url: str, token: str | None, snapshot: dict[str, Any],
         timeout: float, session: requests.Session | None = None) -> int:
    """POST the snapshot; return the version the gateway now serves.

    Raises PushError on a network error, a non-200 answer or an unreadable one.
    """
    url = gateway_internal_url.rstrip("/") + "/internal/snapshot"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = session or requests
    try:
        resp = http.post(url, json=snapshot, headers=headers, timeout=timeout)
    except requests.RequestException as exc:
        raise PushError(f"POST {url}: {type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise PushError(f"POST {url}: HTTP {resp.status_code}: {_gateway_message(resp)}")
    try:
        version = resp.json()["version"]
    except (ValueError, KeyError, TypeError):
        raise PushError(f"POST {url}: answer has no version: {resp.text[:200]!r}") from None
    if not isinstance(version, int) or isinstance(version, bool):
        raise PushError(f"POST {url}: version {version!r} is not an integer")
    return version
