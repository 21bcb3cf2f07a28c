"""The gateway's nginx.conf: `render`, which fills nginx/nginx.conf.tmpl's
{{placeholders}} from a `GatewayConfig` (runtime/gateway_config.py: what differs
between two gateways on one machine), and `render_all`, which also fills the
templates of the files it includes (INCLUDED: nginx/delivery.conf.tmpl) the same way.

Pure text: nothing here starts nginx or writes a file (runtime/gateway.py does);
the TLS lines come from runtime/nginx_tls.py.
"""
from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

from control_plane.clients.backend_tls import SYSTEM_CA_FILE
from control_plane.runtime import nginx_tls
from control_plane.runtime.gateway_config import REPO, GatewayConfig
from control_plane.settings import parse_redis_url

TEMPLATE = REPO / "nginx" / "nginx.conf.tmpl"
# conf/<name> that nginx.conf includes -> its template (the same placeholders)
INCLUDED = {"delivery.conf": REPO / "nginx" / "delivery.conf.tmpl"}

# Workers drop to this user when the master runs as root (this machine, CI).
WORKER_USER = "nobody"
WORKER_GROUP = "nogroup"

# The token is written into a Lua string literal: keep it to characters that need
# no escaping there (token_urlsafe and hex tokens qualify).
_TOKEN_RE = re.compile(r"^[A-Za-z0-9._~+/=-]{16,256}$")
_SIZE_RE = re.compile(r"^[0-9]+[kKmMgG]?$")
_PLACEHOLDER_RE = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


def _is_root() -> bool:
    return os.geteuid() == 0


def _lua_str(value: str) -> str:
    """A Lua string literal for any text: bytes outside a safe set become \\ddd."""
    safe = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:/@+")
    return '"' + "".join(chr(b) if b in safe else f"\\{b:03d}"
                         for b in value.encode()) + '"'


def _nameservers(resolv_conf: Path = Path("/etc/resolv.conf")) -> list[str]:
    out = []
    for line in resolv_conf.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            addr = parts[1].split("%")[0]
            out.append(f"[{addr}]" if ":" in addr else addr)
    return out


def _redis(cfg: GatewayConfig) -> tuple[str, str]:
    """The Lua table of Redis options for phases.init ("nil" without Redis) and the
    resolver directive nginx needs when the Redis host is a name (cosockets do not
    read /etc/hosts; "localhost" is taken as 127.0.0.1)."""
    if not cfg.redis_url:
        return "nil", "# no Redis: no resolver needed"
    if cfg.redis_failure not in ("open", "closed"):
        raise ValueError("redis_failure must be open or closed")
    url = parse_redis_url(cfg.redis_url)
    host, resolver = url.host, "# Redis is addressed by IP: no resolver needed"
    if host == "localhost":
        host = "127.0.0.1"
    else:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            servers = _nameservers()
            if not servers:
                raise ValueError(f"Redis host {host!r} is a name, and /etc/resolv.conf "
                                 "names no nameserver to resolve it") from None
            resolver = f"resolver {' '.join(servers)} valid=30s;"
    fields = [f"host = {_lua_str(host)}", f"port = {int(url.port)}", f"db = {int(url.db)}",
              f"failure = {_lua_str(cfg.redis_failure)}"]
    if url.username:
        fields.append(f"user = {_lua_str(url.username)}")
    if url.password:
        fields.append(f"password = {_lua_str(url.password)}")
    return "{ " + ", ".join(fields) + " }", resolver


_JOBS_URL_RE = re.compile(r"^https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?$")


def _jobs_proxy(url: str | None) -> str:
    """The jobs location's proxy_pass (scheme, host and port only: the URI passes
    as it is), or a 503 when no jobs service is configured."""
    if not url:
        return "return 503;   # no jobs service configured (SLUICE_JOBS_URL)"
    url = url.rstrip("/")
    if not _JOBS_URL_RE.match(url):
        raise ValueError("jobs_url must be http(s)://host[:port], without a path")
    return f"proxy_pass {url};"


def render(cfg: GatewayConfig) -> str:
    """The nginx.conf for `cfg`: nginx/nginx.conf.tmpl with its {{placeholders}} filled."""
    return render_all(cfg)["nginx.conf"]


def render_all(cfg: GatewayConfig) -> dict[str, str]:
    """{file name under conf/: text} for `cfg`: nginx.conf and the files it includes."""
    if not _TOKEN_RE.match(cfg.token):
        raise ValueError("token must be 16-256 characters of [A-Za-z0-9._~+/=-]")
    if not _SIZE_RE.match(cfg.client_max_body_size):
        raise ValueError(f"client_max_body_size {cfg.client_max_body_size!r} is not an "
                         "nginx size such as 1m or 512k")
    if not _SIZE_RE.match(cfg.max_upload_size):
        raise ValueError(f"max_upload_size {cfg.max_upload_size!r} is not an "
                         "nginx size such as 100m")
    if cfg.workers < 1:
        raise ValueError("workers must be >= 1")
    ports = [int(cfg.internal_port)] + ([int(cfg.port)] if cfg.plain else [])
    if cfg.tls_port is not None:
        ports.append(int(cfg.tls_port))
    if len(set(ports)) != len(ports):
        # nginx would quietly merge both servers on one socket, public one first
        raise ValueError("port, tls_port and internal_port must differ")
    redis, resolver = _redis(cfg)
    public_listen, tls_certificate = nginx_tls.public_listen(cfg)
    internal_ssl, internal_tls = nginx_tls.internal_tls(cfg)
    values = {
        "user_directive": (f"user {WORKER_USER} {WORKER_GROUP};" if _is_root()
                           else "# not root: workers run as the current user"),
        "workers": str(cfg.workers),
        "error_log_level": cfg.error_log_level,
        "lua_root": str(Path(cfg.lua_root).resolve()),
        "token": cfg.token,
        "public_listen": public_listen,
        "tls_certificate": tls_certificate,
        "internal_port": str(int(cfg.internal_port)),
        "internal_host": cfg.internal_host,
        "internal_ssl": internal_ssl,
        "internal_tls": internal_tls,
        "log_excerpts": str(max(0, int(cfg.log_excerpts))),
        "client_max_body_size": cfg.client_max_body_size,
        "max_upload_size": cfg.max_upload_size,
        "redis": redis,
        # HTTP/2 is spoken only by the HTTPS listener (nginx_tls.public_listen)
        "http2": "true" if cfg.tls_port is not None else "false",
        "resolver_directive": resolver,
        "system_ca_file": SYSTEM_CA_FILE,
        "jobs_proxy": _jobs_proxy(cfg.jobs_url),
        "loop_socket": str(nginx_tls.h1_socket(cfg)),
        **_cors(cfg.cors_origins),
    }

    def fill(template: Path) -> str:
        def one(m: re.Match) -> str:
            name = m.group(1)
            if name not in values:
                raise KeyError(f"{template}: unknown placeholder {{{{{name}}}}}")
            return values[name]
        return _PLACEHOLDER_RE.sub(one, template.read_text())

    return {"nginx.conf": fill(TEMPLATE), **{name: fill(t) for name, t in INCLUDED.items()}}


# What Access-Control-Allow-Origin says for a request's Origin ({origins}: the map's
# entries); a preflight (OPTIONS from an allowed origin) is answered 204 by the public
# server before any key check. Exact map lookups, no regex but "~." for "*".
_CORS_HTTP = """map $http_origin $sl_cors_origin {{ default ""; {origins} }}
    map $request_method $sl_cors_preflight {{ default ""; OPTIONS $sl_cors_origin; }}
    map $sl_cors_origin $sl_cors_expose {{ "" ""; default "{expose}"; }}
    map $sl_cors_origin $sl_cors_vary {{ "" ""; "*" ""; default Origin; }}
    map $sl_cors_preflight $sl_cors_methods {{ "" ""; default "GET, POST, DELETE, OPTIONS"; }}
    map $sl_cors_preflight $sl_cors_headers {{
        "" ""; default $http_access_control_request_headers; }}
    map $sl_cors_preflight $sl_cors_max_age {{ "" ""; default 600; }}
    add_header Access-Control-Allow-Origin $sl_cors_origin always;
    add_header Access-Control-Expose-Headers $sl_cors_expose always;
    add_header Access-Control-Allow-Methods $sl_cors_methods always;
    add_header Access-Control-Allow-Headers $sl_cors_headers always;
    add_header Access-Control-Max-Age $sl_cors_max_age always;
    add_header Vary $sl_cors_vary always;
    proxy_hide_header Access-Control-Allow-Origin;
    proxy_hide_header Access-Control-Expose-Headers;
    proxy_hide_header Access-Control-Allow-Methods;
    proxy_hide_header Access-Control-Allow-Headers;"""
# what a page may read of an answer
_CORS_EXPOSE = ("X-Request-Id, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, "
                "Retry-After, X-Sluice-Fallback, X-Sluice-Route-Version")
_CORS_PREFLIGHT = "if ($sl_cors_preflight) { return 204; }   # a browser's preflight: no key"


def _cors(origins: tuple[str, ...]) -> dict[str, str]:
    """The CORS blocks of nginx.conf: empty (no cost per request) without origins."""
    if not origins:
        return {"cors_http": "# none: same-origin pages only", "cors_preflight": ""}
    entries = ('"~." "*";' if tuple(origins) == ("*",)
               else " ".join(f'"{o}" $http_origin;' for o in origins))
    return {"cors_http": _CORS_HTTP.format(origins=entries, expose=_CORS_EXPOSE),
            "cors_preflight": _CORS_PREFLIGHT}
