"""What TLS to backends costs the Sluice gateway, on this machine.

Starts one upstream nginx answering the fixed chat JSON on three listeners (plain
HTTP, HTTPS, HTTPS requiring a client certificate), with a private CA made by
openssl, and measures with wrk (keep-alive clients, bench/chat.lua):

  baseline-https  plain nginx proxy_pass https://, verified against the CA (keepalive 64)
  sluice-http     the gateway to the plain listener
  sluice-https    the gateway to the HTTPS listener: the backend's own CA, so its
                  trust location (ngx.exec) and a kept-alive TLS connection
  sluice-mtls     the same with the gateway's client certificate (data: variables)

Prints requests/s, p50, p99 and nginx CPU per request (the steadier figure on a
shared machine), and the ratios to sluice-http and to baseline-https.

    .venv/bin/python bench/backend_tls.py [--duration 5] [--connections 16] [--rounds 2]

Never a CI gate.
"""
from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.gateway import check_answers  # noqa: E402
from bench.targets import UPSTREAM_ANSWER, bench_snapshot, start_nginx  # noqa: E402
from bench.wrk import MODEL, BenchError, run_wrk  # noqa: E402
from control_plane.clients.backend_tls import trust_id  # noqa: E402
from control_plane.runtime.gateway import GatewayProcess as Gateway  # noqa: E402
from control_plane.runtime.nginx_conf import GatewayConfig  # noqa: E402
from control_plane.runtime.procs import free_ports, stop  # noqa: E402


def openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(folder: Path) -> None:
    """ca.pem, server.pem/key (localhost, 127.0.0.1), client.pem/key."""
    folder.mkdir(parents=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl(folder, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=bench CA", "-addext", "basicConstraints=critical,CA:TRUE")
    for name, ext in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                 "extendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        openssl(folder, "req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}")
        (folder / f"{name}.ext").write_text(ext)
        openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey",
                "ca.key", "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                "-out", f"{name}.pem")


def upstream(ports: tuple[int, int, int], certs: Path) -> str:
    body = json.dumps(UPSTREAM_ANSWER, separators=(",", ":"))
    location = f"""
        keepalive_requests 1000000;
        location = /v1/chat/completions {{ default_type application/json; return 200 '{body}'; }}"""
    tls = f"""
        ssl_certificate {certs}/server.pem;
        ssl_certificate_key {certs}/server.key;
        ssl_protocols TLSv1.2 TLSv1.3;"""
    return f"""
    server {{ listen 127.0.0.1:{ports[0]} backlog=4096; {location} }}
    server {{ listen 127.0.0.1:{ports[1]} ssl backlog=4096; {tls} {location} }}
    server {{ listen 127.0.0.1:{ports[2]} ssl backlog=4096; {tls}
        ssl_verify_client on; ssl_client_certificate {certs}/ca.pem; {location} }}"""


def baseline(port: int, upstream_port: int, certs: Path) -> str:
    return f"""
    upstream tls_up {{ server 127.0.0.1:{upstream_port}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate {certs}/ca.pem;
            proxy_ssl_name localhost;
            proxy_ssl_server_name on;
            proxy_pass https://tls_up;
        }}
    }}"""


def snapshot(port: int, key: str, tls: dict | None) -> dict:
    """bench-chat on one backend: plain (tls None) or https with `tls`."""
    snap = bench_snapshot(port, key, key + "-p")
    if tls is not None:
        snap["models"][MODEL]["backends"][0].update(
            {"scheme": "https", "host_header": "localhost", "tls": tls})
    return snap


def start_gateway(prefix: Path, workers: int, snap: dict) -> Gateway:
    port, internal = free_ports(2)
    gw = Gateway(GatewayConfig(prefix=prefix, port=port, internal_port=internal,
                               token="bench-" + secrets.token_hex(12), workers=workers))
    gw.start()
    r = gw.push(snap)
    if r.status_code != 200:
        gw.stop()
        raise BenchError(f"push: {r.status_code} {r.text}")
    return gw


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="sluice-bench-tls-"))
    root.chmod(0o755)
    certs = root / "certs"
    make_certs(certs)
    up_ports = tuple(free_ports(3))
    (base_port,) = free_ports(1)
    key = "sk-bench-" + secrets.token_hex(8)
    ca = (certs / "ca.pem").read_text()
    tls = {"verify": True, "server_name": "localhost", "trust": trust_id(True, ca), "ca": ca}
    mtls = {**tls, "client_cert": (certs / "client.pem").read_text(),
            "client_key": (certs / "client.key").read_text()}
    procs = [start_nginx(root / "upstream", 1, upstream(up_ports, certs), up_ports[0]),
             start_nginx(root / "baseline", args.workers,
                         baseline(base_port, up_ports[1], certs), base_port)]
    gateways: list[Gateway] = []
    try:
        for name, port, t in (("http", up_ports[0], None), ("https", up_ports[1], tls),
                              ("mtls", up_ports[2], mtls)):
            gateways.append(start_gateway(root / f"gw-{name}", args.workers,
                                          snapshot(port, key, t)))
        targets = {"baseline-https": (f"http://127.0.0.1:{base_port}", None, procs[1].pid)}
        for name, gw in zip(("sluice-http", "sluice-https", "sluice-mtls"), gateways):
            targets[name] = (gw.url, key, gw.proc.pid)
        for name, (url, k, _) in targets.items():
            check_answers(name, url, k)
        results: dict[str, list[dict]] = {t: [] for t in targets}
        for _ in range(args.rounds):
            for name, (url, k, pid) in targets.items():
                fig = run_wrk(url, k, args.duration, args.connections, 1, master_pid=pid)
                if fig.get("non_2xx"):
                    raise BenchError(f"{name}: {fig['non_2xx']} non-2xx answers")
                results[name].append(fig)
        med = {n: {f: statistics.median(r[f] for r in rs)
                   for f in ("rps", "p50_ms", "p99_ms", "cpu_us")}
               for n, rs in results.items()}
        print(f"{'target':16} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'cpu us/req':>11}")
        for n, m in med.items():
            print(f"{n:16} {m['rps']:9.0f} {m['p50_ms']:8.2f} {m['p99_ms']:8.2f} "
                  f"{m['cpu_us']:11.1f}")
        http = med["sluice-http"]
        for n in ("sluice-https", "sluice-mtls"):
            print(f"{n}/sluice-http: req/s x{med[n]['rps'] / http['rps']:.2f}, "
                  f"cpu/req x{med[n]['cpu_us'] / http['cpu_us']:.2f}")
        print(f"sluice-https/baseline-https: req/s "
              f"x{med['sluice-https']['rps'] / med['baseline-https']['rps']:.2f}")
        return 0
    except (BenchError, RuntimeError) as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        for gw in gateways:
            gw.stop()
        for proc in procs:
            stop(proc)


if __name__ == "__main__":
    sys.exit(main())
