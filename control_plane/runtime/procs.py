"""Small helpers for starting and stopping the processes Sluice is made of.

Used by `sluice up`, the test fixtures and the benchmarks alike, so that all three
start the parts the same way.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import requests


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct free ports: the sockets stay bound until all are chosen."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_http(url: str, timeout: float = 15.0, proc: subprocess.Popen | None = None,
              headers: dict | None = None) -> requests.Response:
    """Poll `url` until it answers with any HTTP status; raise if it never does."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited with {proc.returncode} "
                               f"before {url} answered")
        try:
            return requests.get(url, timeout=1, headers=headers)
        except requests.RequestException as exc:
            last = exc
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s: {last}")


def wait_port(port: int, host: str = "127.0.0.1", timeout: float = 15.0) -> None:
    """Wait until something accepts TCP connections on host:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


def group_members(pgid: int) -> list[int]:
    """PIDs of the live (not zombie) processes in process group `pgid`."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            # after the command name, which may hold spaces: state ppid pgrp ...
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(d.name))
    return found


def _end_group(pgid: int, sig: int, timeout: float) -> None:
    """`sig` to what is left of a process group, SIGKILL after `timeout`.

    A child killed from outside (kill -9 on nginx's master, on gunicorn's arbiter)
    leaves its own children running in its group, holding its ports: they must go
    before the child can be started again.
    """
    if not group_members(pgid):
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() > deadline:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        time.sleep(0.05)


def stop(proc: subprocess.Popen | None, timeout: float = 10.0,
         sig: int = signal.SIGTERM) -> None:
    """Stop a child and its process group: `sig`, then SIGKILL after `timeout`.

    Also ends what a child that already died left behind in its group."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
    _end_group(proc.pid, sig, timeout)


def exit_reason(returncode: int | None) -> str:
    """How a child ended, in words: "exited with 1", "was killed by SIGKILL"."""
    if returncode is None:
        return "is running"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with {returncode}"


def spawn(args: list[str], log: Path | None = None, env: dict | None = None,
          cwd: Path | None = None) -> subprocess.Popen:
    """Start a child in its own process group, output to `log` (or inherited)."""
    out = open(log, "ab") if log else None
    try:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT if out else None,
                                stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                start_new_session=True)
    finally:
        if out:
            out.close()
