"""A private redis-server for the tests and the benchmarks (cluster mode).

Never the machine's own Redis: each instance gets a free port and a temporary
directory, keeps nothing on disk (`--save '' --appendonly no`) and is stopped with
its process::

    with RedisServer.start(workdir) as r:
        r.url                          # redis://127.0.0.1:<port>/0
        r.command("GET", "sluice:qd:9:*:20261129")
"""
from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from control_plane.runtime import procs

REDIS_SERVER = "redis-server"


def binary() -> str:
    path = shutil.which(REDIS_SERVER) or (f"/usr/bin/{REDIS_SERVER}"
                                          if Path(f"/usr/bin/{REDIS_SERVER}").exists() else None)
    if not path:
        raise FileNotFoundError("redis-server is not installed: run scripts/setup.sh "
                                "(Debian package redis-server)")
    return path


@dataclass
class RedisServer:
    workdir: Path
    port: int
    password: str | None = None
    proc: subprocess.Popen | None = None

    def url_for(self, db: int = 0) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    @property
    def url(self) -> str:
        return self.url_for(0)

    @classmethod
    def start(cls, workdir: Path, port: int | None = None,
              password: str | None = None) -> "RedisServer":
        server = cls(Path(workdir), port or procs.free_port(), password)
        server.restart()
        return server

    def restart(self) -> None:
        """Start (again) on the same port, empty."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("redis-server is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.workdir), "--save", "", "--appendonly", "no",
                "--protected-mode", "yes", "--daemonize", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = procs.spawn(args, log=self.workdir / "redis.log")
        try:
            procs.wait_port(self.port, timeout=10)
            if self.command("PING") != "PONG":
                raise RuntimeError("redis-server did not answer PING")
        except Exception:
            self.stop()
            raise RuntimeError(f"redis-server did not start on port {self.port}: "
                               f"{self.log_tail()}") from None

    def stop(self) -> None:
        """Kill it (SIGKILL: what an outage looks like; nothing is saved anyway)."""
        if self.proc is not None:
            procs.stop(self.proc, sig=signal.SIGKILL)
            self.proc = None

    def log_tail(self) -> str:
        try:
            return (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def command(self, *args: str | int, db: int = 0):
        """One command over RESP in database `db`: str, int, None or list; an error
        reply raises."""
        commands = [("AUTH", self.password)] if self.password else []
        if db:
            commands.append(("SELECT", db))
        commands.append(args)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            parts = []
            for cmd in commands:
                parts.append(f"*{len(cmd)}\r\n".encode())
                for a in cmd:
                    b = str(a).encode()
                    parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
            s.sendall(b"".join(parts))
            f = s.makefile("rb")
            for _ in commands[:-1]:
                _read(f)
            return _read(f)

    def __enter__(self) -> "RedisServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _read(f):
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data.decode()
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise RuntimeError(f"unexpected reply {line!r}")
