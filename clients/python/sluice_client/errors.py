"""Typed errors, one class per status of the gateway's error template:

    {"error": {"code": 429, "type": "rate_limited", "message": "...",
               "retry_after": 2, "request_id": "..."}}

or of the Anthropic shape that /v1/messages answers in:

    {"type": "error", "error": {"type": "rate_limit_error", "message": "..."},
     "request_id": "..."}

Every error carries `code` (the HTTP status; None when no answer came), `type`,
`message`, `request_id` and `retry_after` (seconds, or None).
"""
from __future__ import annotations

from typing import Any, Optional


class SluiceError(Exception):
    """Base of every error this client raises."""

    def __init__(self, message: str, *, code: Optional[int] = None,
                 type: Optional[str] = None, request_id: Optional[str] = None,
                 retry_after: Optional[float] = None, body: Any = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.type = type
        self.request_id = request_id
        self.retry_after = retry_after
        self.body = body

    def __str__(self) -> str:
        where = f" (request_id {self.request_id})" if self.request_id else ""
        code = f"{self.code} " if self.code is not None else ""
        return f"{code}{self.type or 'error'}: {self.message}{where}"


class APIConnectionError(SluiceError):
    """The gateway could not be reached (refused, reset, DNS, connect timeout)."""


class APITimeoutError(APIConnectionError):
    """No answer within the read timeout."""


class APIStatusError(SluiceError):
    """The gateway answered with an error status."""


class BadRequestError(APIStatusError):          # 400
    pass


class AuthenticationError(APIStatusError):      # 401
    pass


class PermissionDeniedError(APIStatusError):    # 403
    pass


class NotFoundError(APIStatusError):            # 404
    pass


class PayloadTooLargeError(APIStatusError):     # 413
    pass


class RateLimitError(APIStatusError):           # 429: rate limit or quota
    pass


class ContentPolicyError(APIStatusError):       # 451
    pass


class InternalServerError(APIStatusError):      # 500
    pass


class BackendError(APIStatusError):             # 502
    pass


class ServiceUnavailableError(APIStatusError):  # 503: no healthy backend, loading, queue full
    pass


class GatewayTimeoutError(APIStatusError):      # 504
    pass


BY_STATUS = {400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
             404: NotFoundError, 413: PayloadTooLargeError, 429: RateLimitError,
             451: ContentPolicyError, 500: InternalServerError, 502: BackendError,
             503: ServiceUnavailableError, 504: GatewayTimeoutError}


# The status an error event in the middle of a stream stands for, when it carries none:
# Anthropic's error types, the Responses API's error codes, the gateway's own types.
BY_TYPE = {"invalid_request_error": 400, "authentication_error": 401,
           "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
           "rate_limit_error": 429, "api_error": 500, "overloaded_error": 503,
           "timeout_error": 504, "rate_limit_exceeded": 429, "invalid_prompt": 400,
           "server_error": 500, "invalid_request": 400, "unauthorized": 401,
           "forbidden": 403, "not_found": 404, "payload_too_large": 413,
           "rate_limited": 429, "policy_violation": 451, "internal_error": 500, "backend_error": 502, "backend_unavailable": 503,
           "backend_timeout": 504}


def from_response(status: int, body: Any, headers: Any, retry_after: Optional[float]
                  ) -> APIStatusError:
    """The error for an answer, from the template when the body is one (a backend's
    own error body, or none, still gives the status and the X-Request-Id header)."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        message = err.get("message") or f"HTTP {status}"
        type_ = err.get("type")
        request_id = err.get("request_id") or body.get("request_id")
        if isinstance(err.get("retry_after"), (int, float)) and retry_after is None:
            retry_after = float(err["retry_after"])
    else:
        message = err if isinstance(err, str) else (
            body if isinstance(body, str) and body else f"HTTP {status}")
        type_, request_id = None, None
    request_id = request_id or headers.get("X-Request-Id")
    cls = BY_STATUS.get(status, APIStatusError)
    return cls(str(message), code=status, type=type_, request_id=request_id,
               retry_after=retry_after, body=body)


def from_event(event: dict, request_id: Optional[str]) -> Optional[APIStatusError]:
    """The error an event of a stream stands for, or None: the gateway's template
    ({"error": {...}}), Anthropic's error event ({"type": "error", "error": {...}}),
    the Responses API's ({"type": "error", "code", "message"}) and its
    response.failed ({"response": {"error": {...}}})."""
    err = event.get("error")
    if isinstance(err, dict):
        body = event
    elif event.get("type") == "error":
        err, body = event, event
    elif event.get("type") == "response.failed":
        err = (event.get("response") or {}).get("error") or {}
        body = event
    else:
        return None
    code = err.get("code")
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    name = err.get("type") if err is not event else None
    name = name or (code if isinstance(code, str) else None)
    if status is None:
        status = BY_TYPE.get(str(name), 500)
    cls = BY_STATUS.get(status, APIStatusError)
    return cls(str(err.get("message") or f"HTTP {status}"), code=status, type=name,
               request_id=err.get("request_id") or event.get("request_id") or request_id,
               retry_after=err.get("retry_after") if isinstance(
                   err.get("retry_after"), (int, float)) else None, body=body)
