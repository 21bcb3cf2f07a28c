"""A gateway's membership in the fleet: `sluice gateway` started with
SLUICE_CONTROL_PLANE_URL registers itself with the admin API and heartbeats, on a
thread of its own beside nginx.

Every SLUICE_HEARTBEAT_INTERVAL seconds (default 5) it POSTs

    POST {control plane}/api/v1/gateways/register
    Authorization: Bearer <SLUICE_GATEWAY_TOKEN>
    {"name": SLUICE_GATEWAY_NAME (default: the host name),
     "internal_url": SLUICE_GATEWAY_ADVERTISE_URL (default: the internal listener),
     "boot_id": <this nginx start's id, read from GET /internal/usage>,
     "sluice_version": <the installed Sluice>}

Each POST is both the registration and the heartbeat, so a control plane that lost
the row, or a gateway that restarted (another boot id: it gets the current snapshot
pushed at once), needs nothing else. On a clean stop it sends "leaving": true, so the
controller stops pushing to it at once instead of after the TTL. Failures are logged
when they change, never with the token, and retried at the next beat.
"""
from __future__ import annotations

import importlib.metadata
import logging
import socket
import threading
from collections.abc import Callable

import requests

log = logging.getLogger("sluice.membership")

TIMEOUT = 5.0
REGISTER_PATH = "/api/v1/gateways/register"


def sluice_version() -> str:
    try:
        return importlib.metadata.version("sluice")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def default_name() -> str:
    return socket.gethostname()[:128] or "gateway"


def register_url(control_plane_url: str) -> str:
    """The registration endpoint of an admin API base URL (with or without /api/v1)."""
    base = control_plane_url.rstrip("/")
    if base.endswith("/api/v1"):
        base = base[: -len("/api/v1")]
    return base + REGISTER_PATH


class Membership:
    """Heartbeats on a daemon thread until stop()."""

    def __init__(self, control_plane_url: str, token: str, name: str, advertise_url: str,
                 boot_id: Callable[[], str], interval: float = 5.0,
                 ca: str | None = None):
        self.url = register_url(control_plane_url)
        self.name = name
        self.advertise_url = advertise_url.rstrip("/")
        self.interval = interval
        self._boot_id = boot_id
        self._http = requests.Session()
        self._http.headers["Authorization"] = f"Bearer {token}"
        self._verify: str | bool = ca or True   # per request: see clients/gateway.py
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_problem: str | None = ""   # "": nothing sent yet
        self.beats = 0   # heartbeats the control plane took
        self._boot: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sluice-membership",
                                        daemon=True)
        self._thread.start()

    def stop(self, leaving: bool = True) -> None:
        """End the heartbeats; with `leaving`, tell the control plane (best effort)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=TIMEOUT + 1)
        if leaving and self.beats:
            self.beat(leaving=True)
        self._http.close()

    def beat(self, leaving: bool = False) -> bool:
        """One registration; whether the control plane took it."""
        try:
            if not (leaving and self._boot):   # leaving: nginx may be stopping already
                self._boot = self._boot_id()
        except Exception as exc:  # noqa: BLE001 - nginx not answering yet: next beat
            self._note(f"cannot read this gateway's boot id: {type(exc).__name__}")
            return False
        body = {"name": self.name, "internal_url": self.advertise_url,
                "boot_id": self._boot, "sluice_version": sluice_version()}
        if leaving:
            body["leaving"] = True
        try:
            resp = self._http.post(self.url, json=body, timeout=TIMEOUT, verify=self._verify)
        except requests.RequestException as exc:
            self._note(f"control plane {self.url} unreachable: {type(exc).__name__}")
            return False
        if resp.status_code != 200:
            try:
                message = resp.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = resp.text[:200]
            self._note(f"registration refused by {self.url}: HTTP {resp.status_code}: "
                       f"{message}")
            return False
        self.beats += 1
        if self.beats == 1:
            self._check_ttl(resp)
        if self._last_problem is not None:
            log.info("gateway %s %s the fleet at %s (internal URL %s)", self.name,
                     "left" if leaving else "joined", self.url, self.advertise_url)
            self._last_problem = None
        return True

    def _check_ttl(self, resp: requests.Response) -> None:
        """Heartbeats no more often than the control plane's TTL would make this
        gateway flap between live and stale: say so once."""
        try:
            ttl = float(resp.json()["ttl_s"])
        except (ValueError, KeyError, TypeError):
            return
        if ttl <= self.interval:
            log.warning("SLUICE_HEARTBEAT_INTERVAL (%.1f s) is not below the control "
                        "plane's SLUICE_GATEWAY_TTL (%.1f s): this gateway will flap "
                        "between live and stale", self.interval, ttl)

    def _note(self, problem: str) -> None:
        if problem != self._last_problem:
            log.warning("%s", problem)
            self._last_problem = problem

    def _run(self) -> None:
        while not self._stop.is_set():
            self.beat()
            self._stop.wait(self.interval)


def advertise_default(internal_host: str, internal_port: int, tls: bool) -> str:
    """The internal listener's URL as another host would reach it: its address, or
    this host's primary address when it listens on every interface."""
    host = internal_host
    if host in ("", "0.0.0.0", "::", "[::]", "*"):
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = socket.gethostname()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{internal_port}"


def from_settings(settings, boot_id: Callable[[], str]) -> Membership | None:
    """The membership `sluice gateway` runs, or None without SLUICE_CONTROL_PLANE_URL."""
    if not settings.control_plane_url:
        return None
    advertise = settings.advertise_url or advertise_default(
        settings.internal_host, settings.internal_port, bool(settings.internal_tls_cert))
    return Membership(settings.control_plane_url, settings.gateway_token,
                      settings.gateway_name or default_name(), advertise, boot_id,
                      interval=settings.heartbeat_interval)
