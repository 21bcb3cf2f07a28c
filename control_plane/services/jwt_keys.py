"""Public keys for JWT verification: PEM or JWK(S) in, [{kid, alg, pem}] out.

The gateway verifies with luaossl, which reads PEM; normalising here means the hot
path sees one shape. Only RS256 (RSA >= 2048 bits) and ES256 (P-256) are accepted;
private keys are refused so that signing material never enters the control plane.
"""
from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

MAX_KEYS = 32
MIN_RSA_BITS = 2048


class KeyError_(ValueError):
    """A key that cannot be used; the message completes "<field> ..."."""


def _entry(key: Any, kid: str | None) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise KeyError_(f"holds an RSA key of {key.key_size} bits; at least "
                            f"{MIN_RSA_BITS} are required")
        alg = "RS256"
    elif isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise KeyError_(f"holds an EC key on {key.curve.name}; ES256 needs P-256")
        alg = "ES256"
    else:
        raise KeyError_("must hold RSA (RS256) or EC P-256 (ES256) public keys")
    pem = key.public_bytes(serialization.Encoding.PEM,
                           serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")
    return {"kid": kid, "alg": alg, "pem": pem}


def from_pem(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, str) or len(value) > 16384:
        raise KeyError_("must be a PEM public key (BEGIN PUBLIC KEY)")
    if "PRIVATE KEY" in value:
        raise KeyError_("must be a public key, not a private one")
    try:
        key = serialization.load_pem_public_key(value.encode("ascii"))
    except (ValueError, UnicodeEncodeError, TypeError):
        raise KeyError_("must be a PEM public key (BEGIN PUBLIC KEY)") from None
    return [_entry(key, None)]


def from_jwks(value: Any) -> list[dict[str, Any]]:
    """A JWKS ({"keys": [...]}) or a single JWK."""
    jwks = value.get("keys") if isinstance(value, dict) and "keys" in value else [value]
    if not isinstance(jwks, list) or not 1 <= len(jwks) <= MAX_KEYS:
        raise KeyError_(f"must be a JWK or a JWKS with 1 to {MAX_KEYS} keys")
    out = []
    for i, jwk in enumerate(jwks):
        if not isinstance(jwk, dict):
            raise KeyError_(f"key {i} must be a JSON object")
        if "d" in jwk:
            raise KeyError_(f"key {i} is a private key; give only the public part")
        kid = jwk.get("kid")
        if kid is not None and (not isinstance(kid, str) or not 1 <= len(kid) <= 256):
            raise KeyError_(f"key {i}: kid must be a string of 1-256 characters")
        kty = jwk.get("kty")
        try:
            if kty == "RSA":
                key = RSAAlgorithm.from_jwk(json.dumps(jwk))
            elif kty == "EC":
                key = ECAlgorithm.from_jwk(json.dumps(jwk))
            else:
                raise KeyError_(f"key {i}: kty must be RSA or EC")
        except KeyError_:
            raise
        except Exception:  # pyjwt raises several types for malformed JWKs
            raise KeyError_(f"key {i} is not a valid {kty} JWK") from None
        out.append(_entry(key, kid))
    return out
