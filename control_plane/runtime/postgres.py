"""A private PostgreSQL cluster under a folder of ours (Debian's binaries).

`sluice up` runs one under `var/pg` when no DATABASE_URL is given, and the tests run
a throwaway one when no TEST_DATABASE_URL is given, so the demo, the tests and
production share one engine. PostgreSQL refuses to run as root: when we are root the
cluster belongs to the `postgres` system user and its commands run as that user.
"""
from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from control_plane.runtime.procs import free_port

SUPERUSER = "sluice"


def _bindir() -> Path:
    """Folder of initdb/pg_ctl: Debian keeps them out of PATH, per major version."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    which = shutil.which("pg_ctl")
    if which:
        return Path(which).resolve().parent
    raise RuntimeError("PostgreSQL server binaries not found: install the Debian package "
                       "'postgresql' (make run / make test do it)")


def _owner() -> pwd.struct_passwd | None:
    """The user the cluster runs as when we are root; None when we are not root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError as exc:
        raise RuntimeError("running as root needs the 'postgres' system user "
                           "(created by the Debian package 'postgresql')") from exc


@dataclass
class Cluster:
    """One cluster: `datadir` holds its files, `port` and `password` its access."""

    datadir: Path
    port: int = 0
    password: str = ""

    @property
    def _state(self) -> Path:
        return self.datadir.parent / (self.datadir.name + ".json")

    def url(self, dbname: str = "postgres") -> str:
        return (f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{dbname}")

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(_bindir() / args[0]), *args[1:]]
        owner = _owner()
        if owner is not None:
            cmd = ["runuser", "-u", owner.pw_name, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True)

    def _chown(self, path: Path) -> None:
        owner = _owner()
        if owner is not None:
            os.chown(path, owner.pw_uid, owner.pw_gid)

    def init(self) -> None:
        """Create the cluster unless it exists; keep its port and password beside it."""
        import json

        if self._state.exists() and (self.datadir / "PG_VERSION").exists():
            state = json.loads(self._state.read_text())
            self.port = self.port or state["port"]
            self.password = state["password"]
            return
        if self.datadir.exists():
            shutil.rmtree(self.datadir)
        self.datadir.mkdir(parents=True, mode=0o700)
        self._chown(self.datadir)
        self.password = secrets.token_urlsafe(18)
        pwfile = self.datadir.parent / (self.datadir.name + ".pwfile")
        pwfile.touch(mode=0o600)
        pwfile.write_text(self.password + "\n")
        self._chown(pwfile)
        try:
            self._run("initdb", "-D", str(self.datadir), "-U", SUPERUSER, "-E", "UTF8",
                      "--locale=C", "--auth-local=scram-sha-256",
                      "--auth-host=scram-sha-256", f"--pwfile={pwfile}")
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"initdb failed: {exc.stderr.strip()}") from exc
        finally:
            pwfile.unlink(missing_ok=True)
        self.port = self.port or free_port()
        self._state.write_text(json.dumps({"port": self.port, "password": self.password}))
        self._state.chmod(0o600)

    def postmaster_pid(self) -> int | None:
        """The server's pid from postmaster.pid (which outlives a killed server)."""
        try:
            return int((self.datadir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        """Whether the server process runs; cheap enough to ask every half second."""
        pid = self.postmaster_pid()
        if pid is None:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        if name != "postgres" or rest.split()[0] == "Z":
            return False
        try:   # a stale pid taken since by another cluster's server: not ours
            return os.readlink(f"/proc/{pid}/cwd") == str(self.datadir.resolve())
        except OSError:
            return True   # not ours to inspect (we are not root): trust the name

    def describe(self) -> str:
        """How the server ended, for a log line."""
        pid = self.postmaster_pid()
        return (f"PostgreSQL {f'(pid {pid}) is gone' if pid else 'is not running'} "
                f"(log: {self.datadir / 'server.log'})")

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.datadir), "status", check=False).returncode == 0

    def start(self, timeout: float = 30.0) -> None:
        """Start on loopback only (idempotent); wait until it accepts connections."""
        if self.alive():   # not pg_ctl status: it takes a killed, unreaped server for alive
            return
        opts = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                f"-c unix_socket_directories={self.datadir} -c fsync=off "
                f"-c max_connections=200")
        log = self.datadir / "server.log"
        proc = self._run("pg_ctl", "-D", str(self.datadir), "-l", str(log), "-o", opts,
                         "-w", "-t", str(int(timeout)), "start", check=False)
        if proc.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            # the server's own FATAL line says why ("lock file ... already exists")
            fatal = [line for line in tail.splitlines() if "FATAL:" in line]
            reason = fatal[-1].split("FATAL:", 1)[1].strip() if fatal else "see below"
            raise RuntimeError(f"PostgreSQL did not start on port {self.port}: {reason}\n"
                               f"{proc.stderr.strip()}\n{tail}")
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        import psycopg2

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg2.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if (self.datadir / "PG_VERSION").exists():
            self._run("pg_ctl", "-D", str(self.datadir), "-m", "fast", "-w", "stop",
                      check=False)

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create database `name` (optionally from `template`); return its URL."""
        return create_database(self.url(), name, template)


def create_database(server_url: str, name: str, template: str | None = None) -> str:
    """Create database `name` on the server of `server_url`; return the new URL."""
    import psycopg2
    from psycopg2 import sql
    from sqlalchemy.engine import make_url

    conn = psycopg2.connect(server_url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template:
                stmt += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
            cur.execute(stmt)
    finally:
        conn.close()
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def drop_database(server_url: str, name: str) -> None:
    import psycopg2
    from psycopg2 import sql

    conn = psycopg2.connect(server_url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                        .format(sql.Identifier(name)))
    finally:
        conn.close()


def database_exists(server_url: str, name: str) -> bool:
    import psycopg2

    conn = psycopg2.connect(server_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            return cur.fetchone() is not None
    finally:
        conn.close()
