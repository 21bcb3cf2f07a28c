"""GPU-class affinity in the admin API and the snapshot: which backends a model that
requires a GPU class keeps, and when agent reports bump the config version."""
from __future__ import annotations

import pytest

from control_plane.app import create_app, dispose
from control_plane.settings import Settings

AGENT_TOKEN = "test-agent-token-affinity"
ADMIN = {"Authorization": "Bearer test-admin-token"}


@pytest.fixture
def agent_app(db_url):
    app = create_app({"DATABASE_URL": db_url, "ADMIN_TOKEN": "test-admin-token",
                      "TESTING": True, "SLUICE_SETTINGS": Settings(agent_token=AGENT_TOKEN)})
    yield app
    dispose(app)


def _report(client, gpus, host="gpu-1"):
    body = {"host": host, "source": "simulated",
            "gpus": [{"index": i, "name": name, "memory_total_mb": 1000, "memory_used_mb": 0,
                      "backends": backends} for i, (name, backends) in enumerate(gpus)]}
    r = client.post("/api/v1/telemetry", json=body,
                    headers={"Authorization": f"Bearer {AGENT_TOKEN}"})
    assert r.status_code == 200, r.get_json()


def _served(client, model):
    snap = client.get("/api/v1/snapshot", headers=ADMIN).get_json()
    return sorted(b["name"] for b in snap["models"][model]["backends"])


def _version(client):
    return client.get("/api/v1/config", headers=ADMIN).get_json()["version"]


def test_only_backends_on_the_required_class_are_served(agent_app, make, api):
    client = agent_app.test_client()
    cv = make("model", name="cv", gpu_class="A100")
    assert cv["gpu_class"] == "A100"
    plain = make("model", name="plain")
    for name, model in [("cv-a", cv), ("cv-t", cv), ("cv-x", cv), ("plain-a", plain),
                        ("plain-t", plain)]:
        make("backend", name=name, model_id=model["id"])
    # Nothing reported yet: an unknown class is not eligible for a class-bound model.
    assert _served(client, "cv") == []
    assert _served(client, "plain") == ["plain-a", "plain-t"]

    before = _version(client)
    _report(client, [("NVIDIA A100-SXM4-80GB", ["cv-a", "plain-a"]),
                     ("Tesla T4", ["cv-t", "plain-t"])])
    assert _version(client) == before + 1        # the snapshot changed: pushed again
    assert _served(client, "cv") == ["cv-a"]
    assert _served(client, "plain") == ["plain-a", "plain-t"]
    snap = client.get("/api/v1/snapshot", headers=ADMIN).get_json()
    assert snap["models"]["cv"]["gpu_class"] == "A100"
    assert "gpu_class" not in snap["models"]["plain"]

    # The same report again changes nothing, so the version stays.
    _report(client, [("NVIDIA A100-SXM4-80GB", ["cv-a", "plain-a"]),
                     ("Tesla T4", ["cv-t", "plain-t"])])
    assert _version(client) == before + 1

    # A backend spread over an A100 and a T4 runs at the T4's pace: not eligible.
    _report(client, [("NVIDIA A100-SXM4-40GB", ["cv-x"])], host="gpu-2")
    _report(client, [("Tesla T4", ["cv-x"])], host="gpu-3")
    assert _served(client, "cv") == ["cv-a"]

    # A declared class wins over reports (and compares case-insensitively).
    cv_t = next(b for b in api("get", "/backends").get_json()["items"] if b["name"] == "cv-t")
    r = api("patch", f"/backends/{cv_t['id']}", json={"gpu_class": "a100"})
    assert r.status_code == 200 and r.get_json()["gpu_class"] == "a100"
    assert _served(client, "cv") == ["cv-a", "cv-t"]

    # Lifting the requirement serves every backend again.
    assert api("patch", f"/models/{cv['id']}", json={"gpu_class": None}).status_code == 200
    assert _served(client, "cv") == ["cv-a", "cv-t", "cv-x"]


def test_reports_for_unbound_models_do_not_bump_the_version(agent_app, make):
    client = agent_app.test_client()
    make("backend", name="free-a")
    before = _version(client)
    _report(client, [("Tesla T4", ["free-a"])])
    assert _version(client) == before


@pytest.mark.parametrize("kind, body, field", [
    ("models", {"name": "m", "gpu_class": "A 100"}, "gpu_class"),
    ("models", {"name": "m", "gpu_class": ""}, "gpu_class"),
    ("models", {"name": "m", "gpu_class": 100}, "gpu_class"),
])
def test_gpu_class_is_validated(api, kind, body, field):
    r = api("post", f"/{kind}", json=body)
    assert r.status_code == 422
    assert field in r.get_json()["error"]["fields"]


def test_backend_gpu_class_is_validated(api, make):
    model = make("model")
    r = api("post", "/backends", json={"name": "b", "model_id": model["id"],
                                       "url": "http://127.0.0.1:9", "protocol": "openai",
                                       "gpu_class": "x" * 65})
    assert r.status_code == 422 and "gpu_class" in r.get_json()["error"]["fields"]
