"""The TLS lines of the gateway's nginx.conf (control_plane/runtime/nginx_conf.py renders
them): the public server's listen and certificate lines, the internal server's TLS.
The public server's protocols, ciphers and session settings are fixed lines of
nginx/nginx.conf.tmpl; only what differs per gateway is made here."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from control_plane.runtime.gateway_config import GatewayConfig


# A path that nginx reads as one literal argument: quoted, and with no "$" (since
# nginx 1.15.9 ssl_certificate takes variables).
_NGINX_PATH_BAD = set('"\\$;{}') | {chr(c) for c in range(32)} | {chr(127)}


def nginx_path(path: Path, what: str) -> str:
    text = str(Path(path).resolve())
    if set(text) & _NGINX_PATH_BAD:
        raise ValueError(f"{what} path {text!r} has a character nginx would not read "
                         'literally (quote, backslash, $, ;, braces or a control character)')
    if not os.access(text, os.R_OK):
        raise ValueError(f"{what} {text} does not exist or is not readable")
    return f'"{text}"'


def h1_socket(cfg: GatewayConfig) -> Path:
    """The unix socket where the public server also speaks HTTP/1.1 to itself (the
    HTTP/2 requests relayed through location @sluice_h1_loop). In the prefix's tmp/
    while the path fits a socket's 107 bytes, else in /tmp under the prefix's hash."""
    path = Path(cfg.prefix).resolve() / "tmp" / "h1.sock"
    if len(str(path)) > 100:
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
        path = Path("/tmp") / f"sluice-h1-{digest}.sock"
    return path


def public_listen(cfg: GatewayConfig) -> tuple[str, str]:
    """The public server's listen lines and its ssl_certificate lines."""
    lines = []
    if cfg.plain:
        lines.append(f"listen {cfg.listen_host}:{int(cfg.port)};")
    if cfg.tls_port is None:
        if not cfg.plain:
            raise ValueError("plain=False needs tls_port: the gateway would have no "
                             "public listener")
        if cfg.tls_cert or cfg.tls_key:
            raise ValueError("tls_cert and tls_key need tls_port")
        return "\n        ".join(lines), "# no HTTPS listener"
    if not (cfg.tls_cert and cfg.tls_key):
        raise ValueError("tls_port needs both tls_cert and tls_key")
    lines.append(f"listen {cfg.listen_host}:{int(cfg.tls_port)} ssl http2;")
    # HTTP/1.1 on a unix socket, for the HTTP/2 requests whose answers the relay
    # reads first (lua/sluice/relay.lua): a subrequest cannot serve HTTP/2
    lines.append(f"listen unix:{h1_socket(cfg)};")
    certificate = (f"ssl_certificate {nginx_path(cfg.tls_cert, 'tls_cert')};\n"
                   f"        ssl_certificate_key {nginx_path(cfg.tls_key, 'tls_key')};")
    return "\n        ".join(lines), certificate


def internal_tls(cfg: GatewayConfig) -> tuple[str, str]:
    """The internal listener's `listen` flag and TLS directives ("" without TLS)."""
    if not cfg.internal_tls_cert and not cfg.internal_tls_key:
        return "", "# no TLS on the internal listener (SLUICE_INTERNAL_TLS_CERT/_KEY)"
    if not (cfg.internal_tls_cert and cfg.internal_tls_key):
        raise ValueError("internal TLS needs both a certificate and a key")
    paths = []
    for path in (cfg.internal_tls_cert, cfg.internal_tls_key):
        resolved = Path(path).resolve()
        if not resolved.is_file():
            raise ValueError(f"internal TLS file {resolved} does not exist")
        if any(c in str(resolved) for c in ' ;{}"\'\\'):
            raise ValueError(f"internal TLS file {resolved}: unsafe characters in the path")
        paths.append(resolved)
    return " ssl", "\n        ".join((
        f"ssl_certificate {paths[0]};",
        f"ssl_certificate_key {paths[1]};",
        "ssl_protocols TLSv1.2 TLSv1.3;",
        "ssl_prefer_server_ciphers off;",
        "ssl_session_tickets off;"))
