"""What differs between two gateways on one machine: `GatewayConfig`, read by the
nginx.conf it renders to (nginx_conf.py, nginx_tls.py) and the process that runs it
(gateway.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class GatewayConfig:
    """Everything that differs between two gateways on one machine."""

    prefix: Path
    port: int
    internal_port: int
    token: str
    workers: int = 2
    listen_host: str = "127.0.0.1"
    # Loopback unless a private network (a compose network) must reach it.
    internal_host: str = "127.0.0.1"
    client_max_body_size: str = "1m"
    # The largest multipart upload (audio, image edits) the upload location reads; each
    # model's own max_request_bytes (default 25 MiB) is enforced below it, in Lua.
    max_upload_size: str = "100m"
    # Characters of each request body kept, PII-masked, in the access log; 0 = none.
    log_excerpts: int = 0
    # Origins whose browser pages may call the public listener (CORS); ("*",): any.
    cors_origins: tuple[str, ...] = ()
    # Cluster mode: redis://[[user]:password@]host[:port][/db] shared by the gateways
    # for rate limits and quotas; on Redis failure fall back to local counters
    # ("open") or refuse limited requests with 503 ("closed").
    redis_url: str | None = None
    redis_failure: str = "open"
    lua_root: Path = field(default_factory=lambda: REPO / "lua")
    error_log_level: str = "warn"
    # The public HTTPS listener (HTTP/2 by ALPN, HTTP/1.x as before): on when tls_port
    # is set. tls_cert is a PEM file, the server's certificate first, then any
    # intermediates; tls_key its private key. plain=False turns the HTTP listener
    # (`port`) off, for deployments where callers must use HTTPS.
    tls_port: int | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    plain: bool = True
    # Optional TLS on the internal listener (PEM files; a chain file works), and the
    # CA this process verifies it with when it calls its own listener.
    internal_tls_cert: Path | None = None
    internal_tls_key: Path | None = None
    internal_ca: Path | None = None
    # Async jobs, files and batches: the jobs service (`sluice api`) this gateway
    # hands them to (lua/sluice/jobs.lua); None: such requests get 503.
    jobs_url: str | None = None
