// Typed errors, one class per status of the gateway's error template
//   {"error": {"code": 429, "type": "rate_limited", "message": "...", "retry_after": 2, "request_id": "..."}}
// or of Anthropic's shape, which /v1/messages answers in
//   {"type": "error", "error": {"type": "rate_limit_error", "message": "..."}, "request_id": "..."}

export class SluiceError extends Error {
  constructor(message, { code = null, type = null, requestId = null, retryAfter = null,
    body = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code;              // the HTTP status; null when no answer came
    this.type = type;              // the template's error type, e.g. "rate_limited"
    this.requestId = requestId;
    this.retryAfter = retryAfter;  // seconds, or null
    this.body = body;
  }
}
export class APIConnectionError extends SluiceError {}
export class APITimeoutError extends APIConnectionError {}
export class APIStatusError extends SluiceError {}
export class BadRequestError extends APIStatusError {}
export class AuthenticationError extends APIStatusError {}
export class PermissionDeniedError extends APIStatusError {}
export class NotFoundError extends APIStatusError {}
export class PayloadTooLargeError extends APIStatusError {}
export class RateLimitError extends APIStatusError {}
export class ContentPolicyError extends APIStatusError {}
export class InternalServerError extends APIStatusError {}
export class BackendError extends APIStatusError {}
export class ServiceUnavailableError extends APIStatusError {}
export class GatewayTimeoutError extends APIStatusError {}

const BY_STATUS = {
  400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
  404: NotFoundError, 413: PayloadTooLargeError, 429: RateLimitError,
  451: ContentPolicyError, 500: InternalServerError, 502: BackendError,
  503: ServiceUnavailableError, 504: GatewayTimeoutError,
};

export function errorFrom(status, body, requestIdHeader, retryAfter) {
  const err = body && typeof body === "object" ? body.error : undefined;
  let message = `HTTP ${status}`;
  let type = null;
  let requestId = requestIdHeader || null;
  if (err && typeof err === "object") {
    message = err.message || message;
    type = err.type || null;
    requestId = err.request_id || body.request_id || requestId;
    if (retryAfter === null && typeof err.retry_after === "number") retryAfter = err.retry_after;
  } else if (typeof err === "string") {
    message = err;
  } else if (typeof body === "string" && body) {
    message = body.slice(0, 500);
  }
  const Cls = BY_STATUS[status] || APIStatusError;
  return new Cls(String(message), { code: status, type, requestId, retryAfter, body });
}

// The status an error event in the middle of a stream stands for, when it carries none:
// Anthropic's error types, the Responses API's error codes, the gateway's own types.
const BY_TYPE = {
  invalid_request_error: 400, authentication_error: 401, permission_error: 403,
  not_found_error: 404, request_too_large: 413, rate_limit_error: 429, api_error: 500,
  overloaded_error: 503, timeout_error: 504, rate_limit_exceeded: 429, invalid_prompt: 400,
  server_error: 500, invalid_request: 400, unauthorized: 401, forbidden: 403,
  not_found: 404, payload_too_large: 413, rate_limited: 429, policy_violation: 451,
  internal_error: 500, backend_error: 502, backend_unavailable: 503, backend_timeout: 504,
};

// The error an event of a stream stands for, or null: the gateway's template
// ({"error": {...}}), Anthropic's error event ({"type": "error", "error": {...}}), the
// Responses API's ({"type": "error", "code", "message"}) and its response.failed.
export function errorFromEvent(event, requestId) {
  let err;
  if (event.error && typeof event.error === "object") err = event.error;
  else if (event.type === "error") err = { ...event, type: null };
  else if (event.type === "response.failed") err = event.response?.error || {};
  else return null;
  const code = err.code;
  const name = err.type || (typeof code === "string" ? code : null);
  const status = Number.isInteger(code) ? code : (BY_TYPE[name] || 500);
  const Cls = BY_STATUS[status] || APIStatusError;
  return new Cls(String(err.message || `HTTP ${status}`), {
    code: status, type: name, requestId: err.request_id || event.request_id || requestId || null,
    retryAfter: typeof err.retry_after === "number" ? err.retry_after : null, body: event });
}

export function parseRetryAfter(raw) {
  if (raw === null || raw === undefined) return null;
  const seconds = Number(raw);
  if (raw.trim() !== "" && Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(raw);
  return Number.isNaN(date) ? null : Math.max(0, (date - Date.now()) / 1000);
}

