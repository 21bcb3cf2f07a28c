"""The controller's JWKS step, once per SLUICE_JWKS_INTERVAL (30 s by default):

    each enabled JWT issuer with a jwks_uri -> GET it (clients/jwks.py) ->
    services/jwks_sync.record: new keys in, departed keys retired for
    SLUICE_JWKS_GRACE_S, a failure kept in jwks_last_error -> a config version bump
    when the key set changed, which the next tick pushes like any other change

Like the health probes, a round runs on a background thread that the tick only
starts (`kick`), so a slow identity provider delays no push. A failing fetch keeps the
last good keys and counts in sluice_jwks_fetch_failures_total{issuer}; alert on it, or
on time() - sluice_jwks_last_success_timestamp_seconds.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import requests
from sqlalchemy.orm import Session

from control_plane.clients import jwks
from control_plane.controller import cp_metrics
from control_plane.controller.fanout import Notes, parallel
from control_plane.services import jwks_sync, jwt_keys
from control_plane.settings import Settings

log = logging.getLogger("sluice.controller.jwks")


class JwksLoop:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.next_at = 0.0
        self._thread: threading.Thread | None = None
        self._note = Notes(log)
        self._names: set[str] = set()   # issuers with metric series

    def kick(self, settings: Settings, session_factory: Callable[[], Session]) -> None:
        """Start a round when one is due and none is running; never waits."""
        if self.clock() < self.next_at or (self._thread and self._thread.is_alive()):
            return
        self.next_at = self.clock() + settings.jwks_interval
        self._thread = threading.Thread(target=self._guarded_round, name="jwks",
                                        args=(settings, session_factory), daemon=True)
        self._thread.start()

    def _guarded_round(self, settings: Settings,
                       session_factory: Callable[[], Session]) -> None:
        try:
            self.round(settings, session_factory)
        except Exception:   # a database outage: the next round retries
            log.exception("JWKS round failed")

    def round(self, settings: Settings, session_factory: Callable[[], Session]) -> int:
        """Fetch every issuer's keys and record them; how many issuers' keys changed."""
        with session_factory() as session:
            issuers = jwks_sync.due(session)
        self._forget({name for _, name, _ in issuers})

        def one(issuer: tuple[int, str, str]) -> bool:
            issuer_id, name, url = issuer
            try:
                fetched, error = jwt_keys.from_jwks(jwks.fetch_jwks(
                    http, url, allow_http=settings.jwks_allow_http)), None
            except jwks.JwksError as exc:
                fetched, error = None, str(exc)
            except jwt_keys.KeyError_ as exc:
                fetched, error = None, f"{url}: the JWKS {exc}"
            self._note(("jwks", issuer_id),
                       error and f"JWT issuer {name}: keys not fetched: {error}", name)
            if error is None:
                cp_metrics.JWKS_LAST_SUCCESS.labels(name).set(time.time())
            else:
                cp_metrics.JWKS_FETCH_FAILURES.labels(name).inc()
            with session_factory() as session:
                changed = jwks_sync.record(session, issuer_id, url, fetched, error,
                                           settings.jwks_grace_s)
            if changed:
                log.info("JWT issuer %s: key set changed (%d key(s) from %s)", name,
                         len(fetched or ()), url)
            return changed
        with requests.Session() as http:
            return sum(parallel(issuers, one))

    def _forget(self, names: set[str]) -> None:
        """Drop the series of issuers deleted, disabled or no longer fetching."""
        for name in self._names - names:
            for metric in (cp_metrics.JWKS_FETCH_FAILURES, cp_metrics.JWKS_LAST_SUCCESS):
                try:
                    metric.remove(name)
                except KeyError:
                    pass
        self._names = names
