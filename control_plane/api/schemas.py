"""What each resource accepts (validation schemas) and how it is shown (render)."""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from control_plane.api import media_schema, phi_schema
from control_plane.api import validation as v
from control_plane.api.backend_fields import PRESET_FIELDS, SHAPE_FIELDS
from control_plane.api.validation import Field, described
from control_plane.clients import backend_tls
from control_plane.tables.config import (MAX_QUEUE_TIMEOUT_MS, MAX_WEIGHT, METRICS_FORMATS, PRIORITIES,
                                         PROTOCOLS, ApiKey, Backend, Consumer, Gateway,
                                         Mapping, Model, ModelType, Plan)

MAX_TIMEOUT_MS = 3_600_000
MAX_CACHE_TTL_S = 30 * 86400
MAX_OUTPUT_TOKENS = 2**31 - 1
MAX_REQUEST_BYTES = 2**40
MAX_RATE = 1_000_000.0
MAX_COUNT = 2**53           # quotas: the gateway counts in doubles
MAX_AUTH_HEADER = 4096
MAX_IN_FLIGHT = 1_000_000
COMMON_READ_ONLY = ("id", "created_at", "updated_at")
_GPU_CLASS = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_GPU_CLASS_RE = re.compile(_GPU_CLASS)
_INT = {"type": "integer"}
_TIME = {"type": "string", "format": "date-time"}
# what every resource shows beyond its fields (the OpenAPI document's responses)
COMMON_SHOWN: dict[str, dict[str, Any]] = {"id": _INT, "created_at": _TIME,
                                           "updated_at": _TIME}


@described({"type": "string", "pattern": _GPU_CLASS})
def gpu_class(value: Any) -> str:
    """A GPU class as the agent derives it from the device name: "A100", "T4"."""
    if not isinstance(value, str) or not _GPU_CLASS_RE.match(value):
        raise ValueError('must be a GPU class such as "A100" or "T4": 1-64 letters, '
                         "digits and . _ -")
    return value


def iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    return dt.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


_PEM = {"type": "string", "minLength": 1, "maxLength": backend_tls.MAX_PEM,
        "pattern": "-----BEGIN "}
_PEM_CERTS = v.documented(backend_tls.certificates, _PEM)
_PEM_KEY = v.documented(backend_tls.private_key, _PEM)


class Schema:
    """Create and update rules of one resource plus its JSON rendering.

    `render` shows the fields of `create` that are not write-only, with the values
    their parsers return, plus `shown` (read-only fields and their JSON Schema).
    """
    create: dict[str, Field]
    update: dict[str, Field]
    read_only: tuple[str, ...] = COMMON_READ_ONLY
    shown: dict[str, dict[str, Any]] = COMMON_SHOWN

    def render(self, obj: Any) -> dict[str, Any]:
        raise NotImplementedError


class ModelSchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "timeout_ms": Field(v.integer(1, MAX_TIMEOUT_MS)),
        "cache_ttl_s": Field(v.integer(0, MAX_CACHE_TTL_S)),
        "cache_shared": Field(v.boolean),
        "mask_pii": Field(v.boolean), "phi_policy": phi_schema.FIELD,   # docs/phi.md
        "enabled": Field(v.boolean),
        # the most tokens one answer may ask for (null: the gateway's default bound)
        "max_output_tokens": Field(v.integer(1, MAX_OUTPUT_TOKENS), nullable=True),
        # audio and image work (null: none) and the largest request body (null: default)
        "media_tasks": Field(media_schema.media_tasks, nullable=True),
        "max_request_bytes": Field(v.integer(1, MAX_REQUEST_BYTES), nullable=True),
        "weight_coefficients": Field(v.coefficients, nullable=True),
        # affinity: only backends on GPUs of this class serve the model
        "gpu_class": Field(gpu_class, nullable=True),
        # another model's name (services check it exists and is not this one)
        "fallback_model": Field(v.name, nullable=True),
    }
    update = {k: Field(f.parse, nullable=f.nullable) for k, f in create.items()}

    def render(self, m: Model) -> dict[str, Any]:
        return {"id": m.id, "name": m.name, "timeout_ms": m.timeout_ms,
                "cache_ttl_s": m.cache_ttl_s, "cache_shared": m.cache_shared,
                "mask_pii": m.mask_pii, "phi_policy": m.phi_policy, "enabled": m.enabled,
                "max_output_tokens": m.max_output_tokens,
                "media_tasks": m.media_tasks, "max_request_bytes": m.max_request_bytes,
                "weight_coefficients": m.weight_coefficients,
                "gpu_class": m.gpu_class,
                "fallback_model": m.fallback_model,
                "created_at": iso(m.created_at),
                "updated_at": iso(m.updated_at)}


class BackendSchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "model_id": Field(v.identifier, required=True),
        # both required, unless a preset fills them (api/backend_fields.py)
        "url": Field(v.http_url(allow_path=True, https=True)),
        "protocol": Field(v.one_of(*PROTOCOLS)),
        # required when protocol is "vendor", refused otherwise (services check)
        "mapping_id": Field(v.identifier, nullable=True),
        "weight": Field(v.integer(0, MAX_WEIGHT)),
        "enabled": Field(v.boolean),
        # write-only: rendered as auth_header_set
        "auth_header": Field(v.header_value(MAX_AUTH_HEADER), nullable=True,
                             write_only=True),
        # declared GPU class (hosts without an agent); wins over agent reports
        "gpu_class": Field(gpu_class, nullable=True),
        # Prometheus endpoint the controller scrapes; both or neither (services check)
        "metrics_url": Field(v.http_url(allow_path=True, https=True), nullable=True),
        "metrics_format": Field(v.one_of(*METRICS_FORMATS), nullable=True),
        "max_in_flight": Field(v.integer(1, MAX_IN_FLIGHT), nullable=True),
        # https:// only (services check): verification on unless set false; the CA
        # (PEM; null: the system store); the name to verify and send as SNI (null:
        # the URL's host)
        "tls_verify": Field(v.boolean),
        "tls_ca": Field(_PEM_CERTS, nullable=True),
        "tls_server_name": Field(v.hostname, nullable=True),
        # mTLS, both or neither; write-only: rendered as tls_client_cert_set and
        # tls_client_key_set
        "tls_client_cert": Field(_PEM_CERTS, nullable=True, write_only=True),
        "tls_client_key": Field(_PEM_KEY, nullable=True, write_only=True),
        # how a hosted vendor wants its requests, and a preset's values
        **SHAPE_FIELDS, **PRESET_FIELDS,
    }
    update = {k: Field(f.parse, nullable=f.nullable, write_only=f.write_only)
              for k, f in create.items()}
    read_only = COMMON_READ_ONLY + ("auth_header_set", "tls_client_cert_set",
                                    "tls_client_key_set")
    shown = {**COMMON_SHOWN, "auth_header_set": {"type": "boolean"},
             "tls_client_cert_set": {"type": "boolean"},
             "tls_client_key_set": {"type": "boolean"}}

    def render(self, b: Backend) -> dict[str, Any]:
        return {"id": b.id, "name": b.name, "model_id": b.model_id, "url": b.url,
                "protocol": b.protocol, "mapping_id": b.mapping_id,
                "weight": b.weight, "enabled": b.enabled,
                "auth_header_set": b.auth_header is not None,
                "gpu_class": b.gpu_class, "metrics_url": b.metrics_url,
                "metrics_format": b.metrics_format,
                "max_in_flight": b.max_in_flight,
                "tls_verify": b.tls_verify, "tls_ca": b.tls_ca,
                "tls_server_name": b.tls_server_name,
                "tls_client_cert_set": b.tls_client_cert is not None,
                "tls_client_key_set": b.tls_client_key is not None,
                "preset": b.preset, "auth_header_name": b.auth_header_name,
                "headers": b.headers, "paths": b.paths, "query": b.query,
                "created_at": iso(b.created_at), "updated_at": iso(b.updated_at)}


class MappingSchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "path": Field(v.url_path, required=True),
        "request": Field(v.json_object, required=True),
        "response": Field(media_schema.mapping_response, required=True),
        # audio and images: how an upload travels (null: JSON from `request`)
        "transport": Field(media_schema.mapping_transport, nullable=True),
    }
    update = {k: Field(f.parse) for k, f in create.items()}

    def render(self, m: Mapping) -> dict[str, Any]:
        return {"id": m.id, "name": m.name, "path": m.path, "request": m.request,
                "response": m.response, "transport": m.transport,
                "created_at": iso(m.created_at),
                "updated_at": iso(m.updated_at)}


class ModelTypeSchema(Schema):
    """Brief 000's `model_type` ("nlp/sentiment") -> a model or route name."""
    create = {
        "model_type": Field(v.name, required=True),
        "target": Field(v.name, required=True),
    }
    update = {k: Field(f.parse) for k, f in create.items()}

    def render(self, t: ModelType) -> dict[str, Any]:
        return {"id": t.id, "model_type": t.model_type, "target": t.target,
                "created_at": iso(t.created_at), "updated_at": iso(t.updated_at)}


class ConsumerSchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "allowed_models": Field(v.name_list, nullable=True),
        "attributes": Field(v.attributes),
        "plan_id": Field(v.identifier, nullable=True),
        "enabled": Field(v.boolean), "phi_policy": phi_schema.FIELD,   # overrides models'
    }
    update = {k: Field(f.parse, nullable=f.nullable) for k, f in create.items()}

    def render(self, c: Consumer) -> dict[str, Any]:
        return {"id": c.id, "name": c.name, "allowed_models": c.allowed_models,
                "attributes": c.attributes, "plan_id": c.plan_id,
                "enabled": c.enabled, "phi_policy": c.phi_policy, "created_at": iso(c.created_at),
                "updated_at": iso(c.updated_at)}


_count = v.integer(1, MAX_COUNT)
PLAN_LIMITS = {
    "rate_per_second": v.number(0.001, MAX_RATE),
    "burst": v.integer(1, 1_000_000_000),
    "daily_requests": _count,
    "monthly_requests": _count,
    "monthly_tokens": _count,
}


class PlanSchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "rate_per_second": Field(PLAN_LIMITS["rate_per_second"]),
        # requests per second per client address of the plan's callers (null: none)
        "rate_per_ip": Field(PLAN_LIMITS["rate_per_second"], nullable=True),
        "burst": Field(PLAN_LIMITS["burst"], nullable=True),
        "max_concurrent": Field(v.integer(1, 1_000_000), nullable=True),
        "daily_requests": Field(_count, nullable=True),
        "monthly_requests": Field(_count, nullable=True),
        "monthly_tokens": Field(_count, nullable=True),
        **media_schema.PLAN_CAP_FIELDS,   # audio seconds, speech characters, images a day
        "model_overrides": Field(v.object_of(PLAN_LIMITS)),
        "priority": Field(v.one_of(*PRIORITIES)),
        "priority_header": Field(v.boolean),
        # null: the class's default (critical 10 s, standard 2 s, best-effort 0)
        "queue_timeout_ms": Field(v.integer(0, MAX_QUEUE_TIMEOUT_MS), nullable=True),
        # best-effort requests refused at saturation become async jobs (202) instead
        "buffer_at_peak": Field(v.boolean),
        # realtime sessions (GET /v1/realtime): open at once per consumer, longest (s)
        "realtime_sessions": Field(v.integer(1, 1_000_000), nullable=True),
        "realtime_session_s": Field(v.integer(1, 86_400), nullable=True),
    }
    update = {k: Field(f.parse, nullable=f.nullable) for k, f in create.items()}

    def render(self, p: Plan) -> dict[str, Any]:
        return {"id": p.id, "name": p.name, "rate_per_second": p.rate_per_second,
                "rate_per_ip": p.rate_per_ip,
                "burst": p.burst, "max_concurrent": p.max_concurrent,
                "daily_requests": p.daily_requests, "monthly_requests": p.monthly_requests,
                "monthly_tokens": p.monthly_tokens, "model_overrides": p.model_overrides,
                "priority": p.priority, "priority_header": p.priority_header,
                "queue_timeout_ms": p.queue_timeout_ms, "buffer_at_peak": p.buffer_at_peak,
                **media_schema.plan_caps(p),
                "realtime_sessions": p.realtime_sessions,
                "realtime_session_s": p.realtime_session_s,
                "created_at": iso(p.created_at), "updated_at": iso(p.updated_at)}


class KeySchema(Schema):
    create = {
        "consumer_id": Field(v.identifier, required=True),
        "name": Field(v.text(128)),
        "enabled": Field(v.boolean),
        "expires_at": Field(v.timestamp, nullable=True),
    }
    # A key stays with its consumer; issue a new key to move access.
    update = {k: f for k, f in create.items() if k != "consumer_id"}
    read_only = COMMON_READ_ONLY + ("consumer_id", "key", "key_hash", "prefix")
    shown = {**COMMON_SHOWN, "consumer_id": _INT, "prefix": {"type": "string"}}

    def render(self, k: ApiKey) -> dict[str, Any]:
        return {"id": k.id, "consumer_id": k.consumer_id, "name": k.name,
                "prefix": k.prefix, "enabled": k.enabled, "expires_at": iso(k.expires_at),
                "created_at": iso(k.created_at), "updated_at": iso(k.updated_at)}


# A gateway's internal listener: http:// or, with internal TLS, https://.
internal_url = v.http_url(allow_path=True, https=True)


class GatewaySchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "internal_url": Field(internal_url, required=True),
    }
    update = {k: Field(f.parse) for k, f in create.items()}
    read_only = COMMON_READ_ONLY + ("acked_version", "last_push_at", "last_error",
                                    "registered", "boot_id", "sluice_version",
                                    "last_seen_at", "left_at", "state", "live", "lag",
                                    "on_current_version")
    shown = {**COMMON_SHOWN, "acked_version": {"type": ["integer", "null"]},
             "last_push_at": {"type": ["string", "null"], "format": "date-time"},
             "last_error": {"type": ["string", "null"]},
             "registered": {"type": "boolean"},
             "boot_id": {"type": ["string", "null"]},
             "sluice_version": {"type": ["string", "null"]},
             "last_seen_at": {"type": ["string", "null"], "format": "date-time"},
             "left_at": {"type": ["string", "null"], "format": "date-time"},
             "state": {"type": "string", "enum": ["live", "stale", "gone"]},
             "live": {"type": "boolean"},
             "lag": {"type": ["integer", "null"]},
             "on_current_version": {"type": "boolean"}}

    def render(self, g: Gateway) -> dict[str, Any]:
        return {"id": g.id, "name": g.name, "internal_url": g.internal_url,
                "acked_version": g.acked_version, "last_push_at": iso(g.last_push_at),
                "last_error": g.last_error, "registered": g.registered,
                "boot_id": g.boot_id, "sluice_version": g.sluice_version,
                "last_seen_at": iso(g.last_seen_at), "left_at": iso(g.left_at),
                "created_at": iso(g.created_at), "updated_at": iso(g.updated_at)}


_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,63}$")


@described({"type": "string", "pattern": _LABEL_RE.pattern})
def label(value: Any) -> str:
    """A boot id or a version string: 1-64 letters, digits and . _ : + -."""
    if not isinstance(value, str) or not _LABEL_RE.match(value):
        raise ValueError("must be 1-64 letters, digits and . _ : + -")
    return value


# POST /api/v1/gateways/register: a gateway's registration, sent again as each heartbeat
GATEWAY_REGISTRATION = {
    "name": Field(v.name, required=True),
    "internal_url": Field(internal_url, required=True),
    "boot_id": Field(label, required=True),
    "sluice_version": Field(label, required=True),
    "leaving": Field(v.boolean),
}


class ContentPolicySchema(Schema):
    create = {
        "name": Field(v.name, required=True),
        "model": Field(v.name, nullable=True),      # null: every model
        "terms": Field(v.term_list, required=True),
        "enabled": Field(v.boolean),
    }
    update = {k: Field(f.parse, nullable=f.nullable) for k, f in create.items()}

    def render(self, p: ContentPolicy) -> dict[str, Any]:
        return {"id": p.id, "name": p.name, "model": p.model, "terms": p.terms,
                "enabled": p.enabled, "created_at": iso(p.created_at),
                "updated_at": iso(p.updated_at)}
