"""The admin API's OpenAPI document: served without a token, a valid OpenAPI 3.1
document, complete (every route of the API is in it), true to what the API renders,
and fuzzed with schemathesis against the real app on a real database (the fuzzing
shared out among tests/api/test_fuzz_*.py, see tests/api/fuzzing.py)."""
from __future__ import annotations

import jsonschema
import schemathesis
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from openapi_spec_validator import validate as validate_spec

from control_plane.api.openapi import document
from control_plane.api.views import API_PREFIX, OPENAPI_PATH

from .fuzzing import GROUPS, group_of


def test_served_without_token_and_valid(client):
    r = client.get(OPENAPI_PATH)
    assert r.status_code == 200
    doc = r.get_json()
    validate_spec(doc)
    assert doc["openapi"].startswith("3.1")
    assert doc == document()
    # the rest of the API still wants the token
    assert client.get(API_PREFIX + "/models").status_code == 401


def test_every_route_is_documented(app):
    doc = document()
    missing = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(API_PREFIX):
            continue
        path = rule.rule.replace("<int:", "<").replace("<", "{").replace(">", "}")
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            if method.lower() not in doc["paths"].get(path, {}):
                missing.append(f"{method} {path}")
    assert not missing


def test_fields_match_the_validators(api):
    """The documented body is the validated one: a field the document does not know is
    refused, and a required one the document names is required."""
    models = document()["components"]["schemas"]
    assert models["ModelCreate"]["required"] == ["name"]
    assert models["ModelCreate"]["properties"]["timeout_ms"] == {
        "type": "integer", "minimum": 1, "maximum": 3_600_000}
    r = api("post", "/models", json={"name": "m", "timeout_ms": 0})
    assert r.status_code == 422 and "timeout_ms" in r.get_json()["error"]["fields"]
    # write-only fields are accepted, never shown
    assert "auth_header" in models["BackendCreate"]["properties"]
    assert "auth_header" not in models["Backend"]["properties"]


def _validator(name: str) -> jsonschema.Draft202012Validator:
    doc = document()
    return jsonschema.Draft202012Validator(
        {**doc, "$ref": f"#/components/schemas/{name}"},
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def test_what_the_api_renders_matches_the_document(api, make):
    """Every resource, created with its optional fields set, read back as documented."""
    model = make("model", gpu_class="A100", weight_coefficients={
        "memory": 0.5, "success": 0.3, "latency": 0.2}, fallback_model=None)
    plan = make("plan", burst=5, model_overrides={"m": {"burst": 2}})
    consumer = make("consumer", plan_id=plan["id"], attributes={"tier": 2},
                    allowed_models=["a", "b"])
    mapping = make("mapping")
    backend = make("backend", model_id=model["id"], auth_header="Bearer x",
                   metrics_url="http://127.0.0.1:9400/metrics", metrics_format="vllm")
    vendor = make("backend", model_id=model["id"], protocol="vendor",
                  mapping_id=mapping["id"])
    key = make("key", consumer_id=consumer["id"], expires_at="2030-01-01T00:00:00Z")
    pem = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    issuer = make("jwt-issuer", pem=pem.decode())
    policy = make("content-policy", terms=["Secret"])
    gateway = make("gateway")
    route = api("post", "/routes", json={"name": "r", "versions": [
        {"model": model["name"], "conditions": {"tier": [1, 2]}},
        {"model": model["name"], "percent": 100}]})
    assert route.status_code == 201, route.get_json()
    rendered = {"/models": ("Model", model), "/plans": ("Plan", plan),
                "/consumers": ("Consumer", consumer), "/mappings": ("Mapping", mapping),
                "/backends": ("Backend", backend), "/jwt-issuers": ("JwtIssuer", issuer),
                "/content-policies": ("ContentPolicy", policy),
                "/gateways": ("Gateway", gateway), "/routes": ("Route", route.get_json())}
    for path, (name, body) in rendered.items():
        _validator(name).validate(body)
        _validator(name).validate(api("get", f"{path}/{body['id']}").get_json())
        listed = api("get", path).get_json()
        jsonschema.validate(listed, document()["paths"][API_PREFIX + path]["get"][
            "responses"]["200"]["content"]["application/json"]["schema"] | {
            "components": document()["components"]})
    _validator("Backend").validate(vendor)
    # the new key's plain text is shown once, as documented for the create answer
    created = document()["paths"][API_PREFIX + "/keys"]["post"]["responses"]["201"]
    jsonschema.validate(key, created["content"]["application/json"]["schema"])
    _validator("Key").validate(api("get", f"/keys/{key['id']}").get_json())


def test_what_the_fuzzer_found_is_a_4xx(api, make):
    """Inputs the fuzzer (or a probe after it) turned into 500s: PostgreSQL holds no NUL
    character and no UTC offset past 15:59, an hour before year 1 does not exist, and
    deep nesting broke the recursion limit."""
    r = api("post", "/content-policies", json={"name": "p", "terms": ["a\x00b"]})
    assert r.status_code == 400 and "NUL" in r.get_json()["error"]["message"]
    r = api("post", "/models", json={"name": "m", "fallback_model": None, "x\x00": 1})
    assert r.status_code == 400
    # nesting Python's recursion limit (or psycopg2's encoder) would choke on
    for depth in (900, 100_000):
        body = '{"name": "c", "attributes": ' + '{"a":' * depth + "1" + "}" * depth + "}"
        r = api("post", "/consumers", data=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "nested" in r.get_json()["error"]["message"]
    r = api("post", "/mappings", json={"name": "v", "path": "/g", "request": {"a": [[{"b": 1}]]},
                                       "response": {"output": "/a"}})
    assert r.status_code == 201
    for path, field in (("/logs?model=a%00b", "model"), ("/audit?actor=%00", "actor"),
                        ("/usage?model=%00", "model"), ("/logs?request_id=%00", "request_id"),
                        ("/logs/stats?until=0001-01-01T00:30:00Z", "until"),
                        ("/backends?model_id=%00", "model_id")):
        r = api("get", path)
        assert r.status_code == 422, (path, r.get_json())
        assert field in r.get_json()["error"]["fields"]
    assert "int()" not in api("get", "/backends?model_id=x").get_json()["error"]["fields"][
        "model_id"]
    r = api("get", "/logs?until=9868-09-04T17%3A14%3A49%2B19%3A40")
    assert r.status_code == 200
    key = make("key", expires_at="2030-01-01T00:00:00+19:40")
    assert key["expires_at"] == "2029-12-31T04:20:00Z"


def test_fuzz_groups_cover_every_operation_once(offline_app):
    """The fuzzing modules' groups partition the document: every operation in exactly
    one group, no group naming a path the document lacks; and schemathesis finds them
    all (the document is served before any database access)."""
    doc = document()
    firsts = {p.removeprefix(API_PREFIX + "/").split("/", 1)[0] for p in doc["paths"]}
    named = [first for prefixes in GROUPS.values() for first in prefixes]
    assert sorted(named) == sorted(firsts)
    ungrouped = [f"{method.upper()} {path}" for path, ops in doc["paths"].items()
                 for method in ops if group_of(path) is None]
    assert not ungrouped
    schema = schemathesis.openapi.from_wsgi(OPENAPI_PATH, offline_app)
    fuzzed = [result.ok() for result in schema.get_all_operations()]
    assert len(fuzzed) >= 60
    assert all(group_of(operation.path) in GROUPS for operation in fuzzed)
