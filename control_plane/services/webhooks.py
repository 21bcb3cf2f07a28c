"""Webhooks of finished jobs: callback URL checks (SSRF), signatures, deliveries.

A delivery POSTs the job's JSON to its callback URL with

    X-Sluice-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">

keyed by the consumer's webhook secret (set through the admin API, shown once). A
delivery that does not get a 2xx is retried with exponential backoff and full
jitter until `give_up_at` (SLUICE_WEBHOOK_RETRY_FOR_S after the job ended), then
marked failed; every delivery stays listed in the admin API, which can re-send it.

Callback URLs whose host resolves to a loopback, link-local, private, shared,
multicast, reserved or unspecified address are refused (at submission, and again
before each attempt, so a name that changes what it resolves to gains nothing)
unless the operator allows them (SLUICE_WEBHOOK_ALLOW_PRIVATE).
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import random
import secrets
import socket
import time
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

import requests
from sqlalchemy import select
from sqlalchemy.orm import Session

from control_plane.services import audit
from control_plane.services.errors import Invalid, NotFound
from control_plane.tables.config import Consumer
from control_plane.tables.jobs import Job, WebhookDelivery, WebhookSecret

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Sluice-Signature"
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 300.0
ATTEMPT_TIMEOUT_S = 10.0
MAX_URL = 2048


class CallbackRefused(ValueError):
    """A callback URL we will not call; the message says why (never the address)."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _public(addr: str) -> bool:
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not (ip.is_loopback or ip.is_link_local or ip.is_private or ip.is_multicast
                or ip.is_reserved or ip.is_unspecified
                or ip in ipaddress.ip_network("100.64.0.0/10"))


def check_callback_url(url: str, allow_private: bool) -> str:
    """The URL when we may call it; CallbackRefused otherwise."""
    if len(url) > MAX_URL:
        raise CallbackRefused(f"must be at most {MAX_URL} characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CallbackRefused("must be an absolute http:// or https:// URL")
    if parts.username or parts.password:
        raise CallbackRefused("must not carry credentials")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise CallbackRefused("has an invalid port") from None
    if allow_private:
        return url
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise CallbackRefused("names a host that does not resolve") from None
    if not infos or not all(_public(info[4][0]) for info in infos):
        raise CallbackRefused("resolves to a loopback, link-local or private address, "
                              "which this gateway does not call")
    return url


def sign(secret: str, body: bytes, t: int | None = None) -> str:
    """The X-Sluice-Signature value for `body`."""
    t = int(time.time()) if t is None else t
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def set_secret(session: Session, consumer_id: int) -> str:
    """A new webhook secret for the consumer (replacing any); returned this once."""
    if session.get(Consumer, consumer_id) is None:
        raise NotFound(f"consumer {consumer_id} not found")
    secret = "whsec_" + secrets.token_urlsafe(32)
    row = session.get(WebhookSecret, consumer_id)
    if row is None:
        session.add(WebhookSecret(consumer_id=consumer_id, secret=secret))
    else:
        row.secret, row.created_at = secret, _now()
    audit.record(session, "create" if row is None else "update", "webhook_secret",
                 consumer_id, None, {"consumer_id": consumer_id, "secret": "[redacted]"})
    session.commit()
    return secret


def has_secret(session: Session, consumer_id: int) -> bool:
    return session.get(WebhookSecret, consumer_id) is not None


def schedule(session: Session, job: Job, retry_for_s: float) -> WebhookDelivery:
    """A pending delivery of `job` (in the caller's transaction)."""
    now = _now()
    d = WebhookDelivery(job_id=job.id, url=job.callback_url, status="pending",
                        next_attempt_at=now, give_up_at=now + timedelta(seconds=retry_for_s))
    session.add(d)
    return d


def backoff(attempts: int) -> float:
    """Seconds before attempt number attempts+1: full jitter over an exponential."""
    return random.uniform(0.5, 1.0) * min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempts - 1))


def render(d: WebhookDelivery) -> dict[str, Any]:
    def ts(v: datetime | None) -> str | None:
        return v.isoformat() if v else None

    return {"id": d.id, "job_id": d.job_id, "url": d.url, "status": d.status,
            "attempts": d.attempts, "last_status_code": d.last_status_code,
            "last_error": d.last_error, "created_at": ts(d.created_at),
            "next_attempt_at": ts(d.next_attempt_at) if d.status == "pending" else None,
            "give_up_at": ts(d.give_up_at), "delivered_at": ts(d.delivered_at)}


def list_deliveries(session: Session, job_id: str | None = None,
                    status: str | None = None, limit: int = 100) -> list[WebhookDelivery]:
    q = select(WebhookDelivery).order_by(WebhookDelivery.id.desc()).limit(limit)
    if job_id:
        q = q.where(WebhookDelivery.job_id == job_id)
    if status:
        q = q.where(WebhookDelivery.status == status)
    return list(session.scalars(q))


def resend(session: Session, delivery_id: int, retry_for_s: float) -> WebhookDelivery:
    """Deliver the job of delivery `delivery_id` again, as a new delivery."""
    old = session.get(WebhookDelivery, delivery_id)
    if old is None:
        raise NotFound(f"webhook delivery {delivery_id} not found")
    job = session.get(Job, old.job_id)
    d = schedule(session, job, retry_for_s)
    d.url = old.url
    session.commit()
    return d


def deliver_due(session: Session, http: requests.Session, render_job, allow_private: bool,
                limit: int = 20) -> int:
    """Attempt the deliveries that are due (each taken by one worker: SKIP LOCKED);
    the number attempted. `render_job(job) -> dict` is the body."""
    now = _now()
    due = list(session.scalars(
        select(WebhookDelivery)
        .where(WebhookDelivery.status == "pending", WebhookDelivery.next_attempt_at <= now)
        .order_by(WebhookDelivery.next_attempt_at).limit(limit)
        .with_for_update(skip_locked=True)))
    for d in due:
        _attempt(session, http, d, render_job, allow_private)
    session.commit()
    return len(due)


def _attempt(session: Session, http: requests.Session, d: WebhookDelivery, render_job,
             allow_private: bool) -> None:
    job = session.get(Job, d.job_id)
    secret = session.get(WebhookSecret, job.consumer_id)
    d.attempts += 1
    code, error = None, None
    if secret is None:
        error = "the consumer has no webhook secret"
    else:
        try:
            check_callback_url(d.url, allow_private)
            body = json.dumps(render_job(job), separators=(",", ":")).encode()
            r = http.post(d.url, data=body, timeout=ATTEMPT_TIMEOUT_S, allow_redirects=False,
                          headers={"Content-Type": "application/json",
                                   "User-Agent": "sluice-webhooks/1",
                                   SIGNATURE_HEADER: sign(secret.secret, body),
                                   "X-Sluice-Job-Id": job.id,
                                   "X-Sluice-Delivery-Id": str(d.id)})
            code = r.status_code
            if 200 <= code < 300:
                d.status, d.last_status_code, d.last_error = "delivered", code, None
                d.delivered_at = _now()
                log.info("webhook delivered: job %s delivery %s (%d)", job.id, d.id, code)
                return
            error = f"the receiver answered {code}"
        except CallbackRefused as exc:
            error = f"callback URL refused: {exc}"
        except requests.RequestException as exc:
            error = f"{type(exc).__name__}"
    d.last_status_code, d.last_error = code, error
    retry_at = _now() + timedelta(seconds=backoff(d.attempts))
    if retry_at > d.give_up_at:
        d.status = "failed"
        log.warning("webhook failed for good: job %s delivery %s after %d attempts: %s",
                    job.id, d.id, d.attempts, error)
    else:
        d.next_attempt_at = retry_at
        log.info("webhook attempt %d failed: job %s delivery %s: %s; next in %.1f s",
                 d.attempts, job.id, d.id, error, (retry_at - _now()).total_seconds())


def invalid_callback(exc: CallbackRefused) -> Invalid:
    return Invalid({"X-Sluice-Callback-Url": str(exc)}, "the callback URL was refused")
