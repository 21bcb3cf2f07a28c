"""The jobs service: what gateways hand async work to (docs/contracts.md, "Async jobs").

Reached only through a gateway, which authenticated the caller and proxies to
`/sluice-jobs/...` with the gateway token and the caller's consumer id and priority
in headers the caller cannot set (lua/sluice/jobs.lua). Answers are in the gateway's
error template.

    POST   /sluice-jobs/submit/<endpoint>       Prefer: respond-async on <endpoint>
    GET    /sluice-jobs/v1/jobs/<id>            DELETE cancels a queued job
    POST   /sluice-jobs/v1/files                OpenAI Files API (purpose batch)
    GET    /sluice-jobs/v1/files/<id>[/content]
    POST   /sluice-jobs/v1/batches              OpenAI Batch API
    GET    /sluice-jobs/v1/batches/<id>         POST .../cancel
"""
from __future__ import annotations

import hmac
import threading

from flask import Blueprint, Response, current_app, jsonify, request

from control_plane.api.errors import ApiError, error_response
from control_plane.api.views import db, json_body
from control_plane.clients.amqp import Publisher
from control_plane.services import batches, jobs
from control_plane.services.errors import Invalid

PREFIX = "/sluice-jobs"
bp = Blueprint("jobs_service", __name__, url_prefix=PREFIX)

_publisher_lock = threading.Lock()


def publisher() -> Publisher | None:
    """This process's publisher (made after gunicorn forked); None without a broker."""
    ext = current_app.extensions
    if "sluice_job_queue" not in ext:
        with _publisher_lock:
            url = current_app.config["SLUICE_SETTINGS"].amqp_url
            ext.setdefault("sluice_job_queue", Publisher(url) if url else None)
    return ext["sluice_job_queue"]


def _settings():
    return current_app.config["SLUICE_SETTINGS"]


@bp.before_request
def _from_a_gateway() -> None:
    token = _settings().gateway_token
    given = request.headers.get("X-Sluice-Gateway-Token", "")
    if not token or not hmac.compare_digest(given.encode(), token.encode()):
        raise ApiError(403, "the jobs service answers gateways only")


@bp.errorhandler(Invalid)
def _invalid(exc: Invalid) -> Response:
    """A request the caller can fix: the gateway's 400 (not the admin API's 422),
    naming each field or header and why."""
    why = "; ".join(f"{k} {v}" for k, v in exc.fields.items())
    return error_response(400, f"{exc}: {why}", exc.fields)


def _consumer() -> int:
    raw = request.headers.get("X-Sluice-Consumer-Id", "")
    if not raw.isdigit():
        raise ApiError(403, "no authenticated consumer")
    return int(raw)


def _priority() -> str:
    return request.headers.get("X-Sluice-Priority-Class") or "standard"


@bp.post("/submit/<path:endpoint>")
def submit(endpoint: str) -> tuple[Response, int, dict]:
    if publisher() is None:
        raise ApiError(503, "async jobs are not enabled on this deployment (no broker: "
                            "SLUICE_AMQP_URL)")
    body = request.get_data(cache=False)
    query = request.query_string.decode("latin-1")
    job = jobs.submit(db(), publisher(), jobs.Submission(
        consumer_id=_consumer(), priority=_priority(),
        path="/" + endpoint + ("?" + query if query else ""),
        model=request.headers.get("X-Sluice-Model") or None,
        content_type=request.headers.get("Content-Type"), body=body,
        callback_url=request.headers.get("X-Sluice-Callback-Url") or None),
        allow_private=_settings().webhook_allow_private)
    headers = {"Location": f"/v1/jobs/{job.id}"}
    # a request buffered at peak (plan buffer_at_peak) did not ask for it
    if "respond-async" in request.headers.get("Prefer", "").lower():
        headers["Preference-Applied"] = "respond-async"
    return jsonify(jobs.render(job)), 202, headers


@bp.get("/v1/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    return jsonify(jobs.render(jobs.get_for(db(), _consumer(), job_id)))


@bp.delete("/v1/jobs/<job_id>")
def cancel_job(job_id: str) -> Response:
    return jsonify(jobs.render(jobs.cancel(db(), _consumer(), job_id)))


@bp.post("/v1/files")
def upload_file() -> tuple[Response, int]:
    upload = request.files.get("file")
    if upload is None:
        raise ApiError(400, "a multipart/form-data field 'file' is required")
    row = batches.create_file(db(), _consumer(), request.form.get("purpose", ""),
                              upload.filename or "upload.jsonl", upload.read())
    return jsonify(batches.render_file(row)), 200


@bp.get("/v1/files/<file_id>")
def get_file(file_id: str) -> Response:
    return jsonify(batches.render_file(batches.get_file(db(), _consumer(), file_id)))


@bp.get("/v1/files/<file_id>/content")
def file_content(file_id: str) -> Response:
    row = batches.get_file(db(), _consumer(), file_id)
    return Response(row.content, mimetype="application/jsonl")


@bp.post("/v1/batches")
def create_batch() -> Response:
    if publisher() is None:
        raise ApiError(503, "batches are not enabled on this deployment (no broker: "
                            "SLUICE_AMQP_URL)")
    data = json_body()
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object")
    batch = batches.create_batch(db(), publisher(), _consumer(), data)
    return jsonify(batches.render_batch(db(), batch))


@bp.get("/v1/batches/<batch_id>")
def get_batch(batch_id: str) -> Response:
    batch = batches.get_batch(db(), _consumer(), batch_id)
    return jsonify(batches.render_batch(db(), batch))


@bp.post("/v1/batches/<batch_id>/cancel")
def cancel_batch(batch_id: str) -> Response:
    batch = batches.cancel_batch(db(), _consumer(), batch_id)
    return jsonify(batches.render_batch(db(), batch))
