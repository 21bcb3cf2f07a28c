"""The nginx processes the benches measure (bench/gateway.py describes them): the
upstream, plain nginx (baseline), lean (the floor of a Lua gateway on this stack,
written here, not in the product) and the Sluice gateway with its bench snapshot.
Used by bench/gateway.py, bench/instructions.py and the other benches.
"""
from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from bench.wrk import MODEL, PATH_MODEL, BenchError
from control_plane.runtime.procs import free_ports, spawn, stop, wait_port

UPSTREAM_ANSWER = {
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1764435000,
    "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello, bench!"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}
PATH_ANSWER = {"model_name": PATH_MODEL, "id": "bench",
               "outputs": [{"name": "y", "shape": [1], "datatype": "FP32", "data": [0.5]}]}


# ---- plain nginx ------------------------------------------------------------------

def nginx_conf(workers: int, http_body: str, main: str = "") -> str:
    """A self-contained nginx.conf for a prefix: logs and temp files stay inside it.
    `main`: extra main-context lines (load_module)."""
    # As root, workers would drop to `nobody` and lose access to the private prefix.
    user = "user root;" if os.geteuid() == 0 else ""
    return f"""{main}
{user}
worker_processes {workers};
pid logs/nginx.pid;
error_log logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    server_tokens off;
    keepalive_requests 1000000;
    client_body_temp_path tmp/client_body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
{http_body}
}}
"""


def upstream_http(port: int) -> str:
    body = json.dumps(UPSTREAM_ANSWER, separators=(",", ":"))
    path_body = json.dumps(PATH_ANSWER, separators=(",", ":"))
    return f"""
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location = /v1/chat/completions {{
            default_type application/json;
            return 200 '{body}';
        }}
        location = /v2/models/{PATH_MODEL}/infer {{
            default_type application/json;
            return 200 '{path_body}';
        }}
        location / {{ return 404 '{{"error":"not found"}}'; }}
    }}"""


def baseline_http(port: int, upstream_port: int, extra: str = "") -> str:
    """`extra`: more lines for the server block (the HTTPS listener of --https)."""
    return f"""
    upstream bench_upstream {{
        server 127.0.0.1:{upstream_port};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;{extra}
        client_body_buffer_size 1m;   # as the gateway and lean: no body goes to disk
        location / {{
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://bench_upstream;
        }}
    }}"""


# ---- lean: the floor of a Lua gateway on this stack (not the product) ----------------

LUA_MODULES = """load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;"""


def lean_http(port: int, upstream_port: int, key: str, http_extra: str = "",
              location_extra: str = "") -> str:
    """What any Lua gateway does at the least: look the key up in a shared dict, read
    and decode the JSON body (a model name must be there), pick the peer in
    balancer_by_lua (keep-alive pool), count twice in a shared dict in the log phase.
    `http_extra`, `location_extra`: more lines for the http block and for location /
    (the contract target's)."""
    return f"""{http_extra}
    lua_package_path "/usr/share/lua/5.1/?.lua;;";
    lua_package_cpath "/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;;";
    lua_shared_dict lean_keys 1m;
    lua_shared_dict lean_counts 1m;
    init_by_lua_block {{
        ngx.shared.lean_keys:set("{key}", "1")
    }}
    upstream lean_upstream {{
        server 0.0.0.1;
        balancer_by_lua_block {{
            require("ngx.balancer").set_current_peer("127.0.0.1", {upstream_port})
        }}
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        client_body_buffer_size 1m;
        location / {{{location_extra}
            access_by_lua_block {{
                local authz = ngx.var.http_authorization
                if not authz or not ngx.shared.lean_keys:get(authz:sub(8)) then
                    return ngx.exit(403)
                end
                ngx.req.read_body()
                local doc = require("cjson.safe").decode(ngx.req.get_body_data() or "")
                if type(doc) ~= "table" or type(doc.model) ~= "string" then
                    return ngx.exit(400)
                end
            }}
            log_by_lua_block {{
                local d = ngx.shared.lean_counts
                d:incr("requests", 1, 0)
                d:incr("status:" .. ngx.status, 1, 0)
            }}
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://lean_upstream;
        }}
    }}"""


# ---- contract: lean plus what Sluice's contract makes every proxied request pay --------

# The access-log line of docs/contracts.md ("Access log"), its fields in order, made
# the cheapest way nginx can: its own variables where nginx knows the value, the
# bench's names as constants where the gateway would bring them.
CONTRACT_LOG_FORMAT = (
    '{"time":"$msec","request_id":"$connection-$connection_requests","consumer":"bench",'
    '"plan":"none","model":"bench-chat","route":"","backend":"bench-upstream",'
    '"method":"$request_method","path":"$uri","status":"$status",'
    '"latency_ms":"$request_time","upstream_ms":"$upstream_response_time",'
    '"prompt_tokens":"","completion_tokens":"","cache":"","error_type":"",'
    '"bytes_sent":"$bytes_sent","excerpt":"","fallback":"","queue_ms":"",'
    '"upstream_error":"","trace_id":"","span_id":"","parent_span_id":""}')


def contract_http(port: int, upstream_port: int, key: str) -> str:
    """lean, plus the three things DESIGN.md's contract makes every proxied request
    cost whatever the code does, each done for nothing: a header filter and a body
    filter on the proxying location (a backend's own error answer leaves in the error
    template with its message: an intercepted answer's body is never read, so only a
    filter can rewrite it, and nginx calls a location's filters on every answer), and
    one access-log line per request (nginx's buffered access_log, the line's fields
    from nginx's variables). Empty handlers and a line of constants and built-in
    variables: a lower bound for any code that keeps the contract, not a gateway."""
    log_format = f"\n    log_format contract_json escape=none '{CONTRACT_LOG_FORMAT}';"
    return lean_http(port, upstream_port, key, http_extra=log_format, location_extra="""
            access_log logs/access.log contract_json buffer=64k flush=1s;
            header_filter_by_lua_block { return }
            body_filter_by_lua_block { return }""")


def start_nginx(prefix: Path, workers: int, http_body: str, port: int, main: str = ""):
    for sub in ("logs", "tmp", "conf"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    conf = prefix / "conf" / "nginx.conf"
    conf.write_text(nginx_conf(workers, http_body, main))
    proc = spawn(["nginx", "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                 log=prefix / "logs" / "stdout.log")
    try:
        wait_port(port, timeout=10)
    except TimeoutError:
        stop(proc)
        log = (prefix / "logs" / "error.log")
        raise BenchError(f"nginx in {prefix} did not start:\n"
                         + (log.read_text() if log.exists() else "")) from None
    return proc


def tls_policy() -> list[str]:
    """The ssl_* lines of the Sluice template's public server that are not
    placeholders: protocols, ciphers, tickets, session cache. The baseline gets the
    same, so that the two differ only in what Sluice does per request."""
    from control_plane.runtime.nginx_conf import TEMPLATE

    public = TEMPLATE.read_text().split("# --- public listener", 1)[1].split("location / {", 1)[0]
    lines = [line.strip() for line in public.splitlines()
             if line.strip().startswith("ssl_") and "{{" not in line]
    if not any(line.startswith("ssl_protocols") for line in lines):
        raise BenchError("no ssl_protocols line in the public server of nginx.conf.tmpl")
    return lines


def baseline_tls_lines(tls_port: int, cert: Path, key: Path) -> str:
    """The baseline's HTTPS listener: the Sluice listen options and TLS settings."""
    lines = [f"listen 127.0.0.1:{tls_port} ssl http2 backlog=4096;",
             f'ssl_certificate "{cert}";', f'ssl_certificate_key "{key}";', *tls_policy()]
    return "".join("\n        " + line for line in lines)


# ---- the Sluice gateway -------------------------------------------------------------

POLICY_PLAN = {"id": 1, "name": "bench-plan", "rate_per_second": 1e6, "burst": 1_000_000,
               "max_concurrent": 100_000, "daily_requests": 10**12, "monthly_requests": None,
               "monthly_tokens": 10**15, "models": {}}


def bench_snapshot(upstream_port: int, key: str, policy_key: str,
                   max_in_flight: int | None = None, path_model: bool = False) -> dict:
    """A snapshot (docs/contracts.md) with one model, one backend, two consumers (one
    on a plan), one key each. `path_model`: also PATH_MODEL, a kserve_v2 model on the
    same upstream (the sluice-path target)."""
    snap = {
        "version": 1,
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "models": {MODEL: {
            "id": 1, "name": MODEL, "timeout_ms": 60000,
            "backends": [{"id": 1, "name": "bench-upstream", "protocol": "openai",
                          "scheme": "http", "host": "127.0.0.1", "port": upstream_port,
                          "host_header": f"127.0.0.1:{upstream_port}", "base_path": "",
                          "weight": 100,
                          **({"max_in_flight": max_in_flight} if max_in_flight else {})}],
        }},
        "consumers": {"1": {"id": 1, "name": "bench", "allowed_models": None},
                      "2": {"id": 2, "name": "bench-planned", "allowed_models": None,
                            "plan_id": 1}},
        "keys": {hashlib.sha256(key.encode()).hexdigest():
                 {"id": 1, "consumer_id": 1, "prefix": key[:11], "expires_at": None},
                 hashlib.sha256(policy_key.encode()).hexdigest():
                 {"id": 2, "consumer_id": 2, "prefix": policy_key[:11], "expires_at": None}},
        "plans": {"1": POLICY_PLAN},
    }
    if path_model:
        backend = dict(snap["models"][MODEL]["backends"][0], id=2, name="bench-upstream-v2",
                       protocol="kserve_v2")
        snap["models"][PATH_MODEL] = {"id": 2, "name": PATH_MODEL, "timeout_ms": 60000,
                                      "backends": [backend]}
    return snap


def start_gateway(prefix: Path, workers: int, upstream_port: int, key: str,
                  policy_key: str, redis_url: str | None = None,
                  max_in_flight: int | None = None,
                  tls: tuple[int, Path, Path] | None = None):
    """`tls`: (port, certificate chain, key) of an HTTPS listener beside the plain one."""
    try:
        from control_plane.runtime.gateway import GatewayProcess as Gateway
        from control_plane.runtime.nginx_conf import GatewayConfig
    except ImportError as exc:
        raise BenchError(f"the gateway is not available ({exc}); "
                         "use --baseline-only to measure plain nginx alone") from None
    port, internal_port = free_ports(2)
    cfg = GatewayConfig(prefix=prefix, port=port, internal_port=internal_port,
                        token="bench-" + hashlib.sha256(key.encode()).hexdigest()[:16],
                        workers=workers, redis_url=redis_url,
                        **({"tls_port": tls[0], "tls_cert": tls[1], "tls_key": tls[2]}
                           if tls else {}))
    gateway = Gateway(cfg)
    try:
        gateway.start()
        resp = gateway.push(bench_snapshot(upstream_port, key, policy_key, max_in_flight,
                                           path_model=True))
        if resp.status_code != 200:
            raise BenchError(f"snapshot push answered {resp.status_code}: {resp.text}")
    except (RuntimeError, OSError) as exc:
        gateway.stop()
        raise BenchError(f"the gateway did not start: {exc}") from exc
    except BaseException:
        gateway.stop()
        raise
    return gateway
