"""The admin REST API, /api/v1. Views parse, call a service, render; nothing more."""
from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request
from sqlalchemy.orm import Session

from control_plane.api import backend_fields, identity
from control_plane.api import second_factor as second_factor_api
from control_plane.api import fleet as fleet_api
from control_plane.api import telemetry as telemetry_api
from control_plane.api import tokens as tokens_api
from control_plane.api.errors import ApiError
from control_plane.api.jwt_issuer_schema import JwtIssuerSchema
from control_plane.api.schemas import (BackendSchema, ConsumerSchema, ContentPolicySchema,
                                       GatewaySchema, KeySchema, MappingSchema,
                                       ModelSchema, ModelTypeSchema, PlanSchema, Schema)
from control_plane.api.route_schema import RouteSchema
from control_plane.api.validation import ValidationError, identifier, validate
from control_plane.services import phi_classes, presets, snapshot
from control_plane.services.config_state import current_version
from control_plane.services.resources import (BACKENDS, CONSUMERS, CONTENT_POLICIES, GATEWAYS,
                                              JWT_ISSUERS, KEYS, MAPPINGS, MODEL_TYPES, MODELS,
                                              PLANS, Resource)
from control_plane.services.routes import ROUTES

API_PREFIX = "/api/v1"
# The OpenAPI document holds no secret, and operators fetch it to generate clients
# before they hold a token: it is the one path under /api/ served without one.
OPENAPI_PATH = API_PREFIX + "/openapi.json"
bp = Blueprint("api", __name__, url_prefix=API_PREFIX)


@dataclass(frozen=True)
class CrudResource:
    """One resource served by `register_resource`, as the OpenAPI document lists it."""
    path: str
    schema: Schema
    filters: tuple[str, ...]
    created_shows: dict[str, dict[str, Any]] = field(default_factory=dict)


RESOURCES: list[CrudResource] = []


def db() -> Session:
    """The request's session, opened on first use and closed at teardown."""
    if "db" not in g:
        g.db = current_app.extensions["sluice"].sessionmaker()
    return g.db


def close_db(_exc: BaseException | None = None) -> None:
    session = g.pop("db", None)
    if session is not None:
        session.close()


def require_admin_token() -> None:
    """Bearer auth for everything under /api/, unknown routes included: the bootstrap
    token or a personal token (api/identity.py). Agents' telemetry reports may use the
    agent token (SLUICE_AGENT_TOKEN) instead."""
    if not request.path.startswith("/api/"):
        return
    if request.path == OPENAPI_PATH and request.method in ("GET", "HEAD"):
        return
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "missing admin token: send Authorization: Bearer <token>",
                       headers={"WWW-Authenticate": 'Bearer realm="sluice-admin"'})
    given = token.strip().encode("utf-8")
    if request.path == fleet_api.REGISTER_PATH:
        # gateways register with the gateway token, and only with it
        gateway_token = current_app.config["SLUICE_SETTINGS"].gateway_token
        if gateway_token and hmac.compare_digest(given, gateway_token.encode("utf-8")):
            return
        raise ApiError(403, "invalid gateway token")
    if hmac.compare_digest(given, current_app.config["ADMIN_TOKEN"].encode("utf-8")):
        identity.bootstrap_allowed()
        second_factor_api.require(request.method, request.path, API_PREFIX, db())
        return
    if identity.personal(db(), token.strip(), request.method, request.path, API_PREFIX):
        second_factor_api.require(request.method, request.path, API_PREFIX, db())
        return
    agent_token = current_app.config["SLUICE_SETTINGS"].agent_token
    if (agent_token and request.method == "POST" and request.path == API_PREFIX + "/telemetry"
            and hmac.compare_digest(given, agent_token.encode("utf-8"))):
        return
    raise ApiError(403, "invalid admin token")


def json_body() -> Any:
    raw = request.get_data(cache=True)
    if not raw.strip():
        raise ApiError(400, "request body must be a JSON object")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ApiError(400, f"request body is nested deeper than {MAX_JSON_DEPTH} levels") \
            from None
    except ValueError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    problem = _unstorable(data)
    if problem:
        raise ApiError(400, "request body " + problem)
    return data


MAX_JSON_DEPTH = 64


def _unstorable(data: Any) -> str | None:
    """What PostgreSQL (and the snapshot's JSON) could not take, found without
    recursion: a NUL character in a string, or nesting deeper than MAX_JSON_DEPTH."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return "must not contain NUL characters (\\u0000)"
        elif isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return f"is nested deeper than {MAX_JSON_DEPTH} levels"
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                if isinstance(k, str) and "\x00" in k:
                    return "must not contain NUL characters (\\u0000)"
                stack.append((v, depth + 1))
    return None


def query_filters(names: tuple[str, ...]) -> dict[str, int]:
    filters, errors = {}, {}
    for name in names:
        raw = request.args.get(name)
        if raw is None:
            continue
        try:
            value: Any = int(raw)
        except ValueError:
            value = raw     # identifier() refuses it, saying what it wants
        try:
            filters[name] = identifier(value)
        except ValueError as exc:
            errors[name] = str(exc)
    if errors:
        raise ValidationError(errors, "invalid query parameters")
    return filters


def register_resource(path: str, resource: Resource, schema: Schema,
                      create_view: Callable[[], Any] | None = None,
                      to_row: Callable[..., dict[str, Any]] | None = None,
                      created_shows: dict[str, dict[str, Any]] | None = None,
                      render: Callable[[Any], dict[str, Any]] | None = None) -> None:
    """The five CRUD routes of one resource. `to_row` maps validated input to columns;
    `created_shows` names what `create_view` adds to the rendered row (and its schema);
    `render` (default: the schema's) a row to its JSON."""
    name = path.strip("/").replace("-", "_")
    RESOURCES.append(CrudResource(path, schema, resource.filters, created_shows or {}))
    if to_row is None:
        def to_row(data: dict[str, Any], *, partial: bool) -> dict[str, Any]:
            return data
    render = render or schema.render

    def list_() -> Response:
        rows = resource.list(db(), **query_filters(resource.filters))
        return jsonify({"items": [render(r) for r in rows]})

    def create() -> tuple[Response, int]:
        data = validate(json_body(), schema.create, read_only=schema.read_only)
        data = to_row(data, partial=False)
        return jsonify(render(resource.create(db(), data))), 201

    def get(id: int) -> Response:
        return jsonify(render(resource.get(db(), id)))

    def update(id: int) -> Response:
        data = validate(json_body(), schema.update, partial=True, read_only=schema.read_only)
        data = to_row(data, partial=True)
        return jsonify(render(resource.update(db(), id, data)))

    def delete(id: int) -> tuple[str, int]:
        resource.delete(db(), id)
        return "", 204

    bp.add_url_rule(path, f"{name}_list", list_, methods=["GET"])
    bp.add_url_rule(path, f"{name}_create", create_view or create, methods=["POST"])
    bp.add_url_rule(f"{path}/<int:id>", f"{name}_get", get, methods=["GET"])
    bp.add_url_rule(f"{path}/<int:id>", f"{name}_update", update, methods=["PATCH"])
    bp.add_url_rule(f"{path}/<int:id>", f"{name}_delete", delete, methods=["DELETE"])


register_resource("/models", MODELS, ModelSchema())
register_resource("/backends", BACKENDS, BackendSchema(), to_row=backend_fields.to_row)
register_resource("/mappings", MAPPINGS, MappingSchema())
register_resource("/model-types", MODEL_TYPES, ModelTypeSchema())
register_resource("/consumers", CONSUMERS, ConsumerSchema())
register_resource("/gateways", GATEWAYS, GatewaySchema(),
                  render=fleet_api.gateway_renderer(db))
register_resource("/plans", PLANS, PlanSchema())
register_resource("/content-policies", CONTENT_POLICIES, ContentPolicySchema())
register_resource("/routes", ROUTES, RouteSchema())
register_resource("/jwt-issuers", JWT_ISSUERS, JwtIssuerSchema(),
                  to_row=JwtIssuerSchema.to_row)

_key_schema = KeySchema()


def create_key() -> tuple[Response, int]:
    """Like the generic create, but the answer carries the plain key, this once."""
    data = validate(json_body(), _key_schema.create, read_only=_key_schema.read_only)
    row, key = KEYS.create_with_key(db(), data)
    return jsonify({**_key_schema.render(row), "key": key}), 201


register_resource("/keys", KEYS, _key_schema, create_view=create_key,
                  created_shows={"key": {"type": "string"}})


@bp.get("/backend-presets")
def backend_presets() -> Response:
    """The hosted vendors a backend can be created from (services/presets.py)."""
    return jsonify({"items": presets.listing()})


@bp.get("/phi-classes")
def phi_classes_list() -> Response:
    """The personal and health data classes a phi_policy names (docs/phi.md)."""
    return jsonify({"items": phi_classes.listing()})


@bp.get("/config")
def config() -> Response:
    return jsonify({"version": current_version(db())})


@bp.get("/snapshot")
def get_snapshot() -> Response:
    settings = current_app.config["SLUICE_SETTINGS"]
    return jsonify(snapshot.redacted(snapshot.build(db(), settings)))


telemetry_api.register(bp, db, json_body)
fleet_api.register(bp, db, json_body)
tokens_api.register(bp, db, json_body, API_PREFIX)
second_factor_api.register(bp, db, json_body)


def init_app(app: Flask) -> None:
    app.before_request(require_admin_token)
    app.teardown_appcontext(close_db)
    app.register_blueprint(bp)
