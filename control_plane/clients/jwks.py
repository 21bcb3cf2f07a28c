"""Fetch a JWT issuer's JWKS from its `jwks_uri`: a JWKS document, or an OpenID
Connect discovery document (a URL ending in /.well-known/openid-configuration) whose
own `jwks_uri` is then fetched. Used by the controller only (controller/jwks_loop.py);
the gateway's hot path never fetches. services/jwt_keys.py parses the keys.

Redirects are not followed, answers over MAX_BYTES are refused, and a discovered
`jwks_uri` must be https:// like the configured one (unless http is allowed).
"""
from __future__ import annotations

import json
from typing import Any

import requests

DISCOVERY_SUFFIX = "/.well-known/openid-configuration"
MAX_BYTES = 256 * 1024
TIMEOUT = 5.0


class JwksError(Exception):
    """A fetch that gave no usable key set; the message says why."""


def is_discovery(url: str) -> bool:
    return url.rstrip("/").endswith(DISCOVERY_SUFFIX)


def fetch_jwks(http: requests.Session, url: str, *, allow_http: bool) -> dict[str, Any]:
    """The JWKS at `url` ({"keys": [...]}, unchecked keys); JwksError else."""
    if is_discovery(url):
        doc = _get_json(http, url)
        jwks_uri = doc.get("jwks_uri") if isinstance(doc, dict) else None
        if not isinstance(jwks_uri, str):
            raise JwksError(f"{url}: the discovery document names no jwks_uri")
        if not (jwks_uri.startswith("https://")
                or allow_http and jwks_uri.startswith("http://")):
            raise JwksError(f"{url}: its jwks_uri {jwks_uri[:200]!r} is not https://")
        url = jwks_uri
    doc = _get_json(http, url)
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise JwksError(f"{url}: not a JWKS (an object with a list of keys)")
    return doc


def _get_json(http: requests.Session, url: str) -> Any:
    try:
        r = http.get(url, timeout=TIMEOUT, allow_redirects=False, stream=True,
                     headers={"Accept": "application/json"})
        body = b""
        for chunk in r.iter_content(65536):   # errors wrapped as requests' own
            body += chunk
            if len(body) > MAX_BYTES:
                break
        r.close()
    except requests.RequestException as exc:
        raise JwksError(f"{url}: {exc.__class__.__name__}: {exc}"[:500]) from None
    if r.status_code != 200:
        raise JwksError(f"{url}: HTTP {r.status_code}")
    if len(body) > MAX_BYTES:
        raise JwksError(f"{url}: the answer is over {MAX_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError:
        raise JwksError(f"{url}: the answer is not JSON") from None
