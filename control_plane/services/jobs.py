"""Async jobs: submit, read, cancel, and the worker's guarded state moves.

A job is accepted once its row is committed (status `queued`); enqueueing it in
RabbitMQ comes after, and a broker that does not take it only delays it: the sweeper
enqueues every `queued` job not enqueued within a lease. Each move of `status` is
one UPDATE guarded by the status it leaves, so whichever worker, redelivery or sweep
comes second finds nothing to move:

    queued  -> running     claim(): also a `running` job whose lease ran out
    running -> succeeded | failed     finish(): once; its webhook delivery and its
                                      batch's bookkeeping in the same transaction
    running -> queued      release(): the model's pool was saturated (429/503)
    queued  -> cancelled   cancel()
"""
from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, or_, select, text, update
from sqlalchemy.orm import Session

from control_plane.clients.amqp import Publisher, QueueUnavailable
from control_plane.services import webhooks
from control_plane.services.errors import Conflict, Invalid, NotFound
from control_plane.tables.jobs import JOB_STATES, Batch, Job

log = logging.getLogger(__name__)

PRIORITIES = ("critical", "standard", "best_effort")
MAX_PATH = 1024          # jobs.path
SWEEP_LOCK = 0x5110_0B5   # pg advisory lock: one sweeper per round across workers
NEW_GRACE_S = 2.0         # a job this young may still be on its way to the broker


def _now() -> datetime:
    return datetime.now(timezone.utc)


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


@dataclass(frozen=True)
class Submission:
    consumer_id: int
    priority: str
    path: str
    model: str | None
    content_type: str | None
    body: bytes
    callback_url: str | None = None


def submit(session: Session, publisher: Publisher | None, sub: Submission, *,
           allow_private: bool) -> Job:
    """Store the job (accepted from here on), then enqueue it."""
    if sub.priority not in PRIORITIES:
        raise Invalid({"priority": "must be critical, standard or best_effort"})
    if len(sub.path) > MAX_PATH:
        raise Invalid({"path": f"an async request's path and query string must be at "
                               f"most {MAX_PATH} characters"})
    if sub.callback_url is not None:
        try:
            webhooks.check_callback_url(sub.callback_url, allow_private)
        except webhooks.CallbackRefused as exc:
            raise webhooks.invalid_callback(exc) from None
        if not webhooks.has_secret(session, sub.consumer_id):
            raise Invalid({"X-Sluice-Callback-Url": "callbacks are signed with the "
                           "consumer's webhook secret, and this consumer has none yet "
                           "(admin API: POST /api/v1/consumers/{id}/webhook-secret)"},
                          "the callback URL was refused")
    job = Job(id=new_id("job_"), consumer_id=sub.consumer_id, priority=sub.priority,
              method="POST", path=sub.path, model=sub.model, content_type=sub.content_type,
              body=sub.body, callback_url=sub.callback_url, status="queued")
    session.add(job)
    session.commit()
    enqueue(session, publisher, [job])
    return job


def enqueue(session: Session, publisher: Publisher | None, jobs: list[Job]) -> int:
    """Publish `jobs` (already committed); mark those the broker took. A broker that
    is down leaves them to the sweeper. Returns how many were taken."""
    taken = []
    for job in jobs:
        if publisher is None:
            break
        try:
            publisher.publish(job.id, job.priority)
        except QueueUnavailable as exc:
            log.warning("%s; the sweeper will enqueue it", exc)
            break
        taken.append(job.id)
    if taken:
        session.execute(update(Job).where(Job.id.in_(taken)).values(enqueued_at=_now()))
        session.commit()
    return len(taken)


def get_for(session: Session, consumer_id: int, job_id: str) -> Job:
    """A caller's own job; another caller's is as unknown as a job that never was."""
    job = session.get(Job, job_id)
    if job is None or job.consumer_id != consumer_id or job.batch_id is not None:
        raise NotFound(f"no job {job_id}")
    return job


def cancel(session: Session, consumer_id: int, job_id: str) -> Job:
    job = get_for(session, consumer_id, job_id)
    moved = session.execute(update(Job).where(Job.id == job.id, Job.status == "queued")
                            .values(status="cancelled", finished_at=_now())).rowcount
    session.commit()
    session.refresh(job)
    if not moved:
        raise Conflict(f"job {job_id} is {job.status}; only a queued job can be cancelled")
    return job


def _ts(v: datetime | None) -> float | None:
    return round(v.timestamp(), 3) if v else None


def _decoded(body: bytes | None, content_type: str | None) -> Any:
    if body is None:
        return None
    if content_type and "json" in content_type:
        try:
            return json.loads(body)
        except ValueError:
            pass
    return body.decode("utf-8", errors="replace")


def render(job: Job) -> dict[str, Any]:
    """The job's JSON: what GET /v1/jobs/{id} answers and webhooks carry."""
    out: dict[str, Any] = {
        "id": job.id, "object": "job", "status": job.status, "model": job.model,
        "endpoint": job.path, "priority": job.priority, "attempts": job.attempts,
        "created_at": _ts(job.created_at), "started_at": _ts(job.started_at),
        "finished_at": _ts(job.finished_at),
        "callback_url": job.callback_url,
    }
    if job.result_status is not None:
        out["result"] = {"status_code": job.result_status,
                         "content_type": job.result_content_type,
                         "body": _decoded(job.result_body, job.result_content_type)}
    if job.error is not None:
        out["error"] = job.error
    return out


def stats(session: Session) -> dict[str, Any]:
    """Queue depth for operators: jobs (batch lines included) by status, waiting and
    running jobs by model, and the age of the oldest waiting one."""
    by_status = dict(session.execute(select(Job.status, func.count()).group_by(Job.status))
                     .all())
    by_model: dict[str, dict[str, int]] = {}
    for model, status, n in session.execute(
            select(Job.model, Job.status, func.count())
            .where(Job.status.in_(("queued", "running"))).group_by(Job.model, Job.status)):
        by_model.setdefault(model or "", {"queued": 0, "running": 0})[status] = n
    oldest = session.scalar(select(func.min(Job.created_at)).where(Job.status == "queued"))
    return {"by_status": {s: by_status.get(s, 0) for s in JOB_STATES},
            "by_model": by_model,
            "oldest_queued_s": round((_now() - oldest).total_seconds(), 3) if oldest else None}


# --- the worker's moves -------------------------------------------------------

def claim(session: Session, job_id: str, lease_s: float) -> tuple[str, Job | None]:
    """Take a job to run: ("run", job); ("done", job|None) when it is final or
    unknown (ack the message); ("busy", job) while another worker's lease holds."""
    now = _now()
    row = session.execute(
        update(Job).where(Job.id == job_id,
                          or_(Job.status == "queued",
                              (Job.status == "running") & (Job.lease_until < now)))
        .values(status="running", attempts=Job.attempts + 1,
                started_at=func.coalesce(Job.started_at, now),
                lease_until=now + timedelta(seconds=lease_s))
        .returning(Job.id)).first()
    session.commit()
    job = session.get(Job, job_id, populate_existing=True)
    if row is not None:
        return "run", job
    if job is None or job.status != "running":
        return "done", job
    return "busy", job


def finish(session: Session, job_id: str, status: str, *, result_status: int | None,
           content_type: str | None, body: bytes | None, error: dict | None,
           retry_for_s: float,
           finalize_batch: Callable[[Session, Batch], None] | None = None) -> bool:
    """running -> succeeded | failed, once: True when this call ended the job. Its
    webhook delivery and its batch's completion (`finalize_batch`, from
    services/batches.py) go in the same transaction."""
    job = session.get(Job, job_id)
    batch = None
    if job is not None and job.batch_id is not None:
        # one finisher at a time per batch, so the last one sees all the others
        batch = session.execute(select(Batch).where(Batch.id == job.batch_id)
                                .with_for_update()).scalar_one()
    moved = session.execute(
        update(Job).where(Job.id == job_id, Job.status == "running")
        .values(status=status, result_status=result_status,
                result_content_type=content_type, result_body=body, error=error,
                finished_at=_now(), lease_until=None)).rowcount
    if not moved:
        session.rollback()
        return False
    session.refresh(job)
    if job.callback_url:
        webhooks.schedule(session, job, retry_for_s)
    if batch is not None and finalize_batch is not None:
        finalize_batch(session, batch)
    session.commit()
    return True


def release(session: Session, job_id: str, not_before: datetime) -> None:
    """running -> queued: the model had no room; tried again later."""
    session.execute(update(Job).where(Job.id == job_id, Job.status == "running")
                    .values(status="queued", lease_until=None, not_before=not_before))
    session.commit()


def sweep(session: Session, publisher: Publisher | None, requeue_after_s: float) -> int:
    """Jobs a worker died holding (lease over) go back to `queued`; `queued` jobs not
    enqueued for `requeue_after_s` (a broker that lost them, or was down when they
    came) are enqueued again. One sweeper per round (advisory lock). Returns how
    many were enqueued."""
    if not session.execute(text("SELECT pg_try_advisory_xact_lock(:k)"),
                           {"k": SWEEP_LOCK}).scalar():
        session.rollback()
        return 0
    now = _now()
    session.execute(update(Job).where(Job.status == "running", Job.lease_until < now)
                    .values(status="queued", lease_until=None, enqueued_at=None))
    stale = list(session.scalars(
        select(Job).where(Job.status == "queued",
                          # never enqueued (the broker was down); not one the API is
                          # enqueueing this very moment
                          or_(Job.enqueued_at.is_(None)
                              & (Job.created_at < now - timedelta(seconds=NEW_GRACE_S)),
                              Job.enqueued_at < now - timedelta(seconds=requeue_after_s)),
                          or_(Job.not_before.is_(None), Job.not_before <= now))
        .order_by(Job.created_at).limit(500)))
    session.commit()
    if stale:
        log.info("sweeper: enqueueing %d job(s) again", len(stale))
    return enqueue(session, publisher, stale)
