"""Sluice as a fleet of hosts on one machine: network namespaces joined by a bridge.

    root namespace (this test process)          namespace "hub": bridge br0
      load balancer: nginx on 127.0.0.1:<free>     │
      upstream gw1..gw3, retry on error/timeout    ├── veth ── root      10.200.N.1
                                                   ├── veth ── cp        10.200.N.10
                                                   │     PostgreSQL (its loopback), Redis,
                                                   │     admin API, controller(s)
                                                   ├── veth ── models    10.200.N.20
                                                   │     demo backends
                                                   └── veth ── gw1..gw3  10.200.N.31..33
                                                         `sluice gateway` (nginx + Lua)

Every host is a namespace with its own address on one private /24 of 10.200.0.0/16
(N is picked free at random), loopback and one veth to the bridge, and no default
route: nothing it sends can leave the bridge, and the root namespace only gains a
route to that /24 through its own veth (checked after setup). Processes run in their
host with `ip netns exec`. Cutting a host off: `ip link set eth0 down` in it, or a
blackhole route to one address (a partition between two hosts).

Everything is created and removed by `Fleet`; without root or iproute2 it raises
`FleetError`, which the tests let fail loudly.
"""
from __future__ import annotations

import os
import random
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
from control_plane.runtime.admin import AdminClient
from control_plane.runtime.redis_server import _read as read_resp

REPO = Path(__file__).resolve().parents[2]
API_PORT, GATEWAY_PORT, INTERNAL_PORT, PG_PORT, REDIS_PORT = 8080, 8000, 8001, 5432, 6379
BACKEND_PORT = 9101


class FleetError(RuntimeError):
    """The machine cannot host the fleet (not root, no iproute2, no namespaces)."""


def ip(*args: str, ns: str | None = None, check: bool = True) -> str:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        raise FleetError("`ip` not found: install iproute2 (scripts/setup.sh)") from None
    if check and res.returncode != 0:
        raise FleetError(f"{' '.join(cmd)} failed: {res.stderr.strip()}")
    return res.stdout


@dataclass
class Host:
    name: str
    ns: str
    addr: str


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


class Net:
    """The namespaces, the bridge and the veths; `remove()` undoes all of it."""

    def __init__(self, hosts: dict[str, int]):
        if os.geteuid() != 0:
            raise FleetError("tests/fleet needs root: network namespaces and veth pairs")
        if not shutil.which("ip"):
            raise FleetError("`ip` not found: install iproute2 (scripts/setup.sh)")
        self.tag = secrets.token_hex(2)
        self.subnet = self._free_subnet()
        self.root_if = f"slf{self.tag}"
        self.hub = self.ns("hub")
        self.hosts = {name: Host(name, self.ns(name), f"{self.subnet}.{last}")
                      for name, last in hosts.items()}
        self.root_addr = f"{self.subnet}.1"
        self.created: list[str] = []

    def ns(self, host: str) -> str:
        return f"slf{self.tag}-{host}"

    @staticmethod
    def _free_subnet() -> str:
        used = ip("-o", "-4", "addr") + ip("-4", "route")
        for _ in range(100):
            prefix = f"10.200.{random.randint(100, 249)}"
            if prefix + "." not in used:
                return prefix
        raise FleetError("no free 10.200.x.0/24 for the fleet's network")

    def create(self) -> None:
        self._add_ns(self.hub)
        ip("link", "add", "br0", "type", "bridge", ns=self.hub)
        ip("link", "set", "br0", "up", ns=self.hub)
        for host in self.hosts.values():
            self._add_ns(host.ns)
            ip("link", "add", f"p-{host.name}", "type", "veth", "peer", "name", "eth0",
               "netns", host.ns, ns=self.hub)
            ip("link", "set", f"p-{host.name}", "master", "br0", "up", ns=self.hub)
            ip("addr", "add", f"{host.addr}/24", "dev", "eth0", ns=host.ns)
            ip("link", "set", "eth0", "up", ns=host.ns)
        ip("link", "add", self.root_if, "type", "veth", "peer", "name", "p-root",
           "netns", self.hub)
        ip("link", "set", "p-root", "master", "br0", "up", ns=self.hub)
        ip("addr", "add", f"{self.root_addr}/24", "dev", self.root_if)
        ip("link", "set", self.root_if, "up")
        self.check_contained()

    def _add_ns(self, name: str) -> None:
        ip("netns", "add", name)
        self.created.append(name)
        ip("link", "set", "lo", "up", ns=name)

    def check_contained(self) -> None:
        """Our addresses route only through our veth; the hosts have no way out."""
        for host in self.hosts.values():
            route = ip("route", "get", host.addr)
            if f"dev {self.root_if} " not in route + " ":
                raise FleetError(f"{host.addr} does not route through {self.root_if}: {route}")
            routes = [r.split() for r in ip("-4", "route", ns=host.ns).splitlines()]
            if routes != [[f"{self.subnet}.0/24", "dev", "eth0", "proto", "kernel", "scope",
                           "link", "src", host.addr]]:
                raise FleetError(f"{host.ns} has routes other than its own /24: {routes}")

    def exec_args(self, host: str, args: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[host].ns, *args]

    def link(self, host: str, up: bool) -> None:
        """Plug or unplug a host's only network cable."""
        ip("link", "set", "eth0", "up" if up else "down", ns=self.hosts[host].ns)

    def partition(self, host: str, other: str) -> None:
        """`host` and `other` can no longer talk: each drops what it sends to the
        other (on both sides, so that not even a request on a connection opened
        before gets through one way); everyone else still reaches both."""
        for a, b in ((host, other), (other, host)):
            ip("route", "add", "blackhole", f"{self.hosts[b].addr}/32", ns=self.hosts[a].ns)

    def heal(self) -> None:
        """Every cable in, every partition gone."""
        for name, host in self.hosts.items():
            self.link(name, True)
            for line in ip("route", "show", "type", "blackhole", ns=host.ns).splitlines():
                ip("route", "del", *line.split(), ns=host.ns)

    def remove(self) -> None:
        ip("link", "del", self.root_if, check=False)
        for name in reversed(self.created):
            ip("netns", "del", name, check=False)
        self.created.clear()
        left = [n for n in ip("netns", "list").split() if n.startswith(f"slf{self.tag}-")]
        if left or self.root_if in ip("-br", "link"):
            raise FleetError(f"left behind: namespaces {left}, link {self.root_if}")


@dataclass
class Fleet:
    """The control-plane host, three gateway hosts, a models host and the load
    balancer, started from real processes. `membership`: gateways register
    themselves (SLUICE_CONTROL_PLANE_URL) instead of the controller's static
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
        hosts.update({f"gw{i}": 30 + i for i in range(1, self.gateways + 1)})
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
        data = self.tmp / "pg"
        self.pg = postgres.Cluster(data, port=PG_PORT)
        self.pg.init()
        owner = postgres._owner()
        cmd = [str(postgres._bindir() / "pg_ctl"), "-D", str(data), "-l",
               str(data / "server.log"), "-w", "-t", "30", "start", "-o",
               f"-c listen_addresses=127.0.0.1 -c port={PG_PORT} "
               f"-c unix_socket_directories={data} -c fsync=off -c max_connections=200"]
        if owner is not None:
            cmd = ["runuser", "-u", owner.pw_name, "--", *cmd]
        res = subprocess.run(self.net.exec_args("cp", cmd), capture_output=True, text=True)
        if res.returncode != 0:
            log = (data / "server.log").read_text(errors="replace")[-2000:] \
                if (data / "server.log").exists() else ""
            raise FleetError(f"PostgreSQL did not start: {res.stderr}\n{log}")

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

    def start_controller(self, name: str):
        extra = {} if self.membership else {
            "SLUICE_GATEWAYS": ",".join(g.internal_url for g in self.gateway_hosts)}
        return self.spawn("cp", name, [sys.executable, "-m", "control_plane.cli",
                                       "controller"], **extra)

    def start_gateway(self, name: str):
        gw = self.gateway(name)
        prefix = self.tmp / name
        prefix.mkdir(exist_ok=True)
        extra = {"SLUICE_GATEWAY_HOST": "0.0.0.0",
                 # only its own namespace's addresses: loopback and its veth
                 "SLUICE_INTERNAL_HOST": "0.0.0.0",
                 "SLUICE_GATEWAY_PORT": str(GATEWAY_PORT),
                 "SLUICE_INTERNAL_PORT": str(INTERNAL_PORT),
                 "SLUICE_REDIS_URL": f"redis://:{self.redis_password}@{self.cp.addr}:{REDIS_PORT}/0"}
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

    def wait_http(self, url: str, name: str, proc=None, timeout: float = 30.0) -> None:
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
        for name in list(self.children):
            self.kill(name, signal.SIGTERM)
        if self.pg is not None:
            self.pg.stop()
        if self.net is not None:
            self.net.remove()


def new_fleet(**kw) -> Fleet:
    """A started fleet in a fresh folder (readable by nginx's and PostgreSQL's users)."""
    top = Path(tempfile.mkdtemp(prefix="sluice-fleet-"))
    top.chmod(0o755)
    fleet = Fleet(top, **kw)
    try:
        return fleet.start()
    except BaseException:
        logs = "\n".join(fleet.tail(p.stem) for p in sorted(top.glob("*.log")))
        fleet.stop()
        shutil.rmtree(top, ignore_errors=True)
        raise FleetError(f"the fleet did not start; logs:\n{logs}") from None


def remove_fleet(fleet: Fleet) -> None:
    fleet.stop()
    shutil.rmtree(fleet.tmp, ignore_errors=True)

