"""What each resource's admin page lists and asks for: one `Page` description per
resource (its form inputs, its list columns), the table the generic views of
admin/pages.py are driven by."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, object_session

from control_plane.admin.forms import Input, form_values
from control_plane.api.backend_fields import to_row as backend_to_row
from control_plane.api.fleet import gateway_renderer
from control_plane.api.route_schema import RouteSchema
from control_plane.api.jwt_issuer_schema import JwtIssuerSchema
from control_plane.api.schemas import (BackendSchema, ConsumerSchema, GatewaySchema,
                                       KeySchema, MappingSchema,
                                       ModelSchema, PlanSchema, Schema, iso)
from control_plane.api.views import db
from control_plane.services import presets
from control_plane.services.resources import (BACKENDS, CONSUMERS, GATEWAYS, JWT_ISSUERS,
                                              KEYS, MAPPINGS, MODELS, PLANS, Resource)
from control_plane.services.routes import ROUTES
from control_plane.tables.config import (METRICS_FORMATS, PRIORITIES, PROTOCOLS, Consumer, Plan,
                                         Route, RouteVersion)

# the gateways page's membership columns, as the API renders them
render_gateway = gateway_renderer(db)


Column = tuple[str, Callable[[Any], Any]]


@dataclass
class Page:
    kind: str               # URL segment: /admin/<kind>/
    title: str              # "API keys"
    singular: str           # "API key"
    resource: Resource
    schema: Schema
    inputs: list[Input]
    columns: list[Column]
    label: Callable[[Any], str] = field(default=lambda obj: obj.name)
    editable: bool = True
    delete_verb: str = "Delete"
    related: tuple[str, str] | None = None  # (endpoint, label) linked from the list
    # validated input -> columns, as the API's register_resource(to_row=...) does
    to_row: Callable[..., dict[str, Any]] | None = None
    # what an edit form shows, when the row's columns are not the inputs one to one
    edit_values: Callable[[Any], dict[str, Any]] | None = None

    def row_data(self, data: dict[str, Any], *, creating: bool) -> dict[str, Any]:
        return self.to_row(data, partial=not creating) if self.to_row else data

    def choices(self, session: Session) -> dict[str, list[tuple[str, str]]]:
        return {i.name: i.choices(session) for i in self.inputs if i.choices}


def _model_choices(session: Session) -> list[tuple[str, str]]:
    return [(str(m.id), m.name) for m in MODELS.list(session)]


def _consumer_choices(session: Session) -> list[tuple[str, str]]:
    return [(str(c.id), c.name) for c in CONSUMERS.list(session)]


def _mapping_choices(session: Session) -> list[tuple[str, str]]:
    return [(str(m.id), m.name) for m in MAPPINGS.list(session)]


def _plan_choices(session: Session) -> list[tuple[str, str]]:
    return [(str(p.id), p.name) for p in PLANS.list(session)]


def _plan_name(consumer: Consumer) -> str:
    if consumer.plan_id is None:
        return "—"
    return object_session(consumer).get(Plan, consumer.plan_id).name


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _tls_summary(b: Any) -> str:
    """What the backends list says about TLS: nothing of the PEMs themselves."""
    if not b.url.startswith("https://"):
        return "—"
    parts = ["verified" if b.tls_verify else "NOT verified"]
    if b.tls_verify:
        parts.append("own CA" if b.tls_ca else "system CAs")
    if b.tls_client_cert is not None:
        parts.append("client cert")
    return ", ".join(parts)


def _limit(value: Any) -> Any:
    return "unlimited" if value is None else value


def _version_text(v: RouteVersion) -> str:
    when = " and ".join(f"{c['attr']} {c['op']} {json.dumps(c['value'])}"
                        for c in v.conditions)
    return f"{v.model.name} {v.percent} %" + (f" if {when}" if when else "")


def _route_values(r: Route) -> dict[str, Any]:
    versions = [{"model": v.model.name, "percent": v.percent,
                 **({"conditions": v.conditions} if v.conditions else {})}
                for v in r.versions]
    return {"name": r.name, "sticky": r.sticky, "enabled": r.enabled,
            "versions": json.dumps(versions, indent=1, ensure_ascii=False)}


def _preset_choices(_session: Session) -> list[tuple[str, str]]:
    out = []
    for p in presets.PRESETS.values():
        note = ", ".join(p.needs()) if p.available else f"needs the {p.protocol} protocol"
        out.append((p.name, f"{p.title} ({p.protocol}; {note})"))
    return out


def _backend_values(b: Any) -> dict[str, Any]:
    """A backend's edit form: the columns a preset filled, shown as they are stored
    (emptied, one is left alone). The preset and its values are for creating only."""
    values = form_values(b, PAGES["backends"].inputs)
    for name in ("url", "protocol", "auth_header_name", "query"):
        values[name] = getattr(b, name) or ""
    for name in ("headers", "paths"):
        value = getattr(b, name)
        values[name] = json.dumps(value, indent=1, ensure_ascii=False) if value else ""
    return values


def _limit_input(name: str, label: str, help: str) -> Input:
    return Input(name, label, "number", blank_is_null=True, help=help + " Empty: unlimited.")


PAGES: dict[str, Page] = {p.kind: p for p in [
    Page("models", "Models", "model", MODELS, ModelSchema(),
         inputs=[Input("name", "Name", required=True,
                       help="Callers use it as the \"model\" of a request."),
                 Input("timeout_ms", "Timeout (ms)", "number", default="60000",
                       help="How long a backend may take to answer, 1 to 3600000."),
                 Input("gpu_class", "GPU class", blank_is_null=True,
                       help="Only backends on GPUs of this class (e.g. A100) serve it. "
                            "Empty: any."),
                 Input("fallback_model", "Fallback model", blank_is_null=True,
                       help="Another model's name: it answers when this one times out. "
                            "Empty: none."),
                 Input("mask_pii", "Mask PII", "checkbox", default=False,
                       help="Mask e-mail addresses, phone, national ID and card numbers "
                            "in requests before they reach the backends."),
                 Input("phi_policy", "PHI policy (JSON)", "json", blank_is_null=True,
                       help='Personal and health data by class (docs/phi.md), both ways, '
                            'e.g. {"ssn": "block", "*": "mask"}. Empty: none.'),
                 Input("enabled", "Enabled", "checkbox", default=True)],
         columns=[("Name", lambda m: m.name), ("Timeout (ms)", lambda m: m.timeout_ms),
                  ("Backends", lambda m: len(m.backends)),
                  ("Enabled", lambda m: _yes(m.enabled))]),
    Page("backends", "Backends", "backend", BACKENDS, BackendSchema(),
         inputs=[Input("name", "Name", required=True),
                 Input("model_id", "Model", "ref", required=True,
                       choices=_model_choices),
                 Input("preset", "Preset", "select", blank_is_absent=True, create_only=True,
                       choices=_preset_choices,
                       help="A hosted vendor (docs/presets.md): it fills the protocol, "
                            "URL, key header, headers, paths and query from the values "
                            "below; a field you fill yourself wins. Empty: none."),
                 Input("api_key", "Vendor API key", "secret", create_only=True,
                       help="With a preset: the vendor's key, sent in the header and form "
                            "the preset names. Write-only."),
                 Input("base_url", "Base URL", blank_is_absent=True, create_only=True,
                       help="With a preset: the server's URL when it is not the vendor's "
                            "own (vLLM, SGLang, a proxy)."),
                 Input("resource", "Azure resource", blank_is_absent=True, create_only=True,
                       help="Azure OpenAI: https://<resource>.openai.azure.com"),
                 Input("deployment", "Azure deployment", blank_is_absent=True, create_only=True),
                 Input("api_version", "Azure api-version", blank_is_absent=True, create_only=True,
                       help=f"Empty: {presets.AZURE_API_VERSION}."),
                 Input("upstream_model", "Vendor model", blank_is_absent=True, create_only=True,
                       help="Gemini: the model in the URL, e.g. gemini-2.0-flash."),
                 Input("url", "URL", blank_is_absent=True,
                       help="http[s]://host:port[/base path] (required without a preset)"),
                 Input("protocol", "Protocol", "select", blank_is_absent=True,
                       choices=lambda _s: [(p, p) for p in PROTOCOLS],
                       help="Required without a preset."),
                 Input("auth_header_name", "Key header", blank_is_absent=True,
                       help="The header the credential goes in. Empty: Authorization "
                            "(or the preset's)."),
                 Input("headers", "Other headers (JSON)", "json", blank_is_absent=True,
                       help='Sent as they are, e.g. {"anthropic-version": "2023-06-01"}. '
                            "Not secret: shown here."),
                 Input("paths", "Path map (JSON)", "json", blank_is_absent=True,
                       help='The gateway\'s paths to the backend\'s, e.g. '
                            '{"/v1/chat/completions": "/chat/completions"}.'),
                 Input("query", "Query string", blank_is_absent=True,
                       help="Sent with every request, e.g. api-version=2024-10-21."),
                 Input("mapping_id", "Mapping", "ref", choices=_mapping_choices,
                       blank_is_null=True,
                       help="Only for protocol vendor: how its API is spoken."),
                 Input("weight", "Weight", "number", default="100",
                       help="Share of the model's traffic, 0 to 1000; 0 drains it."),
                 Input("auth_header", "Authorization header", "secret",
                       help="Sent to the backend as Authorization, e.g. \"Bearer sk-…\". "
                            "Write-only: it is never shown again; leave empty to keep it."),
                 Input("tls_verify", "Verify TLS certificate", "checkbox", default=True,
                       help="https:// backends: check the backend's certificate and name. "
                            "Turn off only for a lab backend you trust."),
                 Input("tls_ca", "TLS CA (PEM)", "textarea", blank_is_null=True,
                       help="The CA that signs the backend's certificate. Empty: the "
                            "system store."),
                 Input("tls_server_name", "TLS server name", blank_is_null=True,
                       help="The name its certificate must carry, also sent as SNI. "
                            "Empty: the URL's host."),
                 Input("tls_client_cert", "TLS client certificate (PEM)", "secret_text",
                       help="mTLS: the certificate the gateway presents. Write-only; "
                            "leave empty to keep it."),
                 Input("tls_client_key", "TLS client key (PEM)", "secret_text",
                       help="Its private key, unencrypted. Write-only: never shown again; "
                            "leave empty to keep it."),
                 Input("gpu_class", "GPU class", blank_is_null=True,
                       help="Declared GPU class (e.g. T4) for hosts without an agent; "
                            "wins over what agents report."),
                 Input("metrics_url", "Metrics URL", blank_is_null=True,
                       help="Prometheus endpoint the controller scrapes for free "
                            "capacity, e.g. http://host:8000/metrics."),
                 Input("metrics_format", "Metrics format", "select", blank_is_null=True,
                       choices=lambda _s: [(f, f) for f in METRICS_FORMATS]),
                 _limit_input("max_in_flight", "Max in flight",
                              "Requests it takes at once; a full pool sheds best-effort "
                              "traffic first."),
                 Input("enabled", "Enabled", "checkbox", default=True)],
         columns=[("Name", lambda b: b.name), ("Model", lambda b: b.model.name),
                  ("URL", lambda b: b.url), ("Protocol", lambda b: b.protocol),
                  ("Preset", lambda b: b.preset or "—"),
                  ("Weight", lambda b: b.weight if b.weight else "0 (drained)"),
                  ("Credential", lambda b: "set" if b.auth_header is not None else "—"),
                  ("TLS", lambda b: _tls_summary(b)),
                  ("Enabled", lambda b: _yes(b.enabled))],
         to_row=backend_to_row, edit_values=lambda b: _backend_values(b)),
    Page("mappings", "Mappings", "mapping", MAPPINGS, MappingSchema(),
         inputs=[Input("name", "Name", required=True),
                 Input("path", "Path", required=True,
                       help="Where to POST, after the backend's base path, e.g. /generate"),
                 Input("request", "Request template (JSON)", "json",
                       default='{"prompt": "{{input}}"}',
                       help="{{input}}, {{inputs}}, {{model}}, {{params.NAME}} are "
                            "filled in per request; see docs/contracts.md."),
                 Input("response", "Response pointers (JSON)", "json",
                       default='{"output": "/output", "error": "/error/message"}',
                       help="RFC 6901 JSON pointers to the answer and the error message.")],
         columns=[("Name", lambda m: m.name), ("Path", lambda m: m.path),
                  ("Output", lambda m: m.response.get("output", "")),
                  ("Error", lambda m: m.response.get("error", "—"))]),
    Page("consumers", "Consumers", "consumer", CONSUMERS, ConsumerSchema(),
         inputs=[Input("name", "Name", required=True),
                 Input("allowed_models", "Allowed models", "names",
                       help="Model names, separated by commas; empty allows every model."),
                 Input("attributes", "Attributes (JSON)", "json", default="{}",
                       help='Facts routing rules can test, e.g. {"user_type": "vip"}.'),
                 Input("plan_id", "Plan", "ref", choices=_plan_choices, blank_is_null=True,
                       help="Its rate limits and quotas; none: unlimited."),
                 Input("phi_policy", "PHI policy (JSON)", "json", blank_is_null=True,
                       help="Overrides its models' phi_policy (docs/phi.md). Empty: theirs."),
                 Input("enabled", "Enabled", "checkbox", default=True)],
         columns=[("Name", lambda c: c.name),
                  ("Allowed models", lambda c: ", ".join(c.allowed_models)
                   if c.allowed_models is not None else "all"),
                  ("Plan", _plan_name),
                  ("Keys", lambda c: len(c.keys)), ("Enabled", lambda c: _yes(c.enabled))]),
    Page("plans", "Plans", "plan", PLANS, PlanSchema(),
         inputs=[Input("name", "Name", required=True),
                 Input("rate_per_second", "Requests per second", "decimal", default="100",
                       help="The token bucket's refill rate, e.g. 5 or 0.5."),
                 Input("burst", "Burst", "number", blank_is_null=True,
                       help="The bucket's size; empty: one second's worth."),
                 Input("rate_per_ip", "Requests per second per client address", "decimal",
                       blank_is_null=True, help="Empty: no per-address limit."),
                 _limit_input("max_concurrent", "Concurrent requests", "At most this many at once."),
                 _limit_input("daily_requests", "Requests per day", "UTC days."),
                 _limit_input("monthly_requests", "Requests per month", "UTC months."),
                 _limit_input("monthly_tokens", "Tokens per month", "Prompt plus completion."),
                 Input("model_overrides", "Per-model overrides (JSON)", "json", default="{}",
                       help='e.g. {"chat-demo": {"rate_per_second": 2}}'),
                 Input("priority", "Priority", "select", default="standard", required=True,
                       choices=lambda _s: [(p, p) for p in PRIORITIES],
                       help="Who is refused first when a model's backends are full."),
                 Input("priority_header", "Callers may lower it (X-Sluice-Priority)",
                       "checkbox", default=False),
                 Input("queue_timeout_ms", "Queue wait (ms)", "number", blank_is_null=True,
                       help="How long a request waits for a slot of a full model; empty: "
                            "the priority's default (critical 10000, standard 2000, "
                            "best_effort 0 = refused at once)."),
                 Input("buffer_at_peak", "Buffer at peak (best-effort requests a full "
                       "model refuses become async jobs)", "checkbox", default=False),
                 _limit_input("realtime_sessions", "Realtime sessions at once",
                              "Open WebSocket sessions (GET /v1/realtime) per consumer."),
                 _limit_input("realtime_session_s", "Realtime session length (s)",
                              "The longest one session may last.")],
         columns=[("Name", lambda p: p.name), ("Req/s", lambda p: f"{p.rate_per_second:g}"),
                  ("Burst", lambda p: p.burst or "1 s worth"),
                  ("Concurrent", lambda p: _limit(p.max_concurrent)),
                  ("Per day", lambda p: _limit(p.daily_requests)),
                  ("Per month", lambda p: _limit(p.monthly_requests)),
                  ("Tokens/month", lambda p: _limit(p.monthly_tokens)),
                  ("Overrides", lambda p: ", ".join(sorted(p.model_overrides)) or "—"),
                  ("Priority", lambda p: p.priority),
                  ("Queue wait", lambda p: f"{p.queue_timeout()} ms")],
         related=("admin.quota_usage", "Quota usage")),
    Page("keys", "API keys", "API key", KEYS, KeySchema(),
         inputs=[Input("consumer_id", "Consumer", "ref", required=True,
                       choices=_consumer_choices, create_only=True),
                 Input("name", "Name", help="A note for you, e.g. where the key is used."),
                 Input("expires_at", "Expires at", "datetime",
                       help="ISO 8601, e.g. 2030-01-01T00:00:00Z; empty: never."),
                 Input("enabled", "Enabled", "checkbox", default=True)],
         columns=[("Prefix", lambda k: k.prefix + "…"), ("Consumer", lambda k: k.consumer.name),
                  ("Name", lambda k: k.name), ("Expires", lambda k: iso(k.expires_at) or "never"),
                  ("Enabled", lambda k: _yes(k.enabled))],
         label=lambda k: f"{k.prefix}… ({k.consumer.name})", delete_verb="Revoke"),
    Page("jwt-issuers", "JWT issuers", "JWT issuer", JWT_ISSUERS, JwtIssuerSchema(),
         inputs=[Input("name", "Name", required=True),
                 Input("pem", "Public key (PEM)", "textarea", blank_is_absent=True,
                       help="-----BEGIN PUBLIC KEY----- …; or give a JWKS below. When "
                            "editing, leave both empty to keep the current keys."),
                 Input("jwks", "JWKS (JSON)", "json", blank_is_absent=True,
                       help='{"keys": [...]} or a single JWK (RS256 or ES256).'),
                 Input("jwks_uri", "JWKS URL", blank_is_absent=True,
                       help="https://…/jwks.json, or an OpenID discovery URL (…/.well-"
                            "known/openid-configuration): the controller fetches the keys "
                            "and follows their rotation. Instead of a PEM or JWKS."),
                 Input("issuer", "Issuer (iss)", blank_is_null=True,
                       help="Empty: any issuer."),
                 Input("audience", "Audience (aud)", blank_is_null=True,
                       help="Empty: any audience."),
                 Input("consumer_claim", "Consumer claim", default="sub",
                       help="The claim that names the consumer."),
                 Input("expires_at", "Expires at", "datetime",
                       help="ISO 8601; empty: never."),
                 Input("enabled", "Enabled", "checkbox", default=True)],
         columns=[("Name", lambda j: j.name),
                  ("Keys", lambda j: ", ".join(f"{k['alg']} {k.get('kid') or '(no kid)'}"
                                               for k in j.keys)),
                  ("Fetched from", lambda j: j.jwks_uri or "—"),
                  ("Fetch error", lambda j: j.jwks_last_error or "—"),
                  ("Issuer", lambda j: j.issuer or "any"),
                  ("Audience", lambda j: j.audience or "any"),
                  ("Claim", lambda j: j.consumer_claim),
                  ("Enabled", lambda j: _yes(j.enabled))],
         to_row=JwtIssuerSchema.to_row),
    Page("routes", "Routes", "route", ROUTES, RouteSchema(),
         inputs=[Input("name", "Name", required=True,
                       help="The model name callers use; it may be a model's own name."),
                 Input("versions", "Versions (JSON)", "json", required=True,
                       default='[{"model": "chat-demo", "percent": 95},\n'
                               ' {"model": "chat-canary", "percent": 5}]',
                       help='Models with a percent; versions with "conditions" (e.g. '
                            '{"user_type": "vip"}) come first and take that percent of '
                            "the callers that match; the others must add up to 100."),
                 Input("sticky", "Sticky", "checkbox", default=True,
                       help="A caller keeps its version while the percents hold."),
                 Input("enabled", "Enabled", "checkbox", default=True)],
         columns=[("Name", lambda r: r.name),
                  ("Versions", lambda r: "; ".join(_version_text(v) for v in r.versions)),
                  ("Sticky", lambda r: _yes(r.sticky)), ("Enabled", lambda r: _yes(r.enabled))],
         edit_values=_route_values),
    Page("gateways", "Gateways", "gateway", GATEWAYS, GatewaySchema(),
         inputs=[Input("name", "Name", required=True),
                 Input("internal_url", "Internal URL", required=True,
                       help="The gateway's internal listener, e.g. http://127.0.0.1:8001 "
                            "(gateways that join by themselves need no entry here)")],
         columns=[("Name", lambda g: g.name), ("Internal URL", lambda g: g.internal_url),
                  ("Joined", lambda g: "registered" if g.registered else "listed"),
                  ("State", lambda g: render_gateway(g)["state"]),
                  ("Acked version", lambda g: g.acked_version if g.acked_version is not None
                   else "—"),
                  ("Lag", lambda g: _dash(render_gateway(g)["lag"])),
                  ("Sluice", lambda g: g.sluice_version or "—"),
                  ("Boot id", lambda g: g.boot_id or "—"),
                  ("Last seen", lambda g: iso(g.last_seen_at) or "—"),
                  ("Last push", lambda g: iso(g.last_push_at) or "—"),
                  ("Last error", lambda g: g.last_error or "")]),
]}


def _dash(value: Any) -> Any:
    return "—" if value is None else value
