"""`sluice worker`: runs async jobs and batch lines, delivers their webhooks.

Consumes the job queue (control_plane/clients/amqp.py) one job at a time, by priority,
and sends each job through a gateway on its consumer's behalf (the worker token is
the gateway token; lua/sluice/jobs.lua), so keys, quotas, content policy, routing,
metrics and logs apply when it runs, once. The message is acked only after the
job's end is stored; a redelivered job that already ended is acked and skipped
(services/jobs.py guards every state move).

The model's pool has no room (the gateway answers 429 or 503 with retry_after): the
job goes back to `queued`, the worker waits `retry_after` (taking nothing else:
workers take jobs only while the gateway has headroom) and requeues the message; a
job that waited SLUICE_JOB_WAIT_MAX_S fails with the gateway's last answer.

Beside the consumer, two threads: webhook deliveries (services/webhooks.py) and the
sweeper (services/jobs.sweep). PostgreSQL or RabbitMQ down: the worker retries
until they are back, holding the message unacked; SIGTERM ends it after the job in
hand.
"""
from __future__ import annotations

import logging
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, TypeVar

import requests
from pika.exceptions import AMQPError
from sqlalchemy import exc as sa_exc

from control_plane.clients.amqp import Consumer, Publisher
from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import batches, jobs, webhooks
from control_plane.settings import Settings

log = logging.getLogger("sluice.worker")
T = TypeVar("T")

RETRY_STATUSES = (429, 503)
# a 429/503 asking to wait longer than this (a daily quota) fails the job now
RETRY_AFTER_MAX_S = 60.0
RECONNECT_S = 1.0
DB_RETRY_S = 0.5


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Worker:
    def __init__(self, settings: Settings):
        if not settings.amqp_url:
            raise ValueError("SLUICE_AMQP_URL is not set")
        if not settings.gateway_token:
            raise ValueError("SLUICE_GATEWAY_TOKEN is not set")
        self.settings = settings
        self.engine = make_engine(settings.require_database_url())
        self.sessions = make_sessionmaker(self.engine)
        self.gateway = settings.worker_gateway().rstrip("/")
        self.http = requests.Session()
        self.hooks_http = requests.Session()
        self.stopping = threading.Event()
        self.consumer: Consumer | None = None
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job")
        self.done = 0   # jobs this worker ended (for logs and the bench)

    # --- plumbing -------------------------------------------------------------

    def _sleep(self, seconds: float) -> None:
        """Wait, servicing the broker connection while it is open; the job in hand
        goes on when the broker goes away (its ack then fails, and is redone)."""
        c = self.consumer
        if c is not None and c.conn is not None and c.conn.is_open:
            try:
                c.sleep(seconds)
                return
            except Exception as exc:  # noqa: BLE001 - pika also raises ValueError here
                log.warning("job queue connection lost (%s); finishing the job in hand",
                            type(exc).__name__)
        self.stopping.wait(seconds)

    def _db(self, fn: Callable[[Any], T]) -> T:
        """fn(session), again and again while the database is unreachable."""
        while True:
            try:
                with self.sessions() as session:
                    return fn(session)
            except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
                if self.stopping.is_set():
                    raise
                log.warning("database unreachable (%s); retrying",
                            type(getattr(exc, "orig", exc)).__name__)
                self._sleep(DB_RETRY_S)

    # --- one job --------------------------------------------------------------

    def handle(self, channel, method, job_id: str) -> None:
        lease = self.settings.job_lease_s
        state, job = self._db(lambda s: jobs.claim(s, job_id, lease))
        if state == "done":
            channel.basic_ack(method.delivery_tag)
            return
        if state == "busy":
            if not method.redelivered:
                # a second copy (the sweeper's) of a job another worker runs now
                channel.basic_ack(method.delivery_tag)
                return
            # the worker that held it died: its lease runs out, then it is ours
            left = (job.lease_until - _now()).total_seconds() if job.lease_until else 0
            self._sleep(min(max(left, 0.05), 2.0))
            channel.basic_nack(method.delivery_tag, requeue=True)
            return
        outcome = self._run(job)
        if outcome is None:
            channel.basic_nack(method.delivery_tag, requeue=True)
            return
        ended = self._db(lambda s: jobs.finish(
            s, job_id, outcome["status"], result_status=outcome["code"],
            content_type=outcome["content_type"], body=outcome["body"],
            error=outcome["error"], retry_for_s=self.settings.webhook_retry_for_s,
            finalize_batch=batches.maybe_finalize))
        if ended:
            self.done += 1
            log.info("job %s %s (%s)", job_id, outcome["status"], outcome["code"])
        channel.basic_ack(method.delivery_tag)

    def _run(self, job) -> dict | None:
        """The gateway's answer as an outcome; None when the job goes back to the
        queue (no room, gateway unreachable)."""
        headers = {"Content-Type": job.content_type or "application/json",
                   "X-Sluice-Worker-Token": self.settings.gateway_token,
                   "X-Sluice-On-Behalf-Of": str(job.consumer_id),
                   "X-Sluice-Job-Id": job.id,
                   "X-Sluice-Priority": job.priority,
                   "X-Request-Id": job.id}
        # the gateway's answer must come within the lease, or another worker may take
        # the job over while this one still waits
        lease = self.settings.job_lease_s
        timeout = max(1.0, lease - min(5.0, lease * 0.2))
        waited = (_now() - job.created_at).total_seconds()
        may_wait = waited < self.settings.job_wait_max_s
        try:
            r = self._meanwhile(lambda: self.http.post(self.gateway + job.path, data=job.body,
                                                       headers=headers, timeout=(5, timeout)))
        except requests.RequestException as exc:
            if may_wait and job.attempts < 5:
                log.warning("job %s: gateway unreachable (%s); back to the queue",
                            job.id, type(exc).__name__)
                self._back(job, 1.0)
                return None
            return {"status": "failed", "code": None, "content_type": None, "body": None,
                    "error": {"code": 502, "type": "backend_error",
                              "message": f"the gateway did not answer ({type(exc).__name__})"}}
        ctype = r.headers.get("Content-Type")
        retry = _retry_after(r)
        if r.status_code in RETRY_STATUSES and may_wait and retry <= RETRY_AFTER_MAX_S:
            log.info("job %s: model %s has no room (%d); retrying in %.1f s", job.id,
                     job.model, r.status_code, retry)
            self._back(job, retry)
            return None
        if 200 <= r.status_code < 300:
            return {"status": "succeeded", "code": r.status_code, "content_type": ctype,
                    "body": r.content, "error": None}
        return {"status": "failed", "code": r.status_code, "content_type": ctype,
                "body": r.content, "error": _error_of(r)}

    def _meanwhile(self, call: Callable[[], T]) -> T:
        """call() in a thread while this one keeps the broker connection's heartbeats
        going: a model that answers after minutes must not cost the connection (the
        broker would hand the job to another worker)."""
        future = self.pool.submit(call)
        while True:
            try:
                return future.result(timeout=0.5)   # at once when the answer is in
            except FutureTimeout:
                self._sleep(0)   # heartbeats, without waiting


    def _back(self, job, seconds: float) -> None:
        self._db(lambda s: jobs.release(s, job.id, _now() + timedelta(seconds=seconds)))
        self._sleep(seconds)

    # --- loops ----------------------------------------------------------------

    def consume_forever(self) -> None:
        while not self.stopping.is_set():
            self.consumer = Consumer(self.settings.amqp_url)
            try:
                self.consumer.connect()
                log.info("consuming the job queue")
                self.consumer.run(self.handle, self.stopping)
            except (AMQPError, OSError, ValueError) as exc:   # pika: ValueError too
                log.warning("job queue unavailable (%s); reconnecting", type(exc).__name__)
                self.stopping.wait(RECONNECT_S)
            finally:
                self.consumer.close()

    def deliver_forever(self, interval: float = 0.2) -> None:
        while not self.stopping.wait(interval):
            try:
                with self.sessions() as session:
                    while webhooks.deliver_due(session, self.hooks_http, jobs.render,
                                               self.settings.webhook_allow_private):
                        pass
            except sa_exc.SQLAlchemyError as exc:
                log.warning("webhook deliveries: database error (%s)", type(exc).__name__)

    def sweep_forever(self) -> None:
        publisher = Publisher(self.settings.amqp_url)
        try:
            while not self.stopping.wait(self.settings.job_sweep_interval):
                try:
                    with self.sessions() as session:
                        jobs.sweep(session, publisher, self.settings.job_lease_s)
                except sa_exc.SQLAlchemyError as exc:
                    log.warning("sweeper: database error (%s)", type(exc).__name__)
        finally:
            publisher.close()

    def run(self) -> int:
        threads = [threading.Thread(target=self.deliver_forever, name="webhooks", daemon=True),
                   threading.Thread(target=self.sweep_forever, name="sweeper", daemon=True)]
        for t in threads:
            t.start()
        try:
            self.consume_forever()
        finally:
            self.stopping.set()
            for t in threads:
                t.join(5)
            self.pool.shutdown(wait=False)
            self.engine.dispose()
        return 0


def _retry_after(r: requests.Response) -> float:
    try:
        return max(0.1, float(r.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0


def _error_of(r: requests.Response) -> dict:
    """The error object of the gateway's answer (its template), else a summary."""
    try:
        err = r.json().get("error")
        if isinstance(err, dict):
            return err
    except (ValueError, AttributeError):
        pass
    return {"code": r.status_code, "type": "backend_error",
            "message": f"the gateway answered {r.status_code}"}


def main(settings: Settings) -> int:
    try:
        worker = Worker(settings)
    except ValueError as exc:
        print(f"sluice worker: {exc}", flush=True)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: worker.stopping.set())
    return worker.run()
