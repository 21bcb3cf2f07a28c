"""Sluice as a fleet of hosts on one machine: network namespaces joined by a bridge.

    root namespace (this test process)          namespace "hub": bridge br0
      load balancer: nginx on 127.0.0.1:<free>     │
      upstream gw1..gw3, retry on error/timeout    ├── veth ── root      10.200.N.1
                                                   ├── veth ── cp        10.200.N.10
                                                   │     PostgreSQL (its loopback), Redis,
                                                   │     admin API, controller(s)
                                                   ├── veth ── models    10.200.N.20
                                                   │     demo backends
                                                   ├── veth ── gw1..gw3  10.200.N.31..33
                                                   │     `sluice gateway` (nginx + Lua)
                                                   └── veth ── gw4       10.200.N.34
                                                         spare: not behind the balancer,
                                                         started by a test that needs it

Every host is a namespace (fleet_net.py) with its own address on one private /24 of
10.200.0.0/16 (N is picked free at random) and no default route: nothing it sends
can leave the bridge. Processes run in their host with `ip netns exec`. Cutting a
host off: `ip link set eth0 down` in it; a partition between two hosts: blackhole
routes on both sides.

Everything is created and removed by `Fleet`; without root or iproute2 it raises
`FleetError`, which the tests let fail loudly.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import requests

from control_plane.runtime import postgres, procs
from control_plane.clients.admin import AdminClient
from control_plane.runtime.redis_server import _read as read_resp
from fleet_net import FleetError, Host, Net, subnet_lock

REPO = Path(__file__).resolve().parents[2]
# Fixed, but each on a host (namespace) of its own: nothing else listens there.
API_PORT, GATEWAY_PORT, INTERNAL_PORT, PG_PORT, REDIS_PORT = 8080, 8000, 8001, 5432, 6379
BACKEND_PORT = 9101


@dataclass
class GatewayHost(Host):
    token: str = ""

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{GATEWAY_PORT}"

    @property
    def internal_url(self) -> str:
        return f"http://{self.addr}:{INTERNAL_PORT}"

    def served_version(self) -> int:
        r = requests.get(self.internal_url + "/internal/snapshot", timeout=2,
                         headers={"Authorization": f"Bearer {self.token}"})
        r.raise_for_status()
        return int(r.json()["version"])


@dataclass
class Fleet:
    """The control-plane host, `gateways` gateway hosts behind the load balancer and a
    spare one, a models host, started from real processes. `membership`: gateways
    register themselves (SLUICE_CONTROL_PLANE_URL) instead of the controllers' static
    SLUICE_GATEWAYS list."""

    tmp: Path
    gateways: int = 3
    controllers: int = 1
    membership: bool = False
    # gateway hosts whose gateway the test starts itself (start_gateway)
    late: tuple[str, ...] = ()
    admin_token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    gateway_token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    redis_password: str = field(default_factory=lambda: secrets.token_hex(12))
    children: dict = field(default_factory=dict)
    net: Net | None = None
    pg: postgres.Cluster | None = None
    lb_port: int = 0

    # --- setup ------------------------------------------------------------------

    def start(self) -> "Fleet":
        hosts = {"cp": 10, "models": 20}
        # one more gateway host than the balancer knows: "spare", for a gateway that joins
        hosts.update({f"gw{i}": 30 + i for i in range(1, self.gateways + 2)})
        with subnet_lock():   # the subnet is free until our addresses are on it
            self.net = Net(hosts)
            self.net.create()
        self._start_postgres()
        self.spawn("cp", "redis", ["redis-server", "--bind", self.cp.addr, "--port",
                                   str(REDIS_PORT), "--requirepass", self.redis_password,
                                   "--save", "", "--appendonly", "no", "--dir", str(self.tmp)])
        self.run("cp", [sys.executable, "-m", "control_plane.cli", "migrate", "upgrade"])
        self.spawn("cp", "api", [sys.executable, "-m", "control_plane.cli", "api",
                                 "--host", "0.0.0.0", "--port", str(API_PORT),
                                 "--workers", "2"])
        self.spawn("models", "backend", [sys.executable, "-m", "control_plane.demo.backends",
                                         "--protocol", "openai", "--host", "0.0.0.0",
                                         "--port", str(BACKEND_PORT), "--name", "chat-a"])
        for name in self.gateway_names:
            if name not in self.late:
                self.start_gateway(name)
        for i in range(1, self.controllers + 1):
            self.start_controller(f"controller{i}")
        self.wait_http(self.admin_url + "/config", "api")
        self.wait_http(f"{self.backend_url}/health", "backend")
        self._start_lb()
        return self

    def _start_postgres(self) -> None:
        self.pg = postgres.Cluster(self.tmp / "pg", port=PG_PORT)
        self.pg.init()
        self.start_postgres()

    def start_postgres(self) -> None:
        """PostgreSQL on the control-plane host's loopback (again, after stop_postgres).
        pg_ctl waits up to 120 s: the suite's xdist workers start their own clusters and
        brokers at the same moment on two cores."""
        data = self.pg.datadir
        owner = postgres._owner()
        cmd = [str(postgres._bindir() / "pg_ctl"), "-D", str(data), "-l",
               str(data / "server.log"), "-w", "-t", "120", "start", "-o",
               f"-c listen_addresses=127.0.0.1 -c port={PG_PORT} "
               f"-c unix_socket_directories={data} -c fsync=off -c max_connections=200"]
        if owner is not None:
            cmd = ["runuser", "-u", owner.pw_name, "--", *cmd]
        res = subprocess.run(self.net.exec_args("cp", cmd), capture_output=True, text=True)
        if res.returncode != 0:
            log = (data / "server.log").read_text(errors="replace")[-2000:] \
                if (data / "server.log").exists() else ""
            raise FleetError(f"PostgreSQL did not start: {res.stderr}\n{log}")

    def stop_postgres(self) -> None:
        self.pg.stop()

    def env(self, **extra: str) -> dict:
        env = dict(os.environ,
                   DATABASE_URL=f"postgresql://{postgres.SUPERUSER}:{self.pg.password}"
                                f"@127.0.0.1:{PG_PORT}/postgres",
                   SLUICE_ADMIN_TOKEN=self.admin_token, SLUICE_GATEWAY_TOKEN=self.gateway_token,
                   SLUICE_CONTROLLER_INTERVAL="0.2", SLUICE_PUSH_TIMEOUT="1",
                   SLUICE_HEALTH_TIMEOUT="0.5", SLUICE_LOG_LEVEL="INFO")
        if self.membership:   # fast enough for a test: stale after 3 s without a beat
            env.update(SLUICE_HEARTBEAT_INTERVAL="1", SLUICE_GATEWAY_TTL="3")
        env.pop("SLUICE_CONFIG", None)
        env.update(extra)
        return env

    def spawn(self, host: str, name: str, args: list[str], **env: str):
        proc = procs.spawn(self.net.exec_args(host, args), log=self.tmp / f"{name}.log",
                           env=self.env(**env), cwd=REPO)
        self.children[name] = proc
        return proc

    def run(self, host: str, args: list[str]) -> None:
        res = subprocess.run(self.net.exec_args(host, args), capture_output=True, text=True,
                             env=self.env(), cwd=REPO, timeout=120)
        if res.returncode != 0:
            raise FleetError(f"{args} failed in {host}: {res.stdout[-2000:]}{res.stderr[-2000:]}")

    @property
    def controller_config(self) -> Path:
        """The controllers' SLUICE_CONFIG file (re-read on SIGHUP)."""
        return self.tmp / "controller.env"

    def list_gateways(self, names: list[str]) -> None:
        """The static list (SLUICE_GATEWAYS) the controllers push to, from their next
        start or SIGHUP."""
        urls = ",".join(self.gateway(n).internal_url for n in names)
        self.controller_config.write_text(f"SLUICE_GATEWAYS={urls}\n")

    def start_controller(self, name: str):
        if not self.membership and not self.controller_config.exists():
            self.list_gateways(self.gateway_names)
        extra = {} if self.membership else {"SLUICE_CONFIG": str(self.controller_config)}
        return self.spawn("cp", name, [sys.executable, "-m", "control_plane.cli",
                                       "controller"], **extra)

    @property
    def spare(self) -> str:
        """The gateway host outside the balancer and the static list."""
        return f"gw{self.gateways + 1}"

    def start_gateway(self, name: str):
        gw = self.gateway(name)
        prefix = self.tmp / name
        prefix.mkdir(exist_ok=True)
        extra = {"SLUICE_GATEWAY_HOST": "0.0.0.0",
                 # only its own namespace's addresses: loopback and its veth
                 "SLUICE_INTERNAL_HOST": "0.0.0.0",
                 "SLUICE_GATEWAY_PORT": str(GATEWAY_PORT),
                 "SLUICE_INTERNAL_PORT": str(INTERNAL_PORT),
                 "SLUICE_REDIS_URL":
                     f"redis://:{self.redis_password}@{self.cp.addr}:{REDIS_PORT}/0"}
        if self.membership:
            extra.update(SLUICE_CONTROL_PLANE_URL=f"http://{self.cp.addr}:{API_PORT}",
                         SLUICE_GATEWAY_NAME=name,
                         SLUICE_GATEWAY_ADVERTISE_URL=gw.internal_url)
        proc = self.spawn(name, name, [sys.executable, "-m", "control_plane.cli", "gateway",
                                       "--prefix", str(prefix), "--workers", "1"], **extra)
        self.wait_http(gw.internal_url + "/internal/snapshot", name, proc=proc)
        return proc

    def _start_lb(self) -> None:
        """nginx in the root namespace, round robin over the gateways, a request that
        fails to connect or times out retried on the next gateway."""
        prefix = self.tmp / "lb"
        (prefix / "logs").mkdir(parents=True, exist_ok=True)
        self.lb_port = procs.free_port()
        servers = "\n".join(f"        server {g.addr}:{GATEWAY_PORT} max_fails=1 "
                            "fail_timeout=3s;" for g in self.gateway_hosts)
        user = "user nobody nogroup;" if os.geteuid() == 0 else ""
        (prefix / "nginx.conf").write_text(f"""
{user}
worker_processes 1;
pid logs/nginx.pid;
error_log logs/error.log warn;
events {{ worker_connections 2048; }}
http {{
    access_log off;
    client_body_temp_path logs/body;
    proxy_temp_path logs/proxy;
    fastcgi_temp_path logs/fastcgi;
    uwsgi_temp_path logs/uwsgi;
    scgi_temp_path logs/scgi;
    upstream gateways {{
{servers}
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{self.lb_port};
        location / {{
            proxy_pass http://gateways;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout 500ms;
            proxy_read_timeout 3s;
            # inference calls are POSTs: retried too (only before any byte went back)
            proxy_next_upstream error timeout non_idempotent;
            proxy_next_upstream_tries 3;
            add_header X-Fleet-Upstream $upstream_addr always;
        }}
    }}
}}
""")
        proc = procs.spawn(["/usr/sbin/nginx", "-p", f"{prefix}/", "-c", "nginx.conf",
                            "-e", "logs/error.log", "-g", "daemon off;"],
                           log=self.tmp / "lb.log")
        self.children["lb"] = proc
        procs.wait_port(self.lb_port)

    def wait_http(self, url: str, name: str, proc=None, timeout: float = 60.0) -> None:
        try:
            procs.wait_http(url, timeout=timeout, proc=proc or self.children.get(name))
        except Exception as exc:
            raise FleetError(f"{name} did not answer at {url}: {exc}\n{self.tail(name)}") \
                from None

    # --- handles ----------------------------------------------------------------

    @property
    def cp(self) -> Host:
        return self.net.hosts["cp"]

    @property
    def gateway_names(self) -> list[str]:
        return [f"gw{i}" for i in range(1, self.gateways + 1)]

    def gateway(self, name: str) -> GatewayHost:
        h = self.net.hosts[name]
        return GatewayHost(h.name, h.ns, h.addr, token=self.gateway_token)

    @property
    def gateway_hosts(self) -> list[GatewayHost]:
        return [self.gateway(n) for n in self.gateway_names]

    @property
    def admin_url(self) -> str:
        return f"http://{self.cp.addr}:{API_PORT}/api/v1"

    @property
    def admin(self) -> AdminClient:
        return AdminClient(self.admin_url, self.admin_token)

    @property
    def backend_url(self) -> str:
        return f"http://{self.net.hosts['models'].addr}:{BACKEND_PORT}"

    @property
    def lb_url(self) -> str:
        return f"http://127.0.0.1:{self.lb_port}"

    def redis(self, *args):
        """One Redis command on the control-plane host, from here."""
        with socket.create_connection((self.cp.addr, REDIS_PORT), timeout=5) as s:
            out = []
            for cmd in (("AUTH", self.redis_password), args):
                out.append(f"*{len(cmd)}\r\n".encode())
                for a in cmd:
                    b = str(a).encode()
                    out.append(b"$%d\r\n%s\r\n" % (len(b), b))
            s.sendall(b"".join(out))
            f = s.makefile("rb")
            read_resp(f)
            return read_resp(f)

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.tmp / f"{name}.log"
        try:
            return f"--- {name}.log ---\n" + path.read_text(errors="replace")[-chars:]
        except OSError:
            return f"(no {name}.log)"

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        procs.stop(self.children.pop(name, None), sig=sig, timeout=5)

    # --- teardown ---------------------------------------------------------------

    def stop(self) -> None:
        """Every process, then the network: the namespaces go whatever failed before."""
        try:
            for name in list(self.children):
                self.kill(name, signal.SIGTERM)
            if self.pg is not None:
                self.pg.stop()
        finally:
            if self.net is not None:
                self.net.remove()


def new_fleet(**kw) -> Fleet:
    """A started fleet in a fresh folder (readable by nginx's and PostgreSQL's users)."""
    top = Path(tempfile.mkdtemp(prefix="sluice-fleet-"))
    top.chmod(0o755)
    fleet = Fleet(top, **kw)
    try:
        return fleet.start()
    except BaseException as exc:
        logs = "\n".join(fleet.tail(p.stem) for p in sorted(top.glob("*.log")))
        fleet.stop()
        shutil.rmtree(top, ignore_errors=True)
        raise FleetError(f"the fleet did not start: {exc!r}; logs:\n{logs}") from exc


def remove_fleet(fleet: Fleet) -> None:
    fleet.stop()
    shutil.rmtree(fleet.tmp, ignore_errors=True)

