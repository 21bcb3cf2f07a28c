"""Admin API for async jobs and their webhooks:

    POST /api/v1/consumers/<id>/webhook-secret      a new signing secret, shown this once
    GET  /api/v1/jobs?consumer=&status=              recent jobs (newest first)
    GET  /api/v1/jobs/stats                          queue depth: jobs by status and model
    GET  /api/v1/webhook-deliveries?job=&status=     recent deliveries (newest first)
    POST /api/v1/webhook-deliveries/<id>/resend      deliver that job again

Routes join the `api` blueprint of views.py; app.py imports this module before the
blueprint is registered. openapi.py documents them (JOB_PARAMS, DELIVERY_PARAMS).
"""
from __future__ import annotations

from flask import Response, current_app, jsonify
from sqlalchemy import select

from control_plane.api.observability import _int_in, query_args
from control_plane.api.validation import described
from control_plane.api.views import bp, db
from control_plane.services import jobs, webhooks
from control_plane.tables.jobs import DELIVERY_STATES, JOB_STATES, Job

LIMIT = 100


def _one_of(values: tuple[str, ...]):
    @described({"type": "string", "enum": list(values)})
    def parse(raw: str) -> str:
        if raw not in values:
            raise ValueError("must be one of " + ", ".join(values))
        return raw
    return parse


@described({"type": "string", "pattern": "^job_[0-9a-f]{1,36}$"})
def _job_id(raw: str) -> str:
    if not raw.startswith("job_") or len(raw) > 40 \
            or any(c not in "0123456789abcdef" for c in raw[4:]) or len(raw) == 4:
        raise ValueError("must be a job id (job_<hex>)")
    return raw


JOB_PARAMS = {"consumer": _int_in(1, 2**31 - 1), "status": _one_of(JOB_STATES)}
DELIVERY_PARAMS = {"job": _job_id, "status": _one_of(DELIVERY_STATES)}


@bp.post("/consumers/<int:id>/webhook-secret")
def set_webhook_secret(id: int) -> tuple[Response, int]:
    query_args({})
    secret = webhooks.set_secret(db(), id)
    return jsonify({"consumer_id": id, "secret": secret}), 201


@bp.get("/jobs")
def list_jobs() -> Response:
    args = query_args(JOB_PARAMS)
    q = select(Job).where(Job.batch_id.is_(None)).order_by(Job.created_at.desc()).limit(LIMIT)
    if "consumer" in args:
        q = q.where(Job.consumer_id == args["consumer"])
    if "status" in args:
        q = q.where(Job.status == args["status"])
    items = [{**jobs.render(j), "consumer_id": j.consumer_id} for j in db().scalars(q)]
    return jsonify({"items": items})


@bp.get("/jobs/stats")
def job_stats() -> Response:
    query_args({})
    return jsonify(jobs.stats(db()))


@bp.get("/webhook-deliveries")
def list_deliveries() -> Response:
    args = query_args(DELIVERY_PARAMS)
    rows = webhooks.list_deliveries(db(), args.get("job"), args.get("status"), LIMIT)
    return jsonify({"items": [webhooks.render(d) for d in rows]})


@bp.post("/webhook-deliveries/<int:id>/resend")
def resend_delivery(id: int) -> tuple[Response, int]:
    query_args({})
    settings = current_app.config["SLUICE_SETTINGS"]
    d = webhooks.resend(db(), id, settings.webhook_retry_for_s)
    return jsonify(webhooks.render(d)), 201
