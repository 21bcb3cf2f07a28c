"""The controller's Prometheus scrapes of backends that name a `metrics_url`.

Each weight tick calls `kick()`, which never waits on the network:

    store what the scrapes since the last tick found  (one transaction)
    list enabled backends with a metrics_url
    start a scrape of each one whose previous scrape has finished
        (a pool of MAX_PARALLEL threads; CONNECT_TIMEOUT / READ_TIMEOUT each)

So a hundred backends, or a few that hang, delay no tick: a slow backend is simply
scraped less often and its figure ages until it is stale (services/scrapes.py). The
weight step reads the fresh figures from the database like agent telemetry.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import requests
from requests.adapters import HTTPAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.clients.backend_tls import BackendClients, BackendTLS
from control_plane.controller.fanout import Notes
from control_plane.services import prom_text, scrapes
from control_plane.tables.config import Backend

log = logging.getLogger("sluice.controller.scraper")

MAX_PARALLEL = 16
CONNECT_TIMEOUT = 1.0
READ_TIMEOUT = 2.0
MAX_BYTES = 8 << 20        # a vLLM answer is ~100 KiB; refuse anything absurd


class Scraper:
    def __init__(self) -> None:
        # one client per TLS setting: an https metrics_url is reached with its
        # backend's TLS settings, as the gateway and the health probes reach it
        self.http = BackendClients()
        self.http.session(None).mount("http://", HTTPAdapter(pool_maxsize=MAX_PARALLEL))
        self._pool = ThreadPoolExecutor(max_workers=MAX_PARALLEL,
                                        thread_name_prefix="sluice-scrape")
        self._lock = threading.Lock()
        self._inflight: set[int] = set()
        self._done: list[scrapes.Outcome] = []
        self._notes = Notes(log)

    def kick(self, session_factory: Callable[[], Session]) -> int:
        """Store finished scrapes and start the next ones; returns how many started."""
        with self._lock:
            done, self._done = self._done, []
        with session_factory() as session:
            scrapes.store(session, done)
            targets = [(b.id, b.name, b.metrics_url, b.metrics_format, _tls(b))
                       for b in session.scalars(
                           select(Backend).where(Backend.enabled,
                                                 Backend.metrics_url.is_not(None)))]
        started = 0
        for bid, name, url, fmt, tls in targets:
            with self._lock:
                if bid in self._inflight:
                    continue
                self._inflight.add(bid)
            self._pool.submit(self._scrape, bid, name, url, fmt, tls)
            started += 1
        return started

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.http.close()

    def _scrape(self, bid: int, name: str, url: str, fmt: str,
                tls: BackendTLS | None) -> None:
        outcome = None
        try:
            text = self._fetch(url, tls)
            reading = prom_text.parse(text, fmt)
            outcome = scrapes.Outcome(bid, fmt, _now(), reading.free_fraction, reading.values)
            self._notes(bid, None, ok_name=f"scrape of backend {name}")
        except (requests.RequestException, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
            outcome = scrapes.Outcome(bid, fmt, _now(), error=error)
            self._notes(bid, f"scrape of backend {name} ({url}): {error}",
                        ok_name=f"scrape of backend {name}")
        except Exception:   # noqa: BLE001 - a scrape thread must always report back
            log.exception("scrape of backend %s", name)
            outcome = scrapes.Outcome(bid, fmt, _now(), error="internal error")
        finally:
            with self._lock:
                if outcome is not None:
                    self._done.append(outcome)
                self._inflight.discard(bid)

    def _fetch(self, url: str, tls: BackendTLS | None) -> str:
        with self.http.get(url, tls, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), stream=True,
                           headers={"Accept": "text/plain"}) as r:
            if r.status_code != 200:
                raise requests.HTTPError(f"HTTP {r.status_code}")
            body = r.raw.read(MAX_BYTES + 1, decode_content=True)
        if len(body) > MAX_BYTES:
            raise ValueError(f"answer larger than {MAX_BYTES} bytes")
        return body.decode("utf-8", errors="replace")



def _tls(b: Backend) -> BackendTLS | None:
    """The TLS settings for the backend's metrics_url (None for http://)."""
    return BackendTLS.for_url(b.metrics_url, verify=b.tls_verify, ca=b.tls_ca,
                              server_name=b.tls_server_name, client_cert=b.tls_client_cert,
                              client_key=b.tls_client_key)


def _now() -> datetime:
    return datetime.now(timezone.utc)
