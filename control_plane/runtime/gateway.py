"""Run one Sluice gateway: nginx from the generated config in its own prefix.

Used by `sluice up`, the test fixtures and the benchmarks, so that all of them start
the data plane the same way::

    gw = GatewayProcess(GatewayConfig(prefix=Path("var/gw"), port=8080, internal_port=8081,
                                      token=secrets.token_urlsafe(32)))
    gw.start()
    gw.push(snapshot)      # POST /internal/snapshot
    gw.stop()

With `tls_port`, `tls_cert` and `tls_key` the public server also listens for HTTPS
(HTTP/2 by ALPN) with the same locations; `plain=False` leaves HTTPS only. nginx
reads the certificate files at start and at every `reload()` (what `sluice gateway`
does on SIGHUP), so a renewed certificate is served from the next new connection.

The prefix holds `conf/nginx.conf` and `conf/delivery.conf`, which it includes (mode
0600: they carry the internal token),
`logs/` (error.log, nginx.pid), `lkg/` (the last-known-good snapshot, written by the
workers), `tmp/` (nginx's temp paths) and, for https backends, `conf/backend_tls.conf`
with `conf/tls/` (their TLS locations and CAs: runtime/backend_trust.py). What
`GatewayConfig` holds and how it becomes conf/nginx.conf: runtime/nginx_conf.py.
"""
from __future__ import annotations

import grp
import logging
import os
import pwd
import signal
import subprocess
import threading
import time
from pathlib import Path

import requests

from control_plane.clients.gateway import GatewayClient
from control_plane.runtime import backend_trust, nginx_tls, procs
from control_plane.runtime.gateway_config import GatewayConfig
from control_plane.runtime.nginx_conf import WORKER_GROUP, WORKER_USER, _is_root, render_all

log = logging.getLogger("sluice.gateway")

NGINX = "/usr/sbin/nginx"


def _check_reachable_by_workers(path: Path) -> None:
    """Fail early, with a clear message, when the worker user cannot reach `path`.

    pytest's tmp_path and many home folders are mode 0700: nginx would start, then
    fail at the first snapshot push with EACCES on lkg/.
    """
    for parent in reversed(path.resolve().parents):
        if not (parent.stat().st_mode & 0o001):
            raise PermissionError(f"{parent} is not searchable by others: nginx workers run as "
                                  f"{WORKER_USER} and could not reach {path}")


class GatewayProcess:
    """One nginx process tree in its own prefix (its row in the database, a fleet member,
    is tables.config.Gateway)."""

    def __init__(self, cfg: GatewayConfig):
        self.cfg = cfg
        self.prefix = Path(cfg.prefix).resolve()
        self.proc: subprocess.Popen | None = None
        self._lkg_seen: int | None = None   # sync_trust: the lkg file's mtime last read
        self.client = GatewayClient(cfg.token, timeout=10, retries=0,
                                    ca=str(cfg.internal_ca) if cfg.internal_ca else None)

    @property
    def url(self) -> str:
        """The public URL: plain HTTP, or HTTPS when the plain listener is off."""
        if not self.cfg.plain:
            return self.tls_url
        return f"http://127.0.0.1:{self.cfg.port}"

    @property
    def tls_url(self) -> str:
        if self.cfg.tls_port is None:
            raise RuntimeError("this gateway has no HTTPS listener (tls_port is not set)")
        return f"https://127.0.0.1:{self.cfg.tls_port}"

    @property
    def internal_url(self) -> str:
        """Where this host reaches the internal listener: its address, or loopback
        when it listens on every interface."""
        scheme = "https" if self.cfg.internal_tls_cert else "http"
        host = self.cfg.internal_host
        if host in ("", "0.0.0.0", "::", "[::]", "*"):
            host = "127.0.0.1"
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.cfg.internal_port}"

    @property
    def conf_path(self) -> Path:
        return self.prefix / "conf" / "nginx.conf"

    @property
    def error_log(self) -> Path:
        return self.prefix / "logs" / "error.log"

    @property
    def lkg_path(self) -> Path:
        return self.prefix / "lkg" / "snapshot.json"

    def write_config(self) -> Path:
        """Create the prefix layout and write conf/nginx.conf and the files it
        includes (0600)."""
        for sub in ("conf", "logs", "lkg", "tmp"):
            (self.prefix / sub).mkdir(parents=True, exist_ok=True)
        lkg = self.prefix / "lkg"
        if _is_root():
            _check_reachable_by_workers(lkg)
            os.chown(lkg, pwd.getpwnam(WORKER_USER).pw_uid, grp.getgrnam(WORKER_GROUP).gr_gid)
            os.chmod(lkg, 0o700)
        files = render_all(self.cfg)
        # the TLS locations of the https backends the last-known-good snapshot has
        backend_trust.write(self.conf_path.parent,
                            backend_trust.needed(backend_trust.read_lkg(self.lkg_path)))
        # the included files first: nginx.conf names them (all 0600: the token)
        for name in sorted(files, key=lambda n: n == "nginx.conf"):
            path = self.conf_path.parent / name
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(files[name])
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        return self.conf_path

    def _nginx(self, *args: str) -> list[str]:
        return [NGINX, "-p", f"{self.prefix}/", "-c", "conf/nginx.conf", *args]

    def test_config(self) -> str:
        """`nginx -t` on the written config; returns its output, raises on failure."""
        res = subprocess.run(self._nginx("-t"), capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"nginx -t failed:\n{res.stderr}")
        return res.stderr

    def start(self, log_to: Path | None = None) -> None:
        """Write the config, start nginx as a child, wait until the internal listener answers.

        Also starts it again after nginx died: the workers a killed master left behind
        are stopped first, and the new workers serve the last-known-good snapshot
        from lkg/ until the controller pushes a newer one."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("gateway already running")
        self.stop()
        self.write_config()
        # a killed nginx leaves its unix socket behind, and bind() would refuse it
        nginx_tls.h1_socket(self.cfg).unlink(missing_ok=True)
        self.proc = procs.spawn(self._nginx("-g", "daemon off;"), log=log_to)
        try:
            self._wait_serving()
        except Exception as exc:
            self.stop()
            # nginx reports configuration errors (a certificate it cannot load) on its
            # stderr, before it opens logs/error.log: show both
            said = ""
            if log_to is not None and Path(log_to).exists():
                said = "\n".join(Path(log_to).read_text(errors="replace").splitlines()[-10:])
            raise RuntimeError(f"gateway did not start: {exc}\n{said}\n"
                               f"{self.tail_error_log()}") from exc

    def _wait_serving(self, timeout: float = 15.0) -> None:
        """Until our own internal listener answers: a port taken by someone else
        makes nginx exit, but that someone could answer first."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError("nginx exited before its internal listener answered")
            try:
                r = self.client.get(self.internal_url, "/internal/snapshot", timeout=1)
                break
            except requests.RequestException as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.internal_url} did not answer within "
                                       f"{timeout}s: {exc}") from None
                time.sleep(0.05)
        if r.status_code != 200 or "source" not in r.json():
            raise RuntimeError(f"{self.internal_url} answered {r.status_code}: {r.text[:200]}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"nginx exited with {self.proc.returncode}")

    def _worker_pids(self) -> set[int]:
        if self.proc is None:
            return set()
        try:
            out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True,
                                 text=True).stdout
        except FileNotFoundError:  # no procps: fall back to /proc
            out = ""
            for d in Path("/proc").iterdir():
                if d.name.isdigit():
                    try:
                        fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if int(fields[1]) == self.proc.pid:
                        out += d.name + "\n"
        return {int(p) for p in out.split()}

    def reload(self, timeout: float = 15.0) -> None:
        """Re-render the config and HUP the master (`nginx -s reload`); return once the
        old workers are gone and new ones serve."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("gateway is not running")
        self.write_config()
        self.test_config()
        old = self._worker_pids()
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # New workers are the ones to wait for; old ones may linger while they
            # finish in-flight requests (a long SSE stream), which is fine.
            if len(self._worker_pids() - old) >= self.cfg.workers:
                self._wait_serving()
                self._wait_retired(old, deadline)
                return
            time.sleep(0.05)
        raise TimeoutError(f"nginx workers did not turn over within {timeout}s\n"
                           f"{self.tail_error_log()}")

    @staticmethod
    def _wait_retired(old: set[int], deadline: float) -> None:
        """Until the old workers stopped taking new connections: gone, or renamed
        "worker process is shutting down" (they may finish a long stream)."""
        def taking(pid: int) -> bool:
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                return False
            return b"shutting down" not in title and b"worker process" in title
        while any(taking(pid) for pid in old) and time.monotonic() < deadline:
            time.sleep(0.02)

    def sync_trust(self) -> bool:
        """Reload when the served snapshot needs a backend CA the config lacks (or
        holds one no longer needed); True when it reloaded. Cheap when nothing
        changed: wait() (`sluice gateway`) and `sluice up` call it twice a second,
        push() after each push."""
        try:
            mtime = self.lkg_path.stat().st_mtime_ns
        except OSError:
            return False
        if mtime == self._lkg_seen:
            return False
        self._lkg_seen = mtime
        want = set(backend_trust.needed(backend_trust.read_lkg(self.lkg_path)))
        if want == backend_trust.rendered(self.conf_path.parent):
            return False
        try:
            self.reload()
        except (RuntimeError, ValueError, TimeoutError) as exc:
            # keep serving the previous configuration; the next push tries again
            log.error("gateway reload for backend TLS trust failed: %s", exc)
            return False
        return True

    def alive(self) -> bool:
        """Whether nginx's master runs (it replaces dead workers by itself)."""
        return self.proc is not None and self.proc.poll() is None

    def describe(self) -> str:
        """How nginx ended, for a log line."""
        if self.proc is None:
            return "nginx is not started"
        return (f"nginx master pid {self.proc.pid} "
                f"{procs.exit_reason(self.proc.poll())} (log: {self.error_log})")

    def wait(self, stopping: threading.Event | None = None,
             interval: float = 0.5) -> int | None:
        """Block until nginx's master exits (return its exit status) or `stopping` is
        set (return None)."""
        if self.proc is None:
            raise RuntimeError("gateway is not started")
        stopping = stopping or threading.Event()
        while not stopping.wait(interval):
            if not self.alive():
                return self.proc.returncode
            self.sync_trust()   # a pushed snapshot with a new backend CA: reload
        return None

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop (QUIT), then TERM/KILL; nothing is left running."""
        if self.proc is None:
            return
        procs.stop(self.proc, timeout=timeout, sig=signal.SIGQUIT)
        self.proc = None

    def push(self, snapshot: dict) -> requests.Response:
        """POST a snapshot to the internal listener; then reload when it brings a
        backend CA this config has no TLS location for (sync_trust)."""
        r = self.client.post(self.internal_url, "/internal/snapshot", snapshot)
        if r.status_code == 200:
            self.sync_trust()
        return r

    def snapshot_status(self) -> dict:
        return self.client.snapshot_status(self.internal_url)

    def push_weights(self, table: dict) -> requests.Response:
        """POST a weight table ({"version": N, "weights": {"<id>": 0..1000}})."""
        return self.client.post(self.internal_url, "/internal/weights", table)

    def weights_status(self) -> dict:
        return self.client.weights_status(self.internal_url)

    def stats(self) -> dict:
        """GET /internal/stats: {"backends": {"<id>": {...}}, "weights_version": N}."""
        return self.client.stats(self.internal_url)

    def usage(self) -> dict:
        """GET /internal/usage: {"boot", "started_at", "counters", "seed_version"}."""
        return self.client.usage(self.internal_url)

    def push_usage(self, body: dict) -> requests.Response:
        """POST the fleet's usage ({"boot", "version", "day", "month", "usage"})."""
        return self.client.post(self.internal_url, "/internal/usage", body)

    def served_version(self) -> int:
        """The snapshot version this gateway serves; 0 when it has none."""
        return int(self.snapshot_status()["version"])

    def tail_error_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.error_log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no error log)"

    def __enter__(self) -> "GatewayProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
