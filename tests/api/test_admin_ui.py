"""The admin UI over Flask's test client: sign-in, CSRF, roles, forms and their errors.
(tests/integration/ui/ drives the same pages in a real Chromium.)"""
from __future__ import annotations

import dataclasses
import re
import time

import pytest
from sqlalchemy import text

from control_plane.admin.formats import ms, rate
from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import admin_users, telemetry
from tlsutil import CA

PASSWORD = "correct horse battery"


@pytest.fixture
def users(db_url):
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        admin_users.create_user(session, "alice", PASSWORD, "admin")
        admin_users.create_user(session, "victor", PASSWORD, "viewer")
    engine.dispose()


def _csrf(resp) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', resp.get_data(as_text=True))
    assert match, resp.get_data(as_text=True)[:500]
    return match.group(1)


def _login(client, username, password=PASSWORD):
    token = _csrf(client.get("/admin/login"))
    return client.post("/admin/login", data={"username": username, "password": password,
                                             "csrf_token": token})


@pytest.fixture
def ui(client, users):
    """Signed in as an admin; returns a function to post a form with the CSRF token."""
    assert _login(client, "alice").status_code == 302
    token = _csrf(client.get("/admin/"))

    def post(path, data=None, **kw):
        return client.post(path, data={"csrf_token": token, **(data or {})}, **kw)
    post.client = client
    return post


def test_pages_need_a_session(client):
    resp = client.get("/admin/models/")
    assert resp.status_code == 302
    assert resp.headers["Location"].startswith("/admin/login?next=/admin/models/")
    assert client.get("/admin/status.json").status_code == 401


def test_wrong_password_is_refused_without_saying_which_part(client, users):
    for name, password in (("alice", "wrong password!"), ("nobody", PASSWORD)):
        resp = _login(client, name, password)
        assert resp.status_code == 401
        assert "Wrong username or password." in resp.get_data(as_text=True)
    assert client.get("/admin/").status_code == 302


def test_passwords_are_stored_hashed(db_url, users):
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        user = admin_users.find(session, "alice")
        assert PASSWORD not in user.password_hash
        assert user.password_hash.startswith("scrypt:")
    engine.dispose()


def test_sign_in_sets_a_hardened_cookie_and_lands_on_next(client, users):
    token = _csrf(client.get("/admin/login"))
    resp = client.post("/admin/login", data={"username": "alice", "password": PASSWORD,
                                             "csrf_token": token, "next": "/admin/keys/"})
    assert resp.status_code == 302 and resp.headers["Location"] == "/admin/keys/"
    cookie = resp.headers["Set-Cookie"]
    assert "sluice_admin=" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert client.get("/admin/keys/").status_code == 200


def test_next_never_leaves_the_admin_ui(client, users):
    token = _csrf(client.get("/admin/login"))
    resp = client.post("/admin/login", data={"username": "alice", "password": PASSWORD,
                                             "csrf_token": token,
                                             "next": "//evil.example/admin"})
    assert resp.headers["Location"] == "/admin/"


def test_post_without_the_csrf_token_is_refused(ui):
    client = ui.client
    resp = client.post("/admin/models/new", data={"name": "m1"})
    assert resp.status_code == 400
    assert "expired" in resp.get_data(as_text=True)
    resp = client.post("/admin/models/new", data={"name": "m1", "csrf_token": "forged"})
    assert resp.status_code == 400
    assert "m1" not in client.get("/admin/models/").get_data(as_text=True)


def test_login_form_needs_the_csrf_token_too(client, users):
    resp = client.post("/admin/login", data={"username": "alice", "password": PASSWORD})
    assert resp.status_code == 400


def test_create_model_through_the_form_reaches_the_api(ui, api):
    resp = ui("/admin/models/new", {"name": "chat-x", "timeout_ms": "1500", "enabled": "on"})
    assert resp.status_code == 302
    models = api("get", "/models").get_json()["items"]
    assert [(m["name"], m["timeout_ms"], m["enabled"]) for m in models] == [
        ("chat-x", 1500, True)]
    assert "Created model chat-x." in ui.client.get("/admin/models/").get_data(as_text=True)


def test_form_shows_each_field_error_and_keeps_what_was_typed(ui, api):
    resp = ui("/admin/backends/new", {"name": "bad name!", "url": "ftp://x",
                                      "weight": "lots", "protocol": "openai"})
    assert resp.status_code == 422
    html = resp.get_data(as_text=True)
    assert "Name must be 1-128 characters" in html
    assert "URL must be a URL of the form http[s]://host:port[/base]" in html
    assert "Weight must be a whole number" in html
    assert "Model is required" in html
    assert html.count('class="field-error"') == 4  # protocol "openai" was fine
    assert 'value="bad name!"' in html
    assert api("get", "/backends").get_json()["items"] == []


def test_duplicate_name_is_a_form_message_not_a_crash(ui, make):
    make("model", name="dup")
    resp = ui("/admin/models/new", {"name": "dup"})
    assert resp.status_code == 409
    assert "a model with name &#39;dup&#39; already exists" in resp.get_data(as_text=True)


def test_consumer_json_attributes_are_checked(ui):
    resp = ui("/admin/consumers/new", {"name": "c1", "attributes": "{not json"})
    assert resp.status_code == 422
    assert "Attributes (JSON) must be valid JSON" in resp.get_data(as_text=True)


def test_new_key_is_shown_once_then_only_its_prefix(ui, make, api):
    consumer = make("consumer")
    resp = ui("/admin/keys/new", {"consumer_id": str(consumer["id"]), "name": "ci",
                                  "enabled": "on"})
    assert resp.status_code == 201
    assert resp.headers["Cache-Control"] == "no-store"
    key = re.search(r'id="new-key" class="mono" value="(sk-[^"]+)"',
                    resp.get_data(as_text=True)).group(1)
    listing = ui.client.get("/admin/keys/").get_data(as_text=True)
    assert key not in listing and key[:10] + "…" in listing
    [row] = api("get", "/keys").get_json()["items"]
    assert row["prefix"] == key[:10]


def test_drain_and_restore_a_backend(ui, make, api):
    backend = make("backend", weight=250)
    assert ui(f"/admin/backends/{backend['id']}/drain").status_code == 302
    assert api("get", f"/backends/{backend['id']}").get_json()["weight"] == 0
    assert ui(f"/admin/backends/{backend['id']}/restore").status_code == 302
    assert api("get", f"/backends/{backend['id']}").get_json()["weight"] == 250


def test_deleting_a_model_with_backends_explains_why_not(ui, make):
    backend = make("backend")
    resp = ui(f"/admin/models/{backend['model_id']}/delete", follow_redirects=True)
    assert "still has 1 backend(s)" in resp.get_data(as_text=True)


def test_viewer_reads_but_every_write_is_forbidden(client, users, make, api):
    model = make("model", name="keep-me")
    backend = make("backend", model_id=model["id"])
    assert _login(client, "victor").status_code == 302
    page = client.get("/admin/models/")
    assert page.status_code == 200 and "keep-me" in page.get_data(as_text=True)
    assert "New model" not in page.get_data(as_text=True)
    token = _csrf(client.get("/admin/"))
    for path in ("/admin/models/new", f"/admin/models/{model['id']}",
                 f"/admin/models/{model['id']}/delete",
                 f"/admin/backends/{backend['id']}/drain"):
        resp = client.post(path, data={"csrf_token": token, "name": "changed"})
        assert resp.status_code == 403, path
    assert [m["name"] for m in api("get", "/models").get_json()["items"]] == ["keep-me"]
    assert api("get", f"/backends/{backend['id']}").get_json()["weight"] == 100


def test_status_json_reports_versions(ui, make, api):
    make("gateway", name="gw-a")
    status = ui.client.get("/admin/status.json").get_json()
    assert status["version"] == api("get", "/config").get_json()["version"]
    assert status["gateways"][0]["name"] == "gw-a"
    assert status["gateways"][0]["state"] == "never acknowledged"


def test_status_json_shows_each_backends_gpu_telemetry(ui, make, db_url):
    backend = make("backend", name="vision-a100")
    make("backend", name="no-gpu-known")
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        telemetry.ingest(session, "gpu-host-1", "simulated", [telemetry.GpuReading(
            index=0, name="NVIDIA A100-SXM4-80GB", gpu_class="A100",
            memory_total_mb=81920, memory_used_mb=61440, utilization_pct=87.0,
            backends=(backend["name"],))])
        session.commit()
    engine.dispose()

    rows = {b["name"]: b for b in ui.client.get("/admin/status.json").get_json()["backends"]}
    (gpu,) = rows["vision-a100"]["gpus"]
    assert (gpu["gpu_class"], gpu["memory_free_mb"], gpu["utilization_pct"]) == (
        "A100", 20480, 87.0)
    assert gpu["stale"] is False
    assert rows["no-gpu-known"]["gpus"] == []
    page = ui.client.get("/admin/").get_data(as_text=True)
    assert "A100 #0" in page


def test_sign_out_ends_the_session(ui):
    assert ui("/admin/logout").status_code == 302
    assert ui.client.get("/admin/").status_code == 302


def test_a_new_password_ends_older_sessions(ui, db_url):
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        admin_users.set_password(session, "alice", "another long password")
    engine.dispose()
    assert ui.client.get("/admin/").status_code == 302


def test_unknown_page_is_an_html_404(ui):
    resp = ui.client.get("/admin/nothing/")
    assert resp.status_code == 404 and "text/html" in resp.content_type
    assert ui.client.get("/admin/models/999999").status_code == 404


def test_security_headers(ui):
    resp = ui.client.get("/admin/")
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
    assert resp.headers["X-Frame-Options"] == "DENY"


def test_ui_changes_are_audited_as_the_signed_in_user(ui, api):
    assert ui("/admin/models/new", {"name": "chat-audited", "timeout_ms": "1500",
                                    "enabled": "on"}).status_code == 302
    [entry] = api("get", "/audit?resource=model").get_json()["items"]
    assert entry["actor"] == "ui:alice" and entry["action"] == "create"
    assert entry["after"]["name"] == "chat-audited"


def test_plan_form_takes_decimals_and_blank_means_unlimited(ui, api):
    resp = ui("/admin/plans/new", {"name": "gold", "rate_per_second": "0.5",
                                   "rate_per_ip": "0.25",
                                   "daily_requests": "1000", "max_concurrent": "",
                                   "model_overrides": '{"chat": {"burst": 3}}'})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    [plan] = api("get", "/plans").get_json()["items"]
    assert (plan["rate_per_second"], plan["daily_requests"], plan["max_concurrent"]) == (
        0.5, 1000, None)
    assert plan["rate_per_ip"] == 0.25
    assert plan["model_overrides"] == {"chat": {"burst": 3}}
    # Emptying a limit on edit makes it unlimited again.
    resp = ui(f"/admin/plans/{plan['id']}", {"name": "gold", "rate_per_second": "2",
                                             "daily_requests": "", "model_overrides": "{}"})
    assert resp.status_code == 302
    plan = api("get", f"/plans/{plan['id']}").get_json()
    assert (plan["rate_per_second"], plan["daily_requests"]) == (2, None)
    assert plan["rate_per_ip"] is None
    bad = ui("/admin/plans/new", {"name": "x", "rate_per_second": "fast"})
    assert "Requests per second must be a number such as 2 or 0.5" in bad.get_data(as_text=True)


def test_consumer_gets_a_plan_from_a_list_and_can_lose_it(ui, api):
    plan = api("post", "/plans", json={"name": "silver"}).get_json()
    resp = ui("/admin/consumers/new", {"name": "c-plan", "plan_id": str(plan["id"]),
                                       "enabled": "on"})
    assert resp.status_code == 302
    [consumer] = api("get", "/consumers").get_json()["items"]
    assert consumer["plan_id"] == plan["id"]
    assert "silver" in ui.client.get("/admin/consumers/").get_data(as_text=True)
    ui(f"/admin/consumers/{consumer['id']}", {"name": "c-plan", "plan_id": "",
                                              "enabled": "on"})
    assert api("get", f"/consumers/{consumer['id']}").get_json()["plan_id"] is None


def test_backend_credential_is_write_only(ui, make, api, db_url):
    backend = make("backend")
    path = f"/admin/backends/{backend['id']}"
    fields = {"name": backend["name"], "model_id": str(backend["model_id"]),
              "url": backend["url"], "protocol": "openai", "weight": "100", "enabled": "on"}
    assert ui(path, {**fields, "auth_header": "Bearer upstream-secret"}).status_code == 302
    assert api("get", path.replace("/admin", "")).get_json()["auth_header_set"] is True
    form = ui.client.get(path).get_data(as_text=True)
    assert "upstream-secret" not in form and "Remove the stored value" in form
    assert "upstream-secret" not in ui.client.get("/admin/backends/").get_data(as_text=True)
    # An empty field keeps it; the checkbox removes it.
    assert ui(path, fields).status_code == 302
    assert api("get", path.replace("/admin", "")).get_json()["auth_header_set"] is True
    assert ui(path, {**fields, "auth_header__clear": "on"}).status_code == 302
    assert api("get", path.replace("/admin", "")).get_json()["auth_header_set"] is False


def test_vendor_backend_with_a_mapping_made_in_the_ui(ui, make, api):
    resp = ui("/admin/mappings/new", {"name": "vendor-x", "path": "/generate",
                                      "request": '{"prompt": "{{input}}"}',
                                      "response": '{"output": "/text"}'})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    [mapping] = api("get", "/mappings").get_json()["items"]
    bad = ui("/admin/mappings/new", {"name": "m2", "path": "generate", "request": "{}",
                                     "response": "{}"})
    html = bad.get_data(as_text=True)
    assert "Path must be a path starting with /" in html
    assert "Response pointers (JSON) must be an object" in html
    model = make("model")
    resp = ui("/admin/backends/new", {"name": "vx", "model_id": str(model["id"]),
                                      "url": "http://127.0.0.1:9999", "protocol": "vendor",
                                      "mapping_id": str(mapping["id"]), "enabled": "on"})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    [backend] = api("get", "/backends").get_json()["items"]
    assert (backend["protocol"], backend["mapping_id"]) == ("vendor", mapping["id"])


def test_jwt_issuer_from_a_pem_keeps_its_keys_when_edited(ui, api):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    resp = ui("/admin/jwt-issuers/new", {"name": "idp", "pem": pem, "issuer": "https://idp",
                                         "consumer_claim": "sub", "enabled": "on"})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    [issuer] = api("get", "/jwt-issuers").get_json()["items"]
    assert [k["alg"] for k in issuer["keys"]] == ["ES256"] and issuer["audience"] is None
    assert "ES256" in ui.client.get("/admin/jwt-issuers/").get_data(as_text=True)
    resp = ui(f"/admin/jwt-issuers/{issuer['id']}", {"name": "idp", "issuer": "",
                                                     "consumer_claim": "email"})
    assert resp.status_code == 302
    again = api("get", f"/jwt-issuers/{issuer['id']}").get_json()
    assert again["keys"] == issuer["keys"]
    assert (again["issuer"], again["consumer_claim"], again["enabled"]) == (None, "email",
                                                                             False)
    bad = ui("/admin/jwt-issuers/new", {"name": "nokey", "consumer_claim": "sub"})
    assert "pem, jwks or jwks_uri is required" in bad.get_data(as_text=True)
    bad = ui("/admin/jwt-issuers/new", {"name": "plain", "consumer_claim": "sub",
                                        "jwks_uri": "http://idp.example/jwks.json"})
    assert "must be an https:// URL" in bad.get_data(as_text=True)
    resp = ui("/admin/jwt-issuers/new", {"name": "by-url", "consumer_claim": "sub",
                                         "jwks_uri": "https://idp.example/jwks.json"})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    assert "https://idp.example/jwks.json" in \
        ui.client.get("/admin/jwt-issuers/").get_data(as_text=True)
    bad = ui("/admin/jwt-issuers/new", {"name": "junk", "pem": "not a key",
                                        "consumer_claim": "sub"})
    assert "must be a PEM public key" in bad.get_data(as_text=True)


def test_route_made_and_edited_in_the_ui(ui, make, api):
    make("model", name="chat-demo")
    make("model", name="chat-canary")
    versions = ('[{"model": "chat-canary", "conditions": {"user_type": "vip"}},'
                ' {"model": "chat-demo", "percent": 95}, {"model": "chat-canary", "percent": 5}]')
    resp = ui("/admin/routes/new", {"name": "chat-demo", "versions": versions,
                                    "sticky": "on", "enabled": "on"})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    [route] = api("get", "/routes").get_json()["items"]
    assert [(v["model"], v["percent"]) for v in route["versions"]] == [
        ("chat-canary", 100), ("chat-demo", 95), ("chat-canary", 5)]
    html = ui.client.get("/admin/routes/").get_data(as_text=True)
    assert 'chat-canary 100 % if user_type eq &#34;vip&#34;; chat-demo 95 %' in html

    edit = ui.client.get(f"/admin/routes/{route['id']}").get_data(as_text=True)
    assert "&#34;percent&#34;: 95" in edit
    resp = ui(f"/admin/routes/{route['id']}", {
        "name": "chat-demo", "enabled": "on",
        "versions": '[{"model": "chat-demo", "percent": 90}, {"model": "nope", "percent": 10}]'})
    assert resp.status_code == 422
    assert "Versions (JSON) [1].model &#39;nope&#39; is not a model" in resp.get_data(as_text=True)
    resp = ui(f"/admin/routes/{route['id']}", {
        "name": "chat-demo", "enabled": "on",
        "versions": '[{"model": "chat-demo", "percent": 90},'
                    ' {"model": "chat-canary", "percent": 10}]'})
    assert resp.status_code == 302
    route = api("get", f"/routes/{route['id']}").get_json()
    assert route["sticky"] is False and [v["percent"] for v in route["versions"]] == [90, 10]


def test_backend_form_sets_gpu_class_and_metrics_endpoint(ui, make, api):
    model = make("model")
    fields = {"name": "vllm-x", "model_id": str(model["id"]), "url": "http://127.0.0.1:9",
              "protocol": "openai", "weight": "100", "enabled": "on", "gpu_class": "A100",
              "metrics_url": "http://127.0.0.1:9/metrics"}
    resp = ui("/admin/backends/new", fields)          # a URL without its format
    assert resp.status_code == 422
    assert "is required when metrics_url is set" in resp.get_data(as_text=True)
    assert ui("/admin/backends/new", {**fields, "metrics_format": "vllm"}).status_code == 302
    b = api("get", "/backends").get_json()["items"][0]
    assert (b["gpu_class"], b["metrics_url"], b["metrics_format"]) == (
        "A100", "http://127.0.0.1:9/metrics", "vllm")
    # emptied fields clear them again
    path = f"/admin/backends/{b['id']}"
    assert ui(path, {**fields, "gpu_class": "", "metrics_url": "",
                     "metrics_format": ""}).status_code == 302
    b = api("get", f"/backends/{b['id']}").get_json()
    assert (b["gpu_class"], b["metrics_url"], b["metrics_format"]) == (None, None, None)


def test_plan_priority_and_backend_capacity_from_forms(ui, api):
    resp = ui("/admin/plans/new", {"name": "batch", "rate_per_second": "1",
                                   "model_overrides": "{}", "priority": "best_effort",
                                   "priority_header": "on", "buffer_at_peak": "on"})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    [plan] = api("get", "/plans").get_json()["items"]
    assert (plan["priority"], plan["priority_header"]) == ("best_effort", True)
    assert plan["buffer_at_peak"] is True
    assert 'value="best_effort" selected' in ui.client.get(
        f"/admin/plans/{plan['id']}").get_data(as_text=True)
    model = api("post", "/models", json={"name": "m"}).get_json()
    resp = ui("/admin/backends/new", {"name": "b", "model_id": str(model["id"]),
                                      "url": "http://127.0.0.1:9", "protocol": "openai",
                                      "weight": "100", "max_in_flight": "8"})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    [backend] = api("get", "/backends").get_json()["items"]
    assert backend["max_in_flight"] == 8


def _throttled(app, attempts: int, lockout_s: float) -> None:
    settings = app.config["SLUICE_SETTINGS"]
    app.config["SLUICE_SETTINGS"] = dataclasses.replace(
        settings, admin_login_attempts=attempts, admin_lockout_s=lockout_s)


def test_wrong_passwords_in_a_row_lock_the_account(app, client, users):
    _throttled(app, attempts=3, lockout_s=60)
    for _ in range(2):
        assert _login(client, "alice", "wrong password!").status_code == 401
    resp = _login(client, "alice", "wrong password!")      # the third locks it
    assert resp.status_code == 429
    assert 55 <= int(resp.headers["Retry-After"]) <= 60
    assert "Too many wrong passwords" in resp.get_data(as_text=True)
    # while locked, even the right password is refused, and nobody is signed in
    resp = _login(client, "alice")
    assert resp.status_code == 429 and int(resp.headers["Retry-After"]) >= 1
    assert client.get("/admin/").status_code == 302
    # other accounts are not affected
    assert _login(client, "victor").status_code == 302


def test_the_lock_ends_and_a_sign_in_resets_the_count(app, client, users):
    _throttled(app, attempts=2, lockout_s=1)
    _login(client, "alice", "wrong password!")
    assert _login(client, "alice", "wrong password!").status_code == 429
    time.sleep(1.2)   # the lock is 1 s long
    assert _login(client, "alice").status_code == 302
    client.post("/admin/logout", data={"csrf_token": _csrf(client.get("/admin/"))})
    # the count started again after the sign-in: one wrong password does not lock
    assert _login(client, "alice", "wrong password!").status_code == 401
    assert _login(client, "alice").status_code == 302


def test_unknown_names_lock_nothing(app, client, users):
    _throttled(app, attempts=2, lockout_s=60)
    for _ in range(4):
        assert _login(client, "nobody", "wrong password!").status_code == 401


def test_a_new_password_ends_the_lock(app, client, users, db_url):
    _throttled(app, attempts=1, lockout_s=600)
    assert _login(client, "alice", "wrong password!").status_code == 429
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        admin_users.set_password(session, "alice", "another long password")
    engine.dispose()
    assert _login(client, "alice", "another long password").status_code == 302


def test_backend_tls_settings_in_the_form_with_write_only_client_key(ui, make, api,
                                                                    tmp_path):
    ca = CA(tmp_path / "ca")
    pair = ca.issue("gw", client=True)
    backend = make("backend", url="https://llm.example.com")
    path = f"/admin/backends/{backend['id']}"
    fields = {"name": backend["name"], "model_id": str(backend["model_id"]),
              "url": backend["url"], "protocol": "openai", "weight": "100", "enabled": "on",
              "tls_verify": "on", "tls_ca": ca.pem, "tls_server_name": "llm.internal"}
    resp = ui(path, {**fields, "tls_client_cert": pair.cert_pem,
                     "tls_client_key": pair.key_pem})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    shown = api("get", path.replace("/admin", "")).get_json()
    assert shown["tls_client_cert_set"] and shown["tls_client_key_set"]
    assert shown["tls_server_name"] == "llm.internal" and shown["tls_ca"].startswith("-----")
    form = ui.client.get(path).get_data(as_text=True)
    assert "PRIVATE KEY" not in form and "Remove the stored value" in form
    assert 'name="tls_client_key"' in form
    listing = ui.client.get("/admin/backends/").get_data(as_text=True)
    assert "verified, own CA, client cert" in listing and "PRIVATE" not in listing
    # empty secret fields keep the pair; the checkboxes remove it
    assert ui(path, fields).status_code == 302
    assert api("get", path.replace("/admin", "")).get_json()["tls_client_key_set"] is True
    resp = ui(path, {**fields, "tls_client_cert__clear": "on", "tls_client_key__clear": "on"})
    assert resp.status_code == 302
    assert api("get", path.replace("/admin", "")).get_json()["tls_client_key_set"] is False
    # a broken PEM is named next to its field
    resp = ui(path, {**fields, "tls_ca": "garbage"})
    assert resp.status_code == 422
    assert "TLS CA (PEM) is not PEM" in resp.get_data(as_text=True)


def _cells(html: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is `first`, as text."""
    row = re.search(r"<tr><td>" + re.escape(first) + r"</td>(.*?)</tr>", html, re.S)
    assert row, html
    return [first] + [re.sub(r"<[^>]+>", "", c).strip()
                      for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]


def test_requests_page_prints_rates_and_latencies_one_way(ui, db_url):
    """Last hour per model: req/s to two significant digits (not 0.0111), latency
    percentiles in whole ms like each request's (not 20.5, 38.05 and 39.61 ms)."""
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO inference_logs (ts, gateway, request_id, model_name, status, latency) "
            "SELECT now() - make_interval(secs => i), 'gw', 'fmt-' || i, 'chat-fmt', 200, i "
            "FROM generate_series(1, 40) AS i"))
    engine.dispose()
    html = ui.client.get("/admin/logs/").get_data(as_text=True)
    # model, requests, req/s, 5xx, 4xx, p50, p95, p99: 40 in the hour, latencies 1..40
    assert _cells(html, "chat-fmt") == ["chat-fmt", "40", "0.011", "0.00 %", "0.00 %",
                                        "21 ms", "38 ms", "40 ms"]
    search = html.split("<h2>Search</h2>", 1)[1]   # each request, as its row stores it
    assert re.search(r"<td>\d+ ms</td>", search) and not re.search(r"\d\.\d+ ms", search)


def test_rate_and_latency_formats():
    assert [rate(v) for v in (None, 0, 0.00028, 0.0111, 0.25, 2.5, 9.94, 9.96, 12.345,
                              1234.56)] == \
        ["—", "0", "0.00028", "0.011", "0.25", "2.5", "9.9", "10.0", "12.3", "1234.6"]
    assert [ms(v) for v in (None, 0, 0.5, 4.25, 20.5, 1234.4)] == \
        ["—", "0 ms", "1 ms", "4 ms", "21 ms", "1234 ms"]


def test_backend_form_by_ip_asks_for_a_dns_server_name(ui, make, api):
    model = make("model")
    fields = {"name": "ip-tls", "model_id": str(model["id"]), "url": "https://127.0.0.1:9",
              "protocol": "openai", "weight": "100", "enabled": "on", "tls_verify": "on"}
    resp = ui("/admin/backends/new", fields)
    assert resp.status_code == 422
    html = resp.get_data(as_text=True)
    assert "is addressed by IP (127.0.0.1)" in html and "set tls_server_name" in html
    resp = ui("/admin/backends/new", {**fields, "tls_server_name": "llm.internal"})
    assert resp.status_code == 302
    assert api("get", "/backends").get_json()["items"][0]["tls_server_name"] == "llm.internal"
