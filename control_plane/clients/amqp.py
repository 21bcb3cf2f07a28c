"""The one client of RabbitMQ: the durable job queue.

One durable queue, `sluice.jobs`, with `x-max-priority` 3: a message is a job id
(the job itself lives in PostgreSQL) with the job's priority (critical 3, standard 2,
best_effort 1), so a worker takes critical jobs first. Messages are persistent and
published with publisher confirms: `publish()` returns only once the broker has
taken the message; a broker that cannot raises `QueueUnavailable` (the job stays
`queued` in PostgreSQL and the sweeper enqueues it again, services/jobs.py).

Consumers ack by hand, after the job's result is stored (control_plane/runtime/worker.py).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPError

log = logging.getLogger(__name__)
# pika logs every failed connection attempt at ERROR with a traceback, and every
# connection at INFO; we report what matters ourselves (the worker's reconnects,
# QueueUnavailable), once, without the noise.
logging.getLogger("pika").setLevel(logging.CRITICAL)

QUEUE = "sluice.jobs"
PRIORITIES = {"best_effort": 1, "standard": 2, "critical": 3}
MAX_PRIORITY = 3


class QueueUnavailable(Exception):
    """The broker did not take the message (down, unreachable, refused)."""


def _parameters(url: str, timeout: float) -> pika.URLParameters:
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.socket_timeout = timeout
    params.blocked_connection_timeout = timeout
    if "heartbeat=" not in url:   # the URL's own (?heartbeat=N) wins
        params.heartbeat = 30
    return params


def declare(channel: BlockingChannel) -> None:
    channel.queue_declare(QUEUE, durable=True, arguments={"x-max-priority": MAX_PRIORITY})


class Publisher:
    """Publishes job ids; thread-safe; reconnects on the next publish after a failure."""

    def __init__(self, url: str, timeout: float = 5.0):
        self._url, self._timeout = url, timeout
        self._lock = threading.Lock()
        self._conn: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None

    def _connect(self) -> BlockingChannel:
        if self._channel is not None and self._channel.is_open:
            # an idle publisher has not read the broker's heartbeats or its close:
            # find out now rather than while waiting for a confirm
            self._conn.process_data_events(time_limit=0)
            if self._channel.is_open:
                return self._channel
        self.close()
        self._conn = pika.BlockingConnection(_parameters(self._url, self._timeout))
        channel = self._conn.channel()
        channel.confirm_delivery()
        declare(channel)
        self._channel = channel
        return channel

    def publish(self, job_id: str, priority: str) -> None:
        """Enqueue `job_id` durably; raise QueueUnavailable when the broker did not
        confirm it. Tries a fresh connection once when the old one went stale."""
        props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent,
                                     priority=PRIORITIES.get(priority, 2),
                                     content_type="text/plain")
        with self._lock:
            for attempt in (1, 2):
                try:
                    self._connect().basic_publish("", QUEUE, job_id.encode(), props,
                                                  mandatory=True)
                    return
                except (AMQPError, OSError) as exc:
                    self.close()
                    if attempt == 2:
                        raise QueueUnavailable(f"the job queue did not take job {job_id}: "
                                               f"{type(exc).__name__}") from None

    def close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except (AMQPError, OSError):
                pass


class Consumer:
    """A blocking consumer: `run(handle)` calls handle(channel, delivery, job_id) for
    each message, `prefetch` at a time, until `stop()` or the connection fails (it
    raises; the worker reconnects)."""

    def __init__(self, url: str, prefetch: int = 1, timeout: float = 5.0):
        self._url, self._prefetch, self._timeout = url, prefetch, timeout
        self.conn: pika.BlockingConnection | None = None
        self.channel: BlockingChannel | None = None

    def connect(self) -> None:
        self.conn = pika.BlockingConnection(_parameters(self._url, self._timeout))
        self.channel = self.conn.channel()
        self.channel.confirm_delivery()
        declare(self.channel)
        self.channel.basic_qos(prefetch_count=self._prefetch)

    def run(self, handle: Callable[[BlockingChannel, object, str], None],
            stopping: threading.Event, idle: Callable[[], None] | None = None) -> None:
        assert self.channel is not None
        for method, _props, body in self.channel.consume(QUEUE, inactivity_timeout=0.5):
            if stopping.is_set():
                break
            if method is None:
                if idle is not None:
                    idle()
                continue
            handle(self.channel, method, body.decode(errors="replace"))
        try:
            self.channel.cancel()
        except (AMQPError, OSError):
            pass

    def sleep(self, seconds: float) -> None:
        """Wait while keeping the connection's heartbeats going."""
        if self.conn is not None:
            self.conn.sleep(seconds)

    def close(self) -> None:
        conn, self.conn, self.channel = self.conn, None, None
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except (AMQPError, OSError):
                pass
