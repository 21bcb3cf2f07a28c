"""`sluice gateway` processes that join the fleet by themselves, and how the admin API
lists them: shared by the integration tests of membership and internal TLS (a plain
module: importing conftest or another test module is fragile)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from control_plane.runtime import procs
from control_plane.runtime.gateway import GatewayProcess as Gateway
from control_plane.runtime.nginx_conf import GatewayConfig

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Member:
    """A `sluice gateway` process, and a handle to read its listeners."""
    name: str
    proc: object
    view: Gateway

    @property
    def url(self) -> str:
        return self.view.url


def start_member(stack, name: str, ports: tuple[int, int] | None = None,
                 **env) -> Member:
    port, internal = ports or procs.free_ports(2)
    prefix = stack.tmp / name
    environ = dict(stack.env(), SLUICE_CONTROL_PLANE_URL=f"http://127.0.0.1:{stack.api_port}",
                   SLUICE_GATEWAY_NAME=name, SLUICE_GATEWAY_PORT=str(port),
                   SLUICE_INTERNAL_PORT=str(internal), SLUICE_GATEWAY_HOST="127.0.0.1",
                   SLUICE_HEARTBEAT_INTERVAL="0.3", **env)
    environ.pop("SLUICE_CONFIG", None)
    proc = procs.spawn([sys.executable, "-m", "control_plane.cli", "gateway", "--prefix",
                        str(prefix), "--workers", "1"],
                       log=stack.tmp / f"{name}.log", env=environ, cwd=REPO)
    stack.children[name] = proc
    # the test's own handle reads the listeners the way the process serves them
    view = Gateway(GatewayConfig(prefix=prefix, port=port, internal_port=internal,
                                 token=stack.gateway_token,
                                 internal_tls_cert=env.get("SLUICE_INTERNAL_TLS_CERT"),
                                 internal_ca=env.get("SLUICE_INTERNAL_CA")))
    return Member(name, proc, view)


def listed(stack) -> dict[str, dict]:
    return {g["name"]: g for g in stack.admin.list("gateways")}


def summary(stack) -> dict:
    return stack.admin.session.get(stack.admin_url + "/fleet", timeout=5).json()
