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


def stop(proc: subprocess.Popen | None, timeout: float = 10.0,
         sig: int = signal.SIGTERM) -> None:
    """Stop a child and its process group: `sig`, then SIGKILL after `timeout`."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
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
