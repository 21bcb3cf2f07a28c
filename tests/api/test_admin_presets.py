"""The admin UI's backend form offers the presets (control_plane/services/presets.py):
a backend made from one through the form is the one the API makes."""
from __future__ import annotations

import re

import pytest

from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import admin_users, presets

PASSWORD = "correct horse battery"


@pytest.fixture
def ui(client, db_url):
    """Signed in as an admin; posts a form with the CSRF token."""
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        admin_users.create_user(session, "alice", PASSWORD, "admin")
    engine.dispose()

    def csrf(resp) -> str:
        return re.search(r'name="csrf_token" value="([^"]+)"',
                         resp.get_data(as_text=True)).group(1)

    r = client.post("/admin/login", data={"username": "alice", "password": PASSWORD,
                                          "csrf_token": csrf(client.get("/admin/login"))})
    assert r.status_code == 302
    token = csrf(client.get("/admin/"))

    def post(path, data):
        return client.post(path, data={"csrf_token": token, **data})
    post.client = client
    return post


def test_the_form_offers_every_preset(ui):
    html = ui.client.get("/admin/backends/new").get_data(as_text=True)
    for p in presets.PRESETS.values():
        assert f'<option value="{p.name}"' in html
    assert "Azure OpenAI (openai; api_key, resource, deployment)" in html
    assert "<script src=\"http" not in html   # no CDN


def test_a_backend_made_from_a_preset_in_the_form(ui, api, make):
    model = make("model")
    r = ui("/admin/backends/new", {"name": "gem", "model_id": str(model["id"]),
                                   "preset": "gemini", "api_key": "AIza-x",
                                   "upstream_model": "gemini-2.0-flash", "weight": "100",
                                   "enabled": "on", "tls_verify": "on"})
    assert r.status_code == 302, r.get_data(as_text=True)
    (b,) = api("get", "/backends").get_json()["items"]
    assert (b["name"], b["protocol"], b["preset"], b["auth_header_name"]) == (
        "gem", "gemini", "gemini", "x-goog-api-key")
    assert b["url"] == "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash"
    assert b["auth_header_set"] is True
    # the edit form shows what the preset filled, and saves without its values again
    html = ui.client.get(f"/admin/backends/{b['id']}").get_data(as_text=True)
    assert 'value="x-goog-api-key"' in html and 'name="api_key"' not in html
    r = ui(f"/admin/backends/{b['id']}", {"name": "gem", "model_id": str(model["id"]),
                                          "url": b["url"], "protocol": "gemini",
                                          "auth_header_name": "x-goog-api-key",
                                          "weight": "50", "enabled": "on",
                                          "tls_verify": "on"})
    assert r.status_code == 302, r.get_data(as_text=True)
    b = api("get", f"/backends/{b['id']}").get_json()
    assert b["weight"] == 50 and b["auth_header_set"] is True and b["preset"] == "gemini"


def test_a_preset_missing_a_value_is_a_field_error(ui, api, make):
    model = make("model")
    r = ui("/admin/backends/new", {"name": "az", "model_id": str(model["id"]),
                                   "preset": "azure_openai", "api_key": "k",
                                   "resource": "contoso", "weight": "100"})
    assert r.status_code == 422
    assert "is required by the preset" in r.get_data(as_text=True)
    assert api("get", "/backends").get_json()["items"] == []
