"""The settings of async jobs, the Batch API and webhooks, declared once (see
control_plane.settings.declared: `Settings` takes these fields from `JobSettings`)."""
from __future__ import annotations

from dataclasses import dataclass

from control_plane.settings import parsers
from control_plane.settings.setting import setting


@dataclass(frozen=True)
class JobSettings:
    # Async jobs and the Batch API (docs/contracts.md, "Async jobs"): the broker
    # (None: `sluice up` starts a private one), where gateways hand async requests to
    # (None: the admin API's own host and port), the gateway workers send jobs through,
    # how long a job may run before another worker may take it over (its lease, also
    # the worker's timeout for the gateway's answer), how long a saturated model's job
    # keeps waiting before it fails, how often workers sweep for jobs a broker lost.
    amqp_url: str | None = setting(
        "SLUICE_AMQP_URL", parsers.amqp_url, None,
        "`amqp://user:password@host:5672/vhost` (`amqps://` for TLS): the "
        "broker async jobs are queued in",
        default_words="none (`sluice up`: a private RabbitMQ under `var/rabbitmq`)", secret=True)
    jobs_url: str | None = setting(
        "SLUICE_JOBS_URL", parsers.optional_url, None,
        "where `sluice gateway` hands async requests (`Prefer: "
        "respond-async`, `/v1/jobs`, `/v1/files`, `/v1/batches`)",
        default_words="`http://<SLUICE_API_HOST or 127.0.0.1>:<SLUICE_API_PORT>`")
    worker_gateway_url: str | None = setting(
        "SLUICE_WORKER_GATEWAY_URL", parsers.optional_url, None,
        "the gateway `sluice worker` sends jobs through",
        default_words="`http://127.0.0.1:<SLUICE_GATEWAY_PORT>`")
    job_lease_s: float = setting(
        "SLUICE_JOB_LEASE_S", parsers.positive_float, 660.0,
        "seconds a running job is a worker's before another may take it "
        "over; also bounds the worker's wait for the gateway")
    job_wait_max_s: float = setting(
        "SLUICE_JOB_WAIT_MAX_S", parsers.positive_float, 3600.0,
        "seconds a job may keep waiting for room in its model's pool "
        "before it fails")
    job_sweep_interval: float = setting(
        "SLUICE_JOB_SWEEP_INTERVAL", parsers.positive_float, 2.0,
        "seconds between sweeps for jobs a broker lost or a dead "
        "worker held")
    # Webhooks: retried with exponential backoff and jitter for this long, then failed;
    # callback URLs to loopback, link-local and private addresses only when allowed.
    webhook_retry_for_s: float = setting(
        "SLUICE_WEBHOOK_RETRY_FOR_S", parsers.positive_float, 3600.0,
        "seconds a webhook delivery is retried (exponential "
        "backoff with jitter) before it is marked failed")
    webhook_allow_private: bool = setting(
        "SLUICE_WEBHOOK_ALLOW_PRIVATE", parsers.flag, False,
        "allow callback URLs to loopback, link-local and "
        "private addresses (refused by default: SSRF)")
