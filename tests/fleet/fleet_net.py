"""The fleet's network: one namespace per host, joined by a bridge in a namespace of
its own, with a veth from the root namespace (see fleet_harness.py for the picture).

Every host has its own address on one private /24 of 10.200.0.0/16 (picked free at
random), loopback and one veth to the bridge, and no default route: nothing it sends
can leave the bridge, and the root namespace only gains a route to that /24 through
its own veth (`check_contained`). Cutting a host off: `link(host, up=False)`; a
partition between two hosts: `partition(a, b)`; `heal()` undoes both, `remove()`
everything.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import random
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Held while a fleet picks a free /24 and builds on it: fleets of two test processes
# (xdist workers, two checkouts' suites) built at the same moment picked the same
# subnet, and the second one's routes went through the first one's veth.
SUBNET_LOCK = Path("/tmp/sluice-fleet-subnets.lock")


@contextlib.contextmanager
def subnet_lock():
    with open(SUBNET_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


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
