"""GPU-class affinity, end to end: agent reports put one backend on an A100 and one
on a T4; a model that requires A100 sends every request to the A100 one through the
real gateway, while a model without a requirement uses both."""
from __future__ import annotations

from collections import Counter

N = 60


def _report(stack, gpus):
    stack.admin._call("POST", "/telemetry", json={
        "host": "gpu-host-1", "source": "simulated",
        "gpus": [{"index": i, "name": name, "memory_total_mb": 16000,
                  "memory_used_mb": 4000, "backends": backends}
                 for i, (name, backends) in enumerate(gpus)]})


def _seen(stack, key, model) -> Counter:
    seen = Counter()
    for _ in range(N):
        r = stack.chat(key, model)
        seen[r.headers.get("X-Demo-Backend") or r.status_code] += 1
    return seen


def test_a_model_that_requires_a100_is_served_only_by_the_a100_backend(stack):
    admin = stack.admin
    url_a100, url_t4 = stack.start_backend("on-a100"), stack.start_backend("on-t4")
    cv = admin.create("models", name="cv", timeout_ms=5000, gpu_class="A100")
    plain = admin.create("models", name="plain", timeout_ms=5000)
    # Two backend rows per server: one for each model.
    for name, model, url in [("cv-a", cv, url_a100), ("cv-t", cv, url_t4),
                             ("plain-a", plain, url_a100), ("plain-t", plain, url_t4)]:
        admin.create("backends", name=name, model_id=model["id"], url=url,
                     protocol="openai")
    consumer = admin.create("consumers", name="t")
    key = admin.create("keys", consumer_id=consumer["id"])["key"]
    stack.wait_served()

    # Before any report no backend is known to be on an A100: the caller gets the
    # error template, not a guess.
    r = stack.chat(key, "cv")
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "backend_unavailable"

    _report(stack, [("NVIDIA A100-SXM4-80GB", ["cv-a", "plain-a"]),
                    ("Tesla T4", ["cv-t", "plain-t"])])
    stack.wait_served()   # the report bumped the config version

    assert _seen(stack, key, "cv") == Counter({"on-a100": N})
    plain_seen = _seen(stack, key, "plain")
    assert set(plain_seen) == {"on-a100", "on-t4"}, plain_seen
    assert min(plain_seen.values()) >= N // 4, plain_seen

    # The agent's mapping moves cv-t onto the A100 as well: both serve cv now.
    _report(stack, [("NVIDIA A100-SXM4-80GB", ["cv-a", "plain-a", "cv-t"]),
                    ("Tesla T4", ["plain-t"])])
    stack.wait_served()
    assert set(_seen(stack, key, "cv")) == {"on-a100", "on-t4"}
