"""Every admin API error in the template of docs/contracts.md, with a request id."""
from __future__ import annotations

import logging
import re
import uuid

from flask import Flask, Response, g, jsonify, request
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

from control_plane.api.validation import ValidationError
from control_plane.services.errors import Conflict, Invalid, NotFound

log = logging.getLogger(__name__)

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

# Seconds a caller should wait before trying again while the database is unreachable.
DATABASE_RETRY_AFTER = 5

ERROR_TYPES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    422: "validation_error",
    429: "rate_limited",
    500: "internal_error",
    502: "backend_error",
    503: "backend_unavailable",
    504: "backend_timeout",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, fields: dict[str, str] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields = fields
        self.headers = headers or {}


def request_id() -> str:
    rid = g.get("request_id")
    if rid is None:
        incoming = request.headers.get("X-Request-Id", "")
        rid = incoming if REQUEST_ID_RE.match(incoming) else uuid.uuid4().hex
        g.request_id = rid
    return rid


def error_response(status: int, message: str, fields: dict[str, str] | None = None,
                   headers: dict[str, str] | None = None, error_type: str | None = None,
                   retry_after: int | None = None) -> Response:
    error: dict = {"code": status,
                   "type": error_type or ERROR_TYPES.get(status, "http_error"),
                   "message": message}
    if fields is not None:
        error["fields"] = fields
    if retry_after is not None:
        error["retry_after"] = retry_after
    error["request_id"] = request_id()
    resp = jsonify({"error": error})
    resp.status_code = status
    resp.headers.update(headers or {})
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


def database_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached or used right now (down,
    restarting, refusing connections, connection lost, pool exhausted), as opposed to
    a bug in a query."""
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError,
                            sa_exc.TimeoutError))


def describe_database_error(exc: BaseException) -> str:
    """The driver's first line (e.g. "connection refused"): never the SQL statement
    or its parameters, which SQLAlchemy's own message carries."""
    orig = getattr(exc, "orig", None) or exc
    first = (str(orig).strip().splitlines() or [""])[0]
    return f"{type(orig).__name__}: {first[:200]}"


def database_unavailable_response() -> Response:
    return error_response(503, "the database is unreachable; try again in "
                               f"{DATABASE_RETRY_AFTER} seconds",
                          error_type="database_unavailable",
                          retry_after=DATABASE_RETRY_AFTER)


def _http_message(exc: HTTPException) -> str:
    return {
        404: "no such endpoint",
        405: f"method {request.method} is not allowed here",
        413: "request body is too large",
    }.get(exc.code or 500, exc.description or exc.name)


def register_error_handlers(app: Flask) -> None:
    @app.before_request
    def _assign_request_id() -> None:
        request_id()

    @app.after_request
    def _echo_request_id(resp: Response) -> Response:
        resp.headers["X-Request-Id"] = request_id()
        return resp

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Response:
        return error_response(exc.status, exc.message, exc.fields, exc.headers)

    @app.errorhandler(ValidationError)
    def _validation(exc: ValidationError) -> Response:
        if not exc.fields:  # the body itself is the wrong shape
            return error_response(400, str(exc))
        return error_response(422, str(exc), exc.fields)

    @app.errorhandler(Invalid)
    def _invalid(exc: Invalid) -> Response:
        return error_response(422, str(exc), exc.fields)

    @app.errorhandler(NotFound)
    def _not_found(exc: NotFound) -> Response:
        return error_response(404, str(exc))

    @app.errorhandler(Conflict)
    def _conflict(exc: Conflict) -> Response:
        return error_response(409, str(exc))

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        headers = {}
        if exc.code == 405 and exc.valid_methods:
            headers["Allow"] = ", ".join(exc.valid_methods)
        return error_response(exc.code or 500, _http_message(exc), headers=headers)

    @app.errorhandler(sa_exc.DBAPIError)
    @app.errorhandler(sa_exc.TimeoutError)
    def _database(exc: sa_exc.SQLAlchemyError) -> Response:
        if not database_unreachable(exc):
            return _internal(exc)
        log.warning("database unreachable (request_id=%s): %s", request_id(),
                    describe_database_error(exc))
        return database_unavailable_response()

    @app.errorhandler(Exception)
    def _internal(exc: Exception) -> Response:
        log.exception("unhandled error (request_id=%s)", request_id())
        return error_response(500, "internal error; quote the request_id when reporting it")
