"""Fetch a JWT issuer's public keys from its `jwks_uri`: a JWKS document, or an OpenID
Connect discovery document (a URL ending in /.well-known/openid-configuration) whose
own `jwks_uri` is then fetched. Used by the controller only (controller/jwks_loop.py);
the gateway's hot path never fetches.

Redirects are not followed, answers over MAX_BYTES are refused, and a discovered
`jwks_uri` must be https:// like the configured one (unless http is allowed).
"""
from __future__ import annotations

import json
from typing import Any

import requests

from control_plane.services import jwt_keys

DISCOVERY_SUFFIX = "/.well-known/openid-configuration"
MAX_BYTES = 256 * 1024
TIMEOUT = 5.0


class JwksError(Exception):
    """A fetch that gave no usable key set; the message says why."""


def is_discovery(url: str) -> bool:
    return url.rstrip("/").endswith(DISCOVERY_SUFFIX)


def fetch_keys(http: requests.Session, url: str, *, allow_http: bool) -> list[dict[str, Any]]:
    """The keys at `url` as [{kid, alg, pem}] (services/jwt_keys.py); JwksError else."""
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
    try:
        return jwt_keys.from_jwks(doc)
    except jwt_keys.KeyError_ as exc:
        raise JwksError(f"{url}: the JWKS {exc}") from None


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
