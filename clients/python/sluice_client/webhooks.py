"""Check the signature of a Sluice webhook (a finished async job POSTed to your URL).

    from sluice_client import verify_signature
    if not verify_signature(secret, request.headers["X-Sluice-Signature"], request.body):
        return 400

The header is `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, keyed by the
consumer's webhook secret. Check the raw body, before any JSON parsing. A delivery may
arrive more than once (a retry after a lost answer): deduplicate by the job's id.
"""
from __future__ import annotations

import hashlib
import hmac
import time
from typing import Optional, Union


def verify_signature(secret: str, header: Optional[str], body: Union[bytes, str],
                     tolerance: float = 300.0, now: Optional[float] = None) -> bool:
    """True when `header` signs `body` with `secret` and its time is within `tolerance`
    seconds of now (older or future-dated signatures are refused: replays). Any
    malformed header is False, never an exception."""
    if not header or not secret:
        return False
    if isinstance(body, str):
        body = body.encode("utf-8")
    t: Optional[int] = None
    signatures = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            return False
        if key == "t":
            try:
                t = int(value)
            except ValueError:
                return False
        elif key == "v1":
            signatures.append(value)
    if t is None or not signatures:
        return False
    current = time.time() if now is None else now
    if abs(current - t) > tolerance:
        return False
    expected = hmac.new(secret.encode("utf-8"), f"{t}.".encode() + body,
                        hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, sig) for sig in signatures)
