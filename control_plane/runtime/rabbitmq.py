"""A private RabbitMQ node under a folder of ours (Debian's rabbitmq-server).

`sluice up` runs one under `var/rabbitmq` when no SLUICE_AMQP_URL is given, and the
tests run a throwaway one, so the demo, the tests and production share one broker.
Never the machine's own node: its own node name, AMQP and distribution ports, Mnesia
and log folders, an empty plugin list and a private HOME (the Erlang cookie).
Messages survive a restart on the same folder (durable queues, persistent messages).

Supervised by `sluice up` (runtime/supervisor.py): `start()`, `alive()`, `stop()`,
`describe()`.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pika

from control_plane.runtime import procs

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
# the readiness probe's refused connections would each log an ERROR with a traceback
logging.getLogger("pika").setLevel(logging.CRITICAL)
USER = "sluice"


def binary() -> str:
    path = SERVER if Path(SERVER).exists() else shutil.which("rabbitmq-server")
    if not path:
        raise FileNotFoundError("rabbitmq-server is not installed: run scripts/setup.sh "
                                "(Debian package rabbitmq-server)")
    return path


@dataclass
class Broker:
    """One node: `workdir` holds its data, logs, config and cookie."""

    workdir: Path
    port: int = 0
    dist_port: int = 0
    epmd_port: int = 0
    password: str = ""
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"amqp://{USER}:{self.password}@127.0.0.1:{self.port}/%2F"

    @property
    def _state(self) -> Path:
        return self.workdir / "broker.json"

    def _prepare(self) -> None:
        """Ports and password, made once and kept, so a restart serves the same URL."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._state.exists():
            saved = json.loads(self._state.read_text())
            self.port = self.port or saved["port"]
            self.dist_port = self.dist_port or saved["dist_port"]
            self.epmd_port = self.epmd_port or saved.get("epmd_port", 0)
            self.password = self.password or saved["password"]
        if not self.port or not self.dist_port or not self.epmd_port:
            self.port, self.dist_port, self.epmd_port = procs.free_ports(3)
        self.password = self.password or secrets.token_urlsafe(18)
        self._state.touch(mode=0o600)
        self._state.write_text(json.dumps({"port": self.port, "dist_port": self.dist_port,
                                           "epmd_port": self.epmd_port,
                                           "password": self.password}))
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        (self.workdir / "enabled_plugins").write_text("[].\n")
        # the only user is ours; loopback only; no guest
        (self.workdir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "loopback_users = none\n"
            f"default_user = {USER}\n"
            f"default_pass = {self.password}\n"
            "default_vhost = /\n"
            "disk_free_limit.absolute = 50MB\n")

    def env(self) -> dict:
        w = self.workdir
        return dict(os.environ,
                    HOME=str(w / "home"),
                    RABBITMQ_NODENAME=f"sluice-{self.port}@localhost",
                    RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
                    RABBITMQ_NODE_PORT=str(self.port),
                    RABBITMQ_DIST_PORT=str(self.dist_port),
                    RABBITMQ_MNESIA_BASE=str(w / "mnesia"),
                    RABBITMQ_LOG_BASE=str(w / "log"),
                    RABBITMQ_CONFIG_FILE=str(w / "rabbitmq.conf"),
                    RABBITMQ_ENABLED_PLUGINS_FILE=str(w / "enabled_plugins"),
                    RABBITMQ_PLUGINS_EXPAND_DIR=str(w / "plugins-expand"),
                    RABBITMQ_ADVANCED_CONFIG_FILE=str(w / "advanced.config"),
                    RABBITMQ_CONF_ENV_FILE=str(w / "rabbitmq-env.conf"),
                    RABBITMQ_USE_LONGNAME="false",
                    # a node that cannot start dumps here, not into the caller's folder
                    ERL_CRASH_DUMP=str(w / "erl_crash.dump"),
                    # the machine's epmd (4369) would be shared: an epmd of our own
                    ERL_EPMD_PORT=str(self.epmd_port))

    def start(self, timeout: float = 60.0) -> None:
        """Start the node; return once AMQP answers. A first start whose ports were
        taken meanwhile (free ports are only free when chosen) tries fresh ones once."""
        fresh = not self._state.exists()
        try:
            self._start(timeout)
        except RuntimeError:
            if not fresh:
                raise
            self.stop()
            self._state.unlink(missing_ok=True)
            self.port = self.dist_port = self.epmd_port = 0
            self._start(timeout)

    def _start(self, timeout: float) -> None:
        self.kill()
        self._prepare()
        self.proc = procs.spawn([binary()], log=self.workdir / "broker.out", env=self.env(),
                                cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            if self._amqp_ready():
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"rabbitmq-server did not serve AMQP on port {self.port} within "
                           f"{timeout:g} s: {self.log_tail()}")

    def _amqp_ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        try:
            conn = pika.BlockingConnection(pika.URLParameters(
                self.url + "?connection_attempts=1&socket_timeout=1"))
        except Exception:  # noqa: BLE001 - not yet
            return False
        conn.close()
        return True

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the node, and the private epmd it started (which daemonizes out of
        the node's process group)."""
        self.kill(sig)
        for pid in self._epmd_pids():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """The node's process group only (SIGKILL: what an outage looks like)."""
        if self.proc is not None:
            procs.stop(self.proc, sig=sig)
            self.proc = None

    def _epmd_pids(self) -> list[int]:
        if not self.epmd_port:
            return []
        mine = f"ERL_EPMD_PORT={self.env()['ERL_EPMD_PORT']}".encode()
        home = f"HOME={self.workdir / 'home'}".encode()
        found = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if not (d / "cmdline").read_bytes().split(b"\0")[0].endswith(b"epmd"):
                    continue
                env = (d / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine in env and home in env:
                found.append(int(d.name))
        return found

    def describe(self) -> str:
        if self.proc is None:
            return "was never started"
        return f"pid {self.proc.pid} {procs.exit_reason(self.proc.poll())} " \
               f"(log: {self.workdir / 'broker.out'})"

    def log_tail(self) -> str:
        try:
            return (self.workdir / "broker.out").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"
