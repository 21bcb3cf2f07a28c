"""The admin API's OpenAPI 3.1 document, built from the parsers that validate requests.

    GET /api/v1/openapi.json     no token needed: it holds no secret (views.OPENAPI_PATH)

Every CRUD resource comes from `views.RESOURCES` (its Schema's fields, their parsers'
JSON Schemas, and what it renders); the other endpoints are listed here with the
parser dicts their views use for the query string and body; tests/api/test_openapi.py
and test_fuzz_*.py check the routes against it and fuzz them (schemathesis).
"""
from __future__ import annotations

import re
from functools import cache
from typing import Any

from flask import Response, jsonify

from control_plane.api import (jobs_admin, observability, phi_schema, second_factor, telemetry,
                              tokens, usage)
from control_plane.api.schemas import GATEWAY_REGISTRATION
from control_plane.api.errors import ERROR_TYPES
from control_plane.api.validation import Field, Parser, accepts, identifier, returns
from control_plane.api.views import API_PREFIX, OPENAPI_PATH, RESOURCES, CrudResource, bp
from control_plane.services import scrapes
from control_plane.services import telemetry as telemetry_service

TITLE = "Sluice admin API"
VERSION = "1"
JSON = "application/json"

ERROR = {
    "type": "object", "required": ["error"], "additionalProperties": False,
    "properties": {"error": {
        "type": "object", "required": ["code", "type", "message", "request_id"],
        "properties": {
            "code": {"type": "integer"},
            "type": {"type": "string", "examples": sorted(set(ERROR_TYPES.values()))},
            "message": {"type": "string"},
            "fields": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "each invalid field (or query parameter) and why"},
            "request_id": {"type": "string"},
        }}},
}
_OBJECT = {"type": "object"}
_OBJECTS = {"type": "array", "items": _OBJECT}
_ID_PARAM = {"name": "id", "in": "path", "required": True,
             "schema": {"type": "integer", "minimum": 0}}


_OTP = [{"name": second_factor.HEADER, "in": "header", "required": False,
         "schema": {"type": "string", "maxLength": 32},
         "description": "the current TOTP code (or a recovery code) of the token's user: "
                        "needed for this change when SLUICE_ADMIN_OTP_REQUIRED is on"}]
_OTP_KINDS = set(second_factor.GUARDED_DELETES) | {"backends", "models"}

_WHY = {401: "no admin token, or an expired or revoked one",
        403: "a wrong token, or one beyond its scopes or role",
        409: "a name already taken, or still in use", 422: "invalid fields (see fields)",
        503: "database_unavailable: the database is unreachable (Retry-After)"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _field_schema(field: Field) -> dict[str, Any]:
    schema = accepts(field.parse)
    return _nullable(schema) if field.nullable else schema


def _body(fields: dict[str, Field], *, partial: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object", "additionalProperties": False,
        "properties": {n: _field_schema(f) for n, f in fields.items()}}
    required = [n for n, f in fields.items() if f.required and not partial]
    if required:
        schema["required"] = required
    return schema


def _shown(res: CrudResource) -> dict[str, Any]:
    """What `render` returns: every field, read-only ones included, never null unless
    the field is nullable (or a read-only one says so)."""
    props: dict[str, Any] = {}
    for name, field in res.schema.create.items():
        if field.write_only:
            continue
        out = returns(field.parse)
        props[name] = _nullable(out) if field.nullable else out
    props.update(res.schema.shown)
    return {"type": "object", "required": sorted(props), "additionalProperties": False,
            "properties": props}


def _query(parsers: dict[str, Parser]) -> list[dict[str, Any]]:
    return [{"name": n, "in": "query", "required": False, "schema": accepts(p)}
            for n, p in parsers.items()]


def _responses(ok: int, schema: dict[str, Any] | None, *errors: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if schema is None:
        out[str(ok)] = {"description": "done; no body"}
    else:
        out[str(ok)] = {"description": "OK", "content": {JSON: {"schema": schema}}}
    for status in (400, 401, 403, 405, 413, 500, 503) + errors:
        out[str(status)] = {"description": _WHY.get(status) or ERROR_TYPES.get(status, "error"),
                            "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return out


def _json_request(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {JSON: {"schema": schema}}}


def _crud(res: CrudResource, components: dict[str, Any]) -> dict[str, Any]:
    tag = res.path.strip("/")
    name = type(res.schema).__name__.removesuffix("Schema")     # ModelSchema: Model
    one_id = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()       # JwtIssuer: jwt_issuer
    ref = {"$ref": f"#/components/schemas/{name}"}
    components[name] = _shown(res)
    components[name + "Create"] = _body(res.schema.create, partial=False)
    components[name + "Update"] = _body(res.schema.update, partial=True)
    created = ref
    if res.created_shows:
        created = _shown(res)
        created["properties"] = {**created["properties"], **res.created_shows}
        created["required"] = sorted(created["properties"])
    listing = {"type": "object", "required": ["items"], "additionalProperties": False,
               "properties": {"items": {"type": "array", "items": ref}}}
    filters = [{"name": f, "in": "query", "required": False, "schema": accepts(identifier)}
               for f in res.filters]
    base, one = API_PREFIX + res.path, API_PREFIX + res.path + "/{id}"
    otp = _OTP if tag in _OTP_KINDS else []
    return {
        base: {
            "get": {"tags": [tag], "operationId": f"list_{tag.replace('-', '_')}", "parameters": filters,
                    "responses": _responses(200, listing, 422)},
            "post": {"tags": [tag], "operationId": f"create_{one_id}",
                     "requestBody": _json_request(
                         {"$ref": f"#/components/schemas/{name}Create"}),
                     "responses": _responses(201, created, 404, 409, 422)},
        },
        one: {
            "parameters": [_ID_PARAM],
            "get": {"tags": [tag], "operationId": f"get_{one_id}",
                    "responses": _responses(200, ref, 404)},
            "patch": {"tags": [tag], "operationId": f"update_{one_id}", "parameters": otp,
                      "requestBody": _json_request(
                          {"$ref": f"#/components/schemas/{name}Update"}),
                      "responses": _responses(200, ref, 404, 409, 422)},
            "delete": {"tags": [tag], "operationId": f"delete_{one_id}",
                       "parameters": otp if tag in second_factor.GUARDED_DELETES else [],
                       "responses": _responses(204, None, 404, 409)},
        },
    }


def _object(**props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": sorted(props), "properties": props}


def _telemetry_report() -> dict[str, Any]:
    reading = {"type": "object", "additionalProperties": False,
               "required": list(telemetry.READING_REQUIRED),
               "properties": {n: accepts(p) for n, p in
                              {**telemetry.READING_REQUIRED,
                               **telemetry.READING_OPTIONAL}.items()}}
    return {"type": "object", "additionalProperties": False,
            "required": ["host", "source", "gpus"],
            "properties": {"host": {"type": "string", "pattern": telemetry.HOST_PATTERN},
                           "source": {"type": "string", "enum": list(telemetry.SOURCES)},
                           "gpus": {"type": "array", "minItems": 1,
                                    "maxItems": telemetry.MAX_GPUS_PER_REPORT,
                                    "items": reading}}}


def _seconds(limit: float) -> list[dict[str, Any]]:
    return [{"name": "seconds", "in": "query", "required": False,
             "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": limit,
                        "default": 300}}]


def _get(tag: str, op: str, schema: dict[str, Any], params: list | None = None,
         *errors: int, summary: str = "") -> dict[str, Any]:
    out = {"tags": [tag], "operationId": op, "parameters": params or [],
           "responses": _responses(200, schema, *errors)}
    if summary:
        out["summary"] = summary
    return {"get": out}


_QUEUE_DEPTH = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
                "description": "critical, standard, best_effort (and total)"}


_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_PRESET = _object(
    name={"type": "string"}, title={"type": "string"}, protocol={"type": "string"},
    available={"type": "boolean"}, url={"type": ["string", "null"]},
    auth_header_name={"type": "string"}, auth_format={"type": "string"},
    key_required={"type": "boolean"}, headers=_STRINGS, paths=_STRINGS,
    query={"type": ["string", "null"]}, defaults=_STRINGS,
    needs={"type": "array", "items": {"type": "string"}}, probed={"type": "boolean"},
    docs={"type": "string"})


_TOKEN = {"type": "object", "required": sorted(tokens.TOKEN_SHOWN),
          "additionalProperties": False, "properties": tokens.TOKEN_SHOWN}
_TOKEN_CREATED = {**_TOKEN, "required": sorted(tokens.TOKEN_SHOWN) + ["token"],
                  "properties": {**tokens.TOKEN_SHOWN, "token": {"type": "string"}}}


def _other_paths() -> dict[str, Any]:
    p = API_PREFIX
    page = {"type": "object", "required": ["items"],
            "properties": {"items": _OBJECTS, "next_before_id": {"type": "integer"}}}
    gpu_id = [{"name": "gpu_id", "in": "path", "required": True,
               "schema": {"type": "integer", "minimum": 0}}]
    backend_id = [{"name": "backend_id", "in": "path", "required": True,
                   "schema": {"type": "integer", "minimum": 0}}]
    return {
        p + "/config": _get("config", "config_version", _object(version={"type": "integer"}),
                            summary="the configuration version"),
        p + "/backend-presets": _get("config", "list_backend_presets",
                                     _object(items={"type": "array", "items": _PRESET}),
                                     summary="hosted vendors a backend can be created "
                                             "from (\"preset\": name)"),
        p + "/phi-classes": _get("config", "list_phi_classes",
                                 _object(items={"type": "array",
                                                "items": phi_schema.CLASS_SHOWN}),
                                 summary="personal and health data classes a phi_policy "
                                         "names, with their detectors"),
        p + "/snapshot": _get("config", "get_snapshot",
                              _object(version={"type": "integer"}),
                              summary="the snapshot the gateways get, secrets redacted"),
        p + "/telemetry": {
            **_get("telemetry", "latest_telemetry",
                   _object(stale_after_s={"type": "number"}, gpus=_OBJECTS)),
            "post": {"tags": ["telemetry"], "operationId": "ingest_telemetry",
                     "summary": "an agent's report (agent or admin token)",
                     "requestBody": _json_request(_telemetry_report()),
                     "responses": _responses(200, _OBJECT, 422)}},
        p + "/telemetry/gpus/{gpu_id}/history": _get(
            "telemetry", "gpu_history",
            _object(gpu_id={"type": "integer"}, samples=_OBJECTS),
            gpu_id + _seconds(telemetry_service.HISTORY_SECONDS), 404, 422),
        p + "/telemetry/scrapes": _get(
            "telemetry", "latest_scrapes",
            _object(stale_after_s={"type": "number"}, scrapes=_OBJECTS)),
        p + "/telemetry/scrapes/{backend_id}/history": _get(
            "telemetry", "scrape_history",
            _object(backend_id={"type": "integer"}, samples=_OBJECTS),
            backend_id + _seconds(scrapes.HISTORY_SECONDS), 404, 422),
        p + "/telemetry/affinity": _get("telemetry", "affinity_report",
                                        _object(models=_OBJECTS)),
        p + "/logs": _get("logs", "search_logs", page,
                          _query(observability.LOG_PARAMS), 422),
        p + "/logs/stats": _get("logs", "log_stats",
                                _object(since={"type": "string"}, until={"type": "string"},
                                        models=_OBJECTS),
                                _query(observability.STATS_PARAMS), 422),
        p + "/audit": _get("audit", "search_audit", page,
                           _query(observability.AUDIT_PARAMS), 422),
        p + "/audit/anchors": _get(
            "audit", "audit_anchors",
            {"type": "object", "required": ["items"],
             "properties": {"items": _OBJECTS, "next_after_id": {"type": "integer"}}},
            _query(observability.ANCHOR_PARAMS), 422,
            summary="anchors of the hash-chained logs (chain head hash, seq, row id, "
                    "time), oldest first: export them and keep them elsewhere"),
        p + "/audit/verify": _get(
            "audit", "verify_logs",
            _object(ok={"type": "boolean"}, chains=_OBJECTS),
            _query(observability.VERIFY_PARAMS), 422,
            summary="walk the hash chains (audit, inference:<source>) and name the "
                    "first row altered, removed or inserted"),
        p + "/scaling": _get("scaling", "scaling_signals",
                             _object(window_seconds={"type": "number"}, models=_OBJECTS),
                             [], 422),
        p + "/health": _get("health", "backend_health", _OBJECT, [], 422),
        p + "/queues": _get("health", "queue_depths", _object(
            sampled_at={"type": ["number", "null"]},
            models={"type": "object", "additionalProperties": _QUEUE_DEPTH,
                    "description": "waiting requests per model, summed over the gateways"},
            gateways={"type": "object", "additionalProperties": {
                "type": "object", "additionalProperties": _QUEUE_DEPTH}},
            unreachable={"type": "object", "additionalProperties": {"type": "string"}}),
            [], 422, summary="requests waiting for a slot of a saturated model, per "
                             "model and priority class, read from every live gateway"),
        p + "/usage": _get("usage", "daily_usage",
                           _object(since={"type": "string", "format": "date"},
                                   until={"type": "string", "format": "date"},
                                   items=_OBJECTS),
                           _query(usage.USAGE_PARAMS), 422),
        p + "/consumers/{id}/usage": {"parameters": [_ID_PARAM], **_get(
            "usage", "consumer_usage", _OBJECT, [], 404, 422)},
        p + "/gateways/register": {"post": {
            "tags": ["gateways"], "operationId": "register_gateway",
            "summary": "a gateway joins or heartbeats (gateway token, not the admin token)",
            "security": [{"gatewayToken": []}],
            "requestBody": _json_request(_body(GATEWAY_REGISTRATION, partial=False)),
            "responses": _responses(200, _object(
                id={"type": "integer"}, name={"type": "string"}, joined={"type": "boolean"},
                state={"type": "string"}, heartbeat_interval_s={"type": "number"},
                ttl_s={"type": "number"}), 409, 422)}},
        p + "/controllers": _get("gateways", "list_controllers",
                                 _object(active=_nullable(_OBJECT), items=_OBJECTS),
                                 summary="controller processes; which one is active"),
        p + "/fleet": _get("gateways", "fleet_summary", _OBJECT,
                           summary="gateways live, stale, gone and on the current version; "
                                   "the active controller"),
        p + "/consumers/{id}/webhook-secret": {"parameters": [_ID_PARAM], "post": {
            "tags": ["jobs"], "operationId": "set_webhook_secret", "parameters": _OTP,
            "summary": "a new webhook signing secret for the consumer, shown this once",
            "responses": _responses(201, _object(consumer_id={"type": "integer"},
                                                 secret={"type": "string"}), 404, 422)}},
        p + "/jobs": _get("jobs", "list_jobs", _object(items=_OBJECTS),
                          _query(jobs_admin.JOB_PARAMS), 422,
                          summary="recent async jobs, newest first"),
        p + "/jobs/stats": _get("jobs", "job_stats",
                                _object(by_status=_OBJECT, by_model=_OBJECT,
                                        oldest_queued_s={"type": ["number", "null"]}),
                                [], 422, summary="queue depth: jobs by status and model"),
        p + "/webhook-deliveries": _get("jobs", "list_webhook_deliveries",
                                        _object(items=_OBJECTS),
                                        _query(jobs_admin.DELIVERY_PARAMS), 422,
                                        summary="webhook deliveries, newest first"),
        p + "/webhook-deliveries/{id}/resend": {"parameters": [_ID_PARAM], "post": {
            "tags": ["jobs"], "operationId": "resend_webhook_delivery",
            "summary": "deliver that delivery's job again (a new delivery)",
            "responses": _responses(201, _OBJECT, 404, 422)}},
        p + "/tokens": {
            **_get("tokens", "list_tokens", _object(items={"type": "array", "items": _TOKEN}),
                   summary="the caller's personal API tokens (every user's with the "
                           "bootstrap token)"),
            "post": {"tags": ["tokens"], "operationId": "create_token",
                     "summary": "a personal API token, shown this once (\"user\": with "
                                "the bootstrap token only)",
                     "requestBody": _json_request(_body(tokens.TOKEN_CREATE, partial=False)),
                     "responses": _responses(201, _TOKEN_CREATED, 422)}},
        p + "/tokens/{id}": {"parameters": [_ID_PARAM], "delete": {
            "tags": ["tokens"], "operationId": "revoke_token",
            "summary": "revoke one of the caller's tokens",
            "responses": _responses(204, None, 404)}},
        p + "/second-factor": {
            **_get("second-factor", "second_factor_status", _object(
                enrolled={"type": "boolean"}, recovery_codes_left={"type": "integer"},
                required={"type": "boolean"}), summary="the token's user's second factor"),
            "post": {"tags": ["second-factor"], "operationId": "begin_second_factor",
                     "summary": "a new TOTP secret, shown once; in force once confirmed",
                     "responses": _responses(201, _object(secret={"type": "string"},
                                                          otpauth_uri={"type": "string"}),
                                             409)},
            "delete": {"tags": ["second-factor"], "operationId": "remove_second_factor",
                       "summary": "remove the second factor (needs its code)",
                       "parameters": _OTP, "responses": _responses(204, None)}},
        p + "/second-factor/confirm": {"post": {
            "tags": ["second-factor"], "operationId": "confirm_second_factor",
            "summary": "the first code puts the secret in force; recovery codes, shown once",
            "requestBody": _json_request(_body(second_factor.CONFIRM, partial=False)),
            "responses": _responses(200, _object(recovery_codes={
                "type": "array", "items": {"type": "string"}}), 409, 422)}},
        OPENAPI_PATH: {"get": {"tags": ["meta"], "operationId": "openapi",
                               "summary": "this document (no token needed)",
                               "security": [],
                               "responses": {"200": {"description": "OK", "content": {
                                   JSON: {"schema": _OBJECT}}}}}},
    }


@cache
def document() -> dict[str, Any]:
    """The whole document; built once per process (the schemas are code)."""
    components: dict[str, Any] = {"Error": ERROR}
    paths: dict[str, Any] = {}
    for res in RESOURCES:
        paths.update(_crud(res, components))
    paths.update(_other_paths())
    return {
        "openapi": "3.1.0",
        "info": {"title": TITLE, "version": VERSION,
                 "description": "Configure models, backends, routes, consumers, keys "
                                "and plans; read telemetry, logs, usage and audit. "
                                "Errors are {\"error\": {...}} with a request_id."},
        "security": [{"adminToken": []}],
        "components": {"schemas": components, "securitySchemes": {
            "adminToken": {"type": "http", "scheme": "bearer",
                           "description": "a personal API token (POST /api/v1/tokens), or "
                                          "the shared SLUICE_ADMIN_TOKEN while "
                                          "SLUICE_ADMIN_TOKEN_ENABLED"},
            "gatewayToken": {"type": "http", "scheme": "bearer",
                             "description": "SLUICE_GATEWAY_TOKEN (gateway registration)"}}},
        "paths": paths,
    }


@bp.get("/openapi.json")
def openapi_json() -> Response:
    return jsonify(document())
