"""Backend presets in the admin API: GET /api/v1/backend-presets, and backends
created from a preset and its few values (control_plane/services/presets.py), the
snapshot the gateways get from them, and what is refused."""
from __future__ import annotations

import pytest

from control_plane.clients.gateway import GatewayClient
from control_plane.controller.health_loop import HealthLoop
from control_plane.db import make_engine, make_sessionmaker
from control_plane.demo.backends import serve
from control_plane.services import presets, snapshot
from control_plane.settings import Settings


def test_presets_are_listed_to_admins_only(client, api):
    assert client.get("/api/v1/backend-presets").status_code == 401
    r = api("get", "/backend-presets")
    assert r.status_code == 200
    items = {p["name"]: p for p in r.get_json()["items"]}
    assert set(items) == {"openai", "azure_openai", "anthropic", "gemini", "deepseek",
                          "dashscope", "mistral", "vllm", "sglang"}
    azure = items["azure_openai"]
    assert azure["protocol"] == "openai" and azure["auth_header_name"] == "api-key"
    assert azure["query"] == "api-version={api_version}"
    assert azure["needs"] == ["api_key", "resource", "deployment"]
    assert azure["paths"]["/v1/chat/completions"] == "/chat/completions"
    assert items["gemini"]["needs"] == ["api_key", "upstream_model"]
    assert items["vllm"]["needs"] == ["base_url"] and items["vllm"]["key_required"] is False
    anthropic = items["anthropic"]
    assert anthropic["protocol"] == "anthropic"
    assert anthropic["headers"] == {"anthropic-version": presets.ANTHROPIC_VERSION}
    assert anthropic["available"] is True


def _backend_in_snapshot(api, backend_id: int) -> dict:
    snap = api("get", "/snapshot").get_json()
    for model in snap["models"].values():
        for b in model["backends"]:
            if b["id"] == backend_id:
                return b
    raise AssertionError(f"backend {backend_id} is not in the snapshot")


def test_azure_preset_fills_the_backend(api, make):
    model = make("model")
    r = api("post", "/backends", json={
        "name": "azure-1", "model_id": model["id"], "preset": "azure_openai",
        "api_key": "az-secret", "resource": "contoso", "deployment": "gpt4o-prod"})
    assert r.status_code == 201, r.get_json()
    b = r.get_json()
    assert b["url"] == "https://contoso.openai.azure.com/openai/deployments/gpt4o-prod"
    assert (b["protocol"], b["preset"], b["auth_header_name"]) == ("openai", "azure_openai",
                                                                   "api-key")
    assert b["query"] == "api-version=" + presets.AZURE_API_VERSION
    assert b["paths"]["/v1/embeddings"] == "/embeddings"
    assert b["auth_header_set"] is True and "api_key" not in b and "auth_header" not in b
    # the same on a base URL of the operator's (one the test can resolve)
    r = api("post", "/backends", json={
        "name": "azure-2", "model_id": model["id"], "preset": "azure_openai",
        "api_key": "az-secret", "base_url": "http://localhost:9443",
        "deployment": "gpt4o-prod", "api_version": "2025-01-01-preview"})
    assert r.status_code == 201, r.get_json()
    b = r.get_json()
    assert b["url"] == "http://localhost:9443/openai/deployments/gpt4o-prod"
    assert b["query"] == "api-version=2025-01-01-preview"
    entry = _backend_in_snapshot(api, b["id"])
    assert entry["base_path"] == "/openai/deployments/gpt4o-prod"
    assert entry["auth_header"] == "<set>"     # the admin API's copy is redacted
    assert entry["auth_header_name"] == "api-key" and entry["query"] == b["query"]


def test_explicit_fields_win_over_the_preset(api, make):
    model = make("model")
    r = api("post", "/backends", json={
        "name": "ds-1", "model_id": model["id"], "preset": "deepseek", "api_key": "k",
        "url": "http://10.0.0.7:8000", "query": "tenant=a", "headers": {"X-Team": "ml"}})
    assert r.status_code == 201, r.get_json()
    b = r.get_json()
    assert b["url"] == "http://10.0.0.7:8000" and b["query"] == "tenant=a"
    assert b["headers"] == {"X-Team": "ml"} and b["protocol"] == "openai"
    # a later PATCH with a preset value changes what the preset makes of it
    r = api("patch", f"/backends/{b['id']}", json={"preset": "gemini", "api_key": "g",
                                                   "upstream_model": "gemini-2.0-flash"})
    assert r.status_code == 200, r.get_json()
    b = r.get_json()
    assert b["protocol"] == "gemini" and b["auth_header_name"] == "x-goog-api-key"
    assert b["url"] == ("https://generativelanguage.googleapis.com/v1beta/models/"
                        "gemini-2.0-flash")


def test_self_hosted_preset_needs_only_its_url(api, make):
    model = make("model")
    r = api("post", "/backends", json={"name": "vllm-1", "model_id": model["id"],
                                       "preset": "vllm", "base_url": "http://gpu-3:8000"})
    assert r.status_code == 201, r.get_json()
    b = r.get_json()
    assert (b["url"], b["protocol"], b["auth_header_set"]) == ("http://gpu-3:8000", "openai",
                                                               False)
    # moved to a preset that takes no key, a backend keeps none of the last vendor's
    r = api("post", "/backends", json={"name": "ds-2", "model_id": model["id"],
                                       "preset": "deepseek", "api_key": "sk-ds"})
    assert r.get_json()["auth_header_set"] is True
    r = api("patch", f"/backends/{r.get_json()['id']}",
            json={"preset": "sglang", "base_url": "http://gpu-4:30000"})
    assert r.status_code == 200 and r.get_json()["auth_header_set"] is False


@pytest.mark.parametrize("body,field", [
    ({"preset": "azure_openai", "api_key": "k", "resource": "r"}, "deployment"),
    ({"preset": "gemini", "upstream_model": "gemini-2.0-flash"}, "api_key"),
    ({"preset": "sglang"}, "base_url"),
    ({"preset": "openai", "api_key": "k", "deployment": "../x"}, "deployment"),
    ({"preset": "nope"}, "preset"),
    ({"deployment": "d", "protocol": "openai", "url": "http://h:1"}, "deployment"),
    ({"url": "http://h:1"}, "protocol"),
    ({"preset": "openai", "api_key": "k", "headers": {"Authorization": "x"}}, "headers"),
    ({"preset": "openai", "api_key": "k", "auth_header_name": "Host"}, "auth_header_name"),
    ({"preset": "openai", "api_key": "k", "paths": {"/v1/x": "no-slash"}}, "paths"),
    ({"preset": "openai", "api_key": "k", "query": "a=b#c"}, "query"),
])
def test_refused_naming_the_field(api, make, body, field):
    model = make("model")
    r = api("post", "/backends", json={"name": "b", "model_id": model["id"], **body})
    assert r.status_code == 422, r.get_json()
    assert field in r.get_json()["error"]["fields"]


def test_anthropic_preset_makes_an_anthropic_backend(api, make):
    """The `anthropic` backend protocol is part of this build: the preset is taken."""
    model = make("model")
    r = api("post", "/backends", json={"name": "claude", "model_id": model["id"],
                                       "preset": "anthropic", "api_key": "sk-ant"})
    assert r.status_code == 201, r.get_json()
    b = r.get_json()
    assert (b["protocol"], b["url"]) == ("anthropic", "https://api.anthropic.com")
    assert b["auth_header_name"] == "x-api-key"
    assert b["headers"] == {"anthropic-version": presets.ANTHROPIC_VERSION}


def test_without_a_preset_url_and_protocol_are_required(offline_api):
    """Refused before any database access, both named at once."""
    r = offline_api("post", "/backends", json={"name": "b", "model_id": 1})
    assert r.status_code == 422
    assert set(r.get_json()["error"]["fields"]) == {"url", "protocol"}


def test_health_checks_leave_hosted_vendors_alone(api, make, db_url):
    """A hosted vendor has no model server's /health: its backends are not probed, a
    self-hosted preset's are (both here on a demo server that is still loading)."""
    server = serve("openai", "127.0.0.1", 0, "loading-openai", loading_s=600)
    try:
        model = make("model")
        names = {}
        for preset, values in (("deepseek", {"api_key": "k"}), ("vllm", {})):
            r = api("post", "/backends", json={"name": f"{preset}-h", "model_id": model["id"],
                                               "preset": preset, "base_url": server.url,
                                               **values})
            assert r.status_code == 201, r.get_json()
            names[preset] = r.get_json()["name"]
        engine = make_engine(db_url)
        sessions = make_sessionmaker(engine)
        try:
            with sessions() as session:
                snap = snapshot.build(session)
            HealthLoop(GatewayClient(None)).run(Settings(health_timeout=2.0), sessions, [],
                                                snap)
        finally:
            engine.dispose()
        got = {b["backend"]: b["state"] for b in api("get", "/health").get_json()["backends"]}
        assert got == {names["vllm"]: "loading", names["deepseek"]: "unknown"}
    finally:
        server.shutdown()
