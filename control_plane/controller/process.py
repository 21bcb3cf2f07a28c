"""The controller process: push the snapshot to every gateway whenever the config
changes, and on intervals of their own the weight table (weights_loop.py), usage
(usage_loop.py), backend readiness probed in the background (health_loop.py) and JWT
issuers' keys fetched by URL in the background (jwks_loop.py). Every call to a gateway
goes through one GatewayClient (clients/gateway.py).

Each tick reads the config version; every gateway whose acknowledged version differs (or
that a reload marked) gets the snapshot, built once per version; one that fails is retried
with exponential backoff (0.5 s doubling to 30 s, reset on success). SIGHUP re-reads the
settings (SLUICE_CONFIG too) and re-pushes to every gateway, as the first tick after a
start does (SLUICE_BREAKER_* are in it); SIGTERM and SIGINT stop after the current tick.

Any number of controllers may run: only the one holding the leader lock (leader.py)
ticks; the others stand by, retrying each second, and take over within a few seconds of
its death. Versions never go backwards: snapshot versions come from Postgres and
gateways refuse older ones; weight, health and usage versions start above what the
gateways hold. Usage is collected per gateway in one transaction with its cursor row
locked (services/usage_sync.py), so a takeover counts nothing twice.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.orm import Session

from control_plane.clients import tracing
from control_plane.clients.gateway import GatewayClient, GatewayError
from control_plane.controller import cp_metrics, telemetry_gauges
from control_plane.controller.health_loop import HealthLoop
from control_plane.controller.jwks_loop import JwksLoop
from control_plane.controller.leader import Leadership
from control_plane.controller.scaling_webhook import ScalingWebhook
from control_plane.controller.ship_loop import Shipper
from control_plane.controller.usage_loop import UsageLoop
from control_plane.controller.weights_loop import WeightsLoop
from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import membership, scaling, telemetry
from control_plane.services import snapshot as snapshot_service
from control_plane.services.config_state import current_version
from control_plane.services.gateways import ensure_gateways
from control_plane.settings import Settings, SettingsError, load_settings
from control_plane.tables.config import Gateway

log = logging.getLogger("sluice.controller")

BACKOFF_START = 0.5
BACKOFF_CAP = 30.0
MAX_PARALLEL_PUSHES = 16
SCALING_EVERY = 15.0   # seconds between scaling recommendations
STANDBY_POLL = 0.2     # seconds between a standby's looks at its leader thread
METRICS_RETRY = 1.0    # seconds between tries to serve /metrics on a port in use


@dataclass
class Backoff:
    delay: float = 0.0      # 0: no failure since the last success
    not_before: float = 0.0  # monotonic time of the next allowed attempt

    def failed(self, now: float) -> float:
        self.delay = BACKOFF_START if self.delay == 0 else min(self.delay * 2, BACKOFF_CAP)
        self.not_before = now + self.delay
        return self.delay


@dataclass
class PushResult:
    gateway_id: int
    acked: int | None = None
    error: str | None = None


class Controller:
    def __init__(self, settings: Settings, *,
                 settings_loader: Callable[[], Settings] = load_settings,
                 clock: Callable[[], float] = time.monotonic):
        self._load_settings = settings_loader
        self._clock = clock
        self.settings = settings
        self._engine = make_engine(settings.require_database_url())
        self._sessions = make_sessionmaker(self._engine)
        self.client = GatewayClient.from_settings(settings)
        self._backoff: dict[int, Backoff] = {}
        self._force: set[int] = set()
        self._live: dict[int, str] = {}   # id -> name of the gateways of the last tick
        # A (re)started controller may carry new settings that go into the snapshot
        # (SLUICE_BREAKER_*): its first tick pushes to every gateway, acked or not.
        self._force_all = True
        self._cached: tuple[int, dict[str, Any]] | None = None
        self._stopping = False
        self._reload_requested = False
        self._synced = False  # SLUICE_GATEWAYS upserted; retried each tick until done
        self._next_scaling = 0.0
        self.scaling = ScalingWebhook()
        self.weights = WeightsLoop(self.client, clock)
        self.health = HealthLoop(self.client, clock)
        self.usage = UsageLoop(self.client, clock)
        self.jwks = JwksLoop(clock)

    # public

    def tick(self) -> None:
        """One pass: push the current snapshot to every gateway that needs it."""
        if not self._synced:
            self._sync_gateways()
        with self._sessions() as session:
            version = current_version(session)
            gateways = membership.live(session, self.settings.gateway_ttl)
        self._note_membership(gateways)
        if self._force_all:
            self._force |= {g.id for g in gateways}
            self._force_all = False
        cp_metrics.CONFIG_VERSION.set(version)
        for g in gateways:
            cp_metrics.ACKED_VERSION.labels(g.name).set(
                -1 if g.acked_version is None else g.acked_version)
        now = self._clock()
        due = [g for g in gateways
               if (g.acked_version != version or g.id in self._force)
               and self._backoff.get(g.id, Backoff()).not_before <= now]
        if due:
            snap = self._snapshot(version)
            results = self._push_all(due, snap)
            self._record(due, snap["version"], results)
        if gateways and self.weights.due():
            self.weights.run(self.settings, self._sessions, gateways, self._snapshot(version))
        if gateways:   # probes run in the background: a hung backend holds no tick
            self.health.kick(self.settings, self._sessions, gateways, self._snapshot(version))
        self.jwks.kick(self.settings, self._sessions)   # on its own thread too
        if gateways and self.usage.due():
            self.usage.run(self.settings, self._sessions, gateways)

    def _note_membership(self, gateways: list[Gateway]) -> None:
        """A member back from stale (or new) is tried at once, not after the backoff
        its silence earned; one that went stale is logged."""
        live = {g.id: g.name for g in gateways}
        for g in gateways:
            if g.id not in self._live:
                self._backoff.pop(g.id, None)
                if g.registered:
                    log.info("gateway %s is live at %s", g.name, g.internal_url)
        for gid in self._live.keys() - live.keys():
            log.warning("gateway %s is no longer live (stale, gone or deleted): not "
                        "pushed to", self._live[gid])
            self._backoff.pop(gid, None)
            try:
                cp_metrics.ACKED_VERSION.remove(self._live[gid])
            except KeyError:
                pass
        self._live = live

    def _gpu_utilization(self, session: Session) -> dict[str, float]:
        return telemetry.model_utilization(session, self.settings.telemetry_stale_after)

    def scaling_tick(self, force: bool = False) -> list[dict[str, Any]]:
        """Every SCALING_EVERY s: recommendations into the metrics; the ones that
        changed POSTed to SLUICE_SCALING_WEBHOOK (best effort, 2 s timeout)."""
        now = self._clock()
        if not force and now < self._next_scaling:
            return []
        self._next_scaling = now + SCALING_EVERY
        with self._sessions() as session:
            recs = scaling.recommend(session, scaling.thresholds(self.settings),
                                     gpu=self._gpu_utilization)
            gpus = telemetry.latest(session, self.settings.telemetry_stale_after)
        telemetry_gauges.publish(gpus)
        return self.scaling.publish(self.settings.scaling_webhook, recs)

    def reload(self) -> None:
        """Re-read settings and make the next tick push to every gateway."""
        try:
            new = self._load_settings()
        except SettingsError as exc:
            log.error("reload: keeping the old settings: %s", exc)
            new = self.settings
        if new.database_url and new.database_url != self.settings.database_url:
            self._engine.dispose()
            self._engine = make_engine(new.database_url)
            self._sessions = make_sessionmaker(self._engine)
        self.settings = new
        self._new_client()
        self._cached = None
        self._backoff.clear()
        self._synced = False
        ids = self._sync_gateways()
        with self._sessions() as session:
            ids |= {g.id for g in membership.live(session, self.settings.gateway_ttl)}
        self._force = ids
        log.info("reload: settings re-read; re-pushing to %d gateway(s)", len(ids))

    def request_reload(self) -> None:
        """Signal-safe: the loop reloads before its next tick."""
        self._reload_requested = True

    def stop(self) -> None:
        """Signal-safe: the loop exits after the current tick."""
        self._stopping = True

    def start_shipping(self) -> threading.Thread | None:
        """Ship the access logs of SLUICE_ACCESS_LOGS in a thread of its own, so a
        slow COPY never delays a push. Sources are read at start (not on SIGHUP)."""
        if not self.settings.access_logs:
            return None
        shipper = Shipper(self._engine, self.settings.access_logs,
                          spans=tracing.from_settings(self.settings))
        thread = threading.Thread(
            target=shipper.run_forever, name="shipper", daemon=True,
            args=(self.settings.ship_interval, lambda: self._stopping,
                  self.settings.log_retention_days))
        thread.start()
        return thread

    def start_metrics(self) -> None:
        """Serve /metrics; a port in use must not stop the pushes, and is tried again
        every METRICS_RETRY s in a thread until it binds (a restarted controller's port
        may be held a while by whatever took it while it was down)."""
        port, host = self.settings.controller_metrics_port, self.settings.controller_metrics_host
        try:
            cp_metrics.serve(port, host)
            return
        except OSError as exc:
            log.error("cannot serve metrics on port %s: %s (trying again every %s s)",
                      port, exc, METRICS_RETRY)

        def retry() -> None:
            while not self._stopping:
                time.sleep(METRICS_RETRY)
                try:
                    cp_metrics.serve(port, host)
                    return
                except OSError:
                    continue
        threading.Thread(target=retry, name="metrics-retry", daemon=True).start()

    def run_forever(self) -> None:
        """Stand by until this process holds the leader lock (leader.py), then run the
        ticks while it holds it; SIGTERM/SIGINT end the loop and release the lock."""
        leader = Leadership(self.settings.require_database_url())
        log.info("controller %s started: %d gateway(s) from settings, interval %.2fs",
                 leader.id, len(self.settings.gateways), self.settings.controller_interval)
        cp_metrics.set_slas(dict(self.settings.model_slas))
        cp_metrics.CONTROLLER_ACTIVE.set(0)
        self.start_metrics()
        shipping = self.start_shipping()
        leader.start()
        was_active = False
        try:
            while not self._stopping:
                if self._reload_requested:
                    self._reload_requested = False
                    self._guarded(self.reload)
                active = leader.active   # the leader thread also sets the gauge
                if active != was_active:
                    if active:
                        self.take_over()
                    was_active = active
                if not active:
                    self._sleep(STANDBY_POLL)
                    continue
                self._guarded(self.tick)
                self._guarded(self.scaling_tick)
                self._sleep(self.settings.controller_interval)
        finally:
            leader.stop()
            cp_metrics.CONTROLLER_ACTIVE.set(0)
            if shipping is not None:
                shipping.join(timeout=30)   # let the batch in flight commit
            self.close()
        log.info("controller stopped")

    def take_over(self) -> None:
        """This process just became the active one: forget what a previous term (or
        none) knew, and push everything to every gateway at the next tick."""
        self._force_all = True
        self._cached = None
        self._backoff.clear()
        self._live = {}
        self._synced = False

    def close(self) -> None:
        self.weights.scraper.close()
        self.health.close()
        self.scaling.close()
        self.client.close()
        self._engine.dispose()

    # internals

    def _new_client(self) -> None:
        """A client from the current settings (token, timeout and CA may have changed),
        shared by every loop."""
        old, self.client = self.client, GatewayClient.from_settings(self.settings)
        self.weights.client = self.health.client = self.usage.client = self.client
        old.close()

    def _guarded(self, step: Callable[[], None]) -> None:
        # A database or DNS outage must not end the loop; the next tick retries.
        try:
            step()
        except Exception:
            log.exception("%s failed", step.__name__)

    def _sleep(self, seconds: float) -> None:
        # Short slices so a signal's flag is seen promptly.
        deadline = self._clock() + seconds
        while not self._stopping and not self._reload_requested:
            left = deadline - self._clock()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    def _sync_gateways(self) -> set[int]:
        with self._sessions() as session:
            ids = {g.id for g in ensure_gateways(session, self.settings.gateways)}
        self._synced = True
        return ids

    def _snapshot(self, version: int) -> dict[str, Any]:
        if self._cached is None or self._cached[0] != version:
            with self._sessions() as session:
                # One consistent read: the version and the content it describes.
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
                snap = snapshot_service.build(session, self.settings)
            self._cached = (snap["version"], snap)
        return self._cached[1]

    def _push_one(self, gateway: Gateway, snap: dict[str, Any]) -> PushResult:
        with cp_metrics.PUSH_SECONDS.labels(gateway.name).time():
            result = self._push_one_timed(gateway, snap)
        cp_metrics.PUSHES.labels(gateway.name, "ok" if result.error is None else "error").inc()
        if result.acked is not None:
            cp_metrics.ACKED_VERSION.labels(gateway.name).set(result.acked)
        return result

    def _push_one_timed(self, gateway: Gateway, snap: dict[str, Any]) -> PushResult:
        try:
            acked = self.client.push_snapshot(gateway.internal_url, snap)
        except GatewayError as exc:
            return PushResult(gateway.id, error=str(exc))
        if acked != snap["version"]:
            return PushResult(gateway.id, acked=acked,
                              error=f"gateway acknowledged version {acked}, "
                                    f"expected {snap['version']}")
        return PushResult(gateway.id, acked=acked)

    def _push_all(self, due: list[Gateway], snap: dict[str, Any]) -> list[PushResult]:
        # In parallel: one unreachable gateway must not hold the others back by the
        # push timeout.
        if len(due) == 1:
            return [self._push_one(due[0], snap)]
        with ThreadPoolExecutor(max_workers=min(len(due), MAX_PARALLEL_PUSHES)) as pool:
            return list(pool.map(lambda g: self._push_one(g, snap), due))

    def _record(self, due: list[Gateway], version: int, results: list[PushResult]) -> None:
        now = self._clock()
        wall = datetime.now(timezone.utc)
        with self._sessions() as session, session.begin():
            for gateway, result in zip(due, results):
                row = session.get(Gateway, gateway.id)
                if result.error is None:
                    self._backoff.pop(gateway.id, None)
                    self._force.discard(gateway.id)
                    log.info("push gateway=%s url=%s version=%d outcome=ok",
                             gateway.name, gateway.internal_url, version)
                else:
                    retry = self._backoff.setdefault(gateway.id, Backoff()).failed(now)
                    log.warning("push gateway=%s url=%s version=%d outcome=error "
                                "retry_in=%.1fs error=%s", gateway.name,
                                gateway.internal_url, version, retry, result.error)
                if row is None:  # deleted while we pushed
                    continue
                if result.acked is not None:
                    row.acked_version = result.acked
                if result.error is None:
                    row.last_push_at = wall
                row.last_error = result.error


def main(settings: Settings) -> int:
    """Run the controller until SIGTERM/SIGINT; the `sluice controller` entry point."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        controller = Controller(settings)
    except SettingsError as exc:
        log.error("%s", exc)
        return 2
    signal.signal(signal.SIGHUP, lambda *_: controller.request_reload())
    signal.signal(signal.SIGTERM, lambda *_: controller.stop())
    signal.signal(signal.SIGINT, lambda *_: controller.stop())
    controller.run_forever()
    return 0
