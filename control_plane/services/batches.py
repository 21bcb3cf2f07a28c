"""The OpenAI Batch API on the job machinery: a batch is one job per input line.

Files (`purpose` batch) hold JSONL; a batch's lines are
`{"custom_id": ..., "method": "POST", "url": <the batch's endpoint>, "body": {...}}`.
Each becomes a best-effort job (a batch yields to interactive work) that a worker
sends through a gateway like any other, so keys, quotas, content policy and routing
apply per line. When the last job ends (services/jobs.finish locks the batch row, so
exactly one finisher sees it), the output file (2xx answers) and the error file
(the rest) are written in OpenAI's line format.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from control_plane.clients.amqp import Publisher
from control_plane.services import jobs
from control_plane.services.errors import Invalid, NotFound
from control_plane.tables.jobs import FINAL_STATES, Batch, BatchFile, Job

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
WINDOWS = ("24h",)
MAX_FILE = 1 << 20          # the admin API's body limit (app.MAX_BODY_BYTES)
MAX_LINES = 10_000
PURPOSES = ("batch",)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _ts(v: datetime | None) -> int | None:
    return int(v.timestamp()) if v else None


def create_file(session: Session, consumer_id: int, purpose: str, filename: str,
                content: bytes) -> BatchFile:
    if purpose not in PURPOSES:
        raise Invalid({"purpose": "must be batch (the only purpose this gateway stores)"})
    if len(content) > MAX_FILE:
        raise Invalid({"file": f"must be at most {MAX_FILE} bytes"})
    row = BatchFile(id=jobs.new_id("file-"), consumer_id=consumer_id, purpose=purpose,
                    filename=filename[:512], content=content)
    session.add(row)
    session.commit()
    return row


def render_file(row: BatchFile) -> dict[str, Any]:
    return {"id": row.id, "object": "file", "bytes": len(row.content),
            "created_at": _ts(row.created_at), "filename": row.filename,
            "purpose": row.purpose, "status": "processed"}


def get_file(session: Session, consumer_id: int, file_id: str) -> BatchFile:
    row = session.get(BatchFile, file_id)
    if row is None or row.consumer_id != consumer_id:
        raise NotFound(f"no file {file_id}")
    return row


def _lines(content: bytes, endpoint: str) -> list[dict[str, Any]]:
    """The input file's requests; Invalid names the first bad line."""
    out, seen = [], set()
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid({"input_file_id": "the file is not UTF-8"}) from None
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            raise Invalid({"input_file_id": f"line {n} is not JSON"}) from None
        if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
            raise Invalid({"input_file_id": f"line {n} has no custom_id string"})
        if line["custom_id"] in seen:
            raise Invalid({"input_file_id": f"line {n}: custom_id {line['custom_id']!r} "
                                            "is used twice"})
        seen.add(line["custom_id"])
        if line.get("method", "POST") != "POST" or line.get("url") != endpoint:
            raise Invalid({"input_file_id": f"line {n}: method must be POST and url "
                                            f"{endpoint} (the batch's endpoint)"})
        if not isinstance(line.get("body"), dict):
            raise Invalid({"input_file_id": f"line {n}: body must be a JSON object"})
        out.append(line)
    if not out:
        raise Invalid({"input_file_id": "the file has no requests"})
    if len(out) > MAX_LINES:
        raise Invalid({"input_file_id": f"at most {MAX_LINES} requests per batch"})
    return out


def create_batch(session: Session, publisher: Publisher | None, consumer_id: int,
                 data: dict[str, Any]) -> Batch:
    endpoint = data.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise Invalid({"endpoint": "must be one of " + ", ".join(ENDPOINTS)})
    if data.get("completion_window") not in WINDOWS:
        raise Invalid({"completion_window": "must be 24h"})
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise Invalid({"metadata": "must be an object"})
    file_id = data.get("input_file_id")
    if not isinstance(file_id, str):
        raise Invalid({"input_file_id": "is required"})
    try:
        source = get_file(session, consumer_id, file_id)
    except NotFound:
        raise Invalid({"input_file_id": f"no file {file_id}"}) from None
    lines = _lines(source.content, endpoint)
    now = _now()
    batch = Batch(id=jobs.new_id("batch_"), consumer_id=consumer_id, endpoint=endpoint,
                  input_file_id=source.id, completion_window=data["completion_window"],
                  status="in_progress", total=len(lines), metadata_=metadata,
                  in_progress_at=now)
    session.add(batch)
    session.flush()
    rows = []
    for n, line in enumerate(lines):
        model = line["body"].get("model")
        rows.append(Job(id=jobs.new_id("job_"), consumer_id=consumer_id,
                        priority="best_effort", method="POST", path=endpoint,
                        model=model if isinstance(model, str) else None,
                        content_type="application/json",
                        body=json.dumps(line["body"]).encode(), status="queued",
                        batch_id=batch.id, custom_id=line["custom_id"], line=n))
    session.add_all(rows)
    session.commit()
    jobs.enqueue(session, publisher, rows)
    return batch


def get_batch(session: Session, consumer_id: int, batch_id: str) -> Batch:
    batch = session.get(Batch, batch_id)
    if batch is None or batch.consumer_id != consumer_id:
        raise NotFound(f"no batch {batch_id}")
    return batch


def _counts(session: Session, batch_id: str) -> dict[str, int]:
    rows = session.execute(select(Job.status, func.count()).where(Job.batch_id == batch_id)
                           .group_by(Job.status)).all()
    return dict(rows)


def render_batch(session: Session, batch: Batch) -> dict[str, Any]:
    session.refresh(batch)
    counts = _counts(session, batch.id)
    return {
        "id": batch.id, "object": "batch", "endpoint": batch.endpoint, "errors": None,
        "input_file_id": batch.input_file_id, "completion_window": batch.completion_window,
        "status": batch.status, "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id, "created_at": _ts(batch.created_at),
        "in_progress_at": _ts(batch.in_progress_at), "expires_at": None,
        "finalizing_at": _ts(batch.finalizing_at), "completed_at": _ts(batch.completed_at),
        "failed_at": None, "expired_at": None, "cancelling_at": _ts(batch.cancelling_at),
        "cancelled_at": _ts(batch.cancelled_at),
        "request_counts": {"total": batch.total,
                           "completed": counts.get("succeeded", 0),
                           "failed": counts.get("failed", 0) + counts.get("cancelled", 0)},
        "metadata": batch.metadata_,
    }


def cancel_batch(session: Session, consumer_id: int, batch_id: str) -> Batch:
    """Cancel the batch's queued lines; the batch is cancelled once its running lines
    end (at once when none runs)."""
    batch = session.execute(select(Batch).where(Batch.id == batch_id).with_for_update()) \
        .scalar_one_or_none()
    if batch is None or batch.consumer_id != consumer_id:
        session.rollback()
        raise NotFound(f"no batch {batch_id}")
    if batch.status in ("in_progress", "validating"):
        now = _now()
        session.execute(update(Job).where(Job.batch_id == batch.id, Job.status == "queued")
                        .values(status="cancelled", finished_at=now))
        batch.status, batch.cancelling_at = "cancelling", now
        maybe_finalize(session, batch)
    session.commit()
    return batch


def _line(job: Job) -> dict[str, Any]:
    body = None
    if job.result_body is not None:
        try:
            body = json.loads(job.result_body)
        except ValueError:
            body = job.result_body.decode("utf-8", errors="replace")
    response = None if job.result_status is None else {
        "status_code": job.result_status, "request_id": job.id, "body": body}
    error = None
    if job.status == "cancelled":
        error = {"code": "batch_cancelled", "message": "the batch was cancelled"}
    elif job.status != "succeeded":
        e = job.error or {}
        error = {"code": e.get("type", "failed"), "message": e.get("message", "failed")}
    return {"id": "batch_req_" + job.id.removeprefix("job_"), "custom_id": job.custom_id,
            "response": response, "error": error}


def maybe_finalize(session: Session, batch: Batch) -> None:
    """Write the output and error files once every line has ended (the caller holds
    the batch row's lock and commits)."""
    if batch.status not in ("in_progress", "cancelling"):
        return
    pending = session.scalar(select(func.count()).where(
        Job.batch_id == batch.id, Job.status.not_in(FINAL_STATES)))
    if pending:
        return
    done = list(session.scalars(select(Job).where(Job.batch_id == batch.id)
                                .order_by(Job.line)))
    ok = [j for j in done if j.status == "succeeded"]
    bad = [j for j in done if j.status != "succeeded"]
    now = _now()
    for rows, attr, name in ((ok, "output_file_id", "output"), (bad, "error_file_id", "errors")):
        if not rows:
            continue
        content = "".join(json.dumps(_line(j)) + "\n" for j in rows).encode()
        f = BatchFile(id=jobs.new_id("file-"), consumer_id=batch.consumer_id,
                      purpose="batch_output", filename=f"{batch.id}_{name}.jsonl",
                      content=content)
        session.add(f)
        setattr(batch, attr, f.id)
    batch.finalizing_at = now
    if batch.status == "cancelling":
        batch.status, batch.cancelled_at = "cancelled", now
    else:
        batch.status, batch.completed_at = "completed", now
