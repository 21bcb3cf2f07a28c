"""TLS to backends from the control plane's side: PEM checks for the admin API and
one way to speak HTTPS to a backend with its own settings (verify, CA, server name,
client certificate), used by the health probes and the Prometheus scraper alike.

The gateway gets the same settings in its snapshot (services/snapshot.py); this
module is what the controller's own requests use, so a backend that the gateway
trusts is one the probes trust, and no other.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import ssl
import tempfile
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from requests.adapters import HTTPAdapter

# Debian's store (ca-certificates): what "the system store" means for the gateway
# (proxy_ssl_trusted_certificate) and for the controller alike.
SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"
MAX_PEM = 64 * 1024
_KEY_TYPES = (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey,
              ed448.Ed448PrivateKey)


# --- PEM checks (admin API) -------------------------------------------------

def certificates(value: Any) -> str:
    """One or more PEM certificates (a CA bundle or a chain); returns them as given,
    with a final newline. Raises ValueError saying what is wrong, never the PEM."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_PEM:
        raise ValueError(f"must be PEM text of at most {MAX_PEM} characters")
    if "PRIVATE KEY" in value:
        raise ValueError("must hold certificates only, not a private key")
    try:
        certs = x509.load_pem_x509_certificates(value.encode())
    except ValueError:
        raise ValueError("is not PEM: expected -----BEGIN CERTIFICATE----- blocks "
                         "that parse as X.509") from None
    if not certs:
        raise ValueError("holds no certificate")
    return value.strip() + "\n"


def private_key(value: Any) -> str:
    """One unencrypted PEM private key (RSA, EC, Ed25519, Ed448)."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_PEM:
        raise ValueError(f"must be PEM text of at most {MAX_PEM} characters")
    try:
        key = serialization.load_pem_private_key(value.encode(), password=None)
    except TypeError:
        raise ValueError("is encrypted: the gateway needs the key without a "
                         "passphrase") from None
    except (ValueError, Exception):   # unsupported algorithms raise their own types
        raise ValueError("is not a PEM private key") from None
    if not isinstance(key, _KEY_TYPES):
        raise ValueError("is not an RSA, EC, Ed25519 or Ed448 key")
    return value.strip() + "\n"


def key_matches(cert_pem: str, key_pem: str) -> bool:
    """Is `key_pem` the private key of the first certificate of `cert_pem`?"""
    cert = x509.load_pem_x509_certificates(cert_pem.encode())[0]
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return (cert.public_key().public_bytes(der, spki)
            == key.public_key().public_bytes(der, spki))



def ip_host(url: str) -> str | None:
    """The IP literal an https:// URL is addressed by, else None. The gateway (stock
    nginx: X509_check_host on proxy_ssl_name) matches a certificate's DNS names only,
    never its IP SANs, so such a backend needs a DNS name to verify under."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        return None
    try:
        return str(ipaddress.ip_address(parts.hostname))
    except ValueError:
        return None

# --- one backend's settings ---------------------------------------------------

@dataclass(frozen=True)
class BackendTLS:
    """What the gateway and the controller use to reach one https:// backend."""

    server_name: str
    verify: bool = True
    ca: str | None = None            # PEM; None: the system store
    client_cert: str | None = None   # PEM chain; secret (with the key)
    client_key: str | None = None

    @classmethod
    def from_snapshot(cls, entry: dict[str, Any]) -> BackendTLS | None:
        """From a backend of the snapshot (its "tls" object); None for http://."""
        tls = entry.get("tls")
        if entry.get("scheme") != "https" or not isinstance(tls, dict):
            return None
        return cls(server_name=tls["server_name"], verify=tls.get("verify", True),
                   ca=tls.get("ca"), client_cert=tls.get("client_cert"),
                   client_key=tls.get("client_key"))

    @classmethod
    def for_url(cls, url: str, *, verify: bool = True, ca: str | None = None,
                server_name: str | None = None, client_cert: str | None = None,
                client_key: str | None = None) -> BackendTLS | None:
        """From a backend's columns, for `url` (its own or its metrics_url); None
        for http://. The server name defaults to the URL's host."""
        parts = urlsplit(url)
        if parts.scheme != "https":
            return None
        return cls(server_name=server_name or parts.hostname or "", verify=verify,
                   ca=ca if verify else None, client_cert=client_cert,
                   client_key=client_key)

    def __repr__(self) -> str:   # never the key, not even in a traceback
        return (f"BackendTLS(server_name={self.server_name!r}, verify={self.verify}, "
                f"ca={'custom' if self.ca else 'system'}, "
                f"client_cert={'set' if self.client_cert else 'none'})")

    def key(self) -> str:
        """Identifies these settings (for caching); a digest, so secrets stay inside."""
        h = hashlib.sha256()
        for part in (self.server_name, str(self.verify), self.ca or "",
                     self.client_cert or "", self.client_key or ""):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def ssl_context(self) -> ssl.SSLContext:
        """A client context: the CA (or the system store), hostname checks, and the
        client certificate when set. TLS 1.2 at least."""
        if self.verify:
            ctx = ssl.create_default_context(cafile=None if self.ca else SYSTEM_CA_FILE,
                                             cadata=self.ca)
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.client_cert and self.client_key:
            _load_client_pair(ctx, self.client_cert, self.client_key)
        return ctx


def trust_id(verify: bool, ca: str | None) -> str:
    """The trust set a backend needs, as the gateway names its TLS locations:
    "system" (verify against the system store), "noverify", or "ca-<digest of the
    CA PEM>" (one location per distinct CA; runtime/gateway.py renders them)."""
    if not verify:
        return "noverify"
    if not ca:
        return "system"
    return "ca-" + hashlib.sha256(ca.encode()).hexdigest()[:16]


def _load_client_pair(ctx: ssl.SSLContext, cert_pem: str, key_pem: str) -> None:
    """ssl wants files: a private folder (0700), files 0600, gone once loaded."""
    with tempfile.TemporaryDirectory(prefix="sluice-tls-") as folder:
        paths = []
        for name, text in (("cert.pem", cert_pem), ("key.pem", key_pem)):
            path = os.path.join(folder, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            paths.append(path)
        ctx.load_cert_chain(paths[0], paths[1])


class _ContextAdapter(HTTPAdapter):
    """requests over one SSLContext and server name, whatever address the URL has
    (the snapshot carries resolved addresses)."""

    def __init__(self, tls: BackendTLS):
        self._ctx = tls.ssl_context()
        self._server_name = tls.server_name
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._ctx
        kwargs["server_hostname"] = self._server_name
        if self._ctx.check_hostname:
            kwargs["assert_hostname"] = self._server_name
        super().init_poolmanager(*args, **kwargs)

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        """The context decides trust; requests must not add its own CA bundle."""


class BackendClients:
    """One requests.Session per distinct backend TLS setting, kept for keep-alive.
    Thread-safe: the health prober and the scraper call it from their pools."""

    def __init__(self) -> None:
        self._plain = requests.Session()
        self._sessions: dict[str, requests.Session] = {}
        self._lock = threading.Lock()

    def session(self, tls: BackendTLS | None) -> requests.Session:
        if tls is None:
            return self._plain
        key = tls.key()
        with self._lock:
            s = self._sessions.get(key)
            if s is None:
                s = requests.Session()
                s.mount("https://", _ContextAdapter(tls))
                self._sessions[key] = s
            return s

    def get(self, url: str, tls: BackendTLS | None, **kwargs: Any) -> requests.Response:
        """GET `url`; over `tls` when it is an https:// URL."""
        if tls is not None:
            kwargs["verify"] = tls.verify
        return self.session(tls).get(url, **kwargs)

    def close(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for s in sessions + [self._plain]:
            s.close()
