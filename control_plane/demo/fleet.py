"""The demo fleet `sluice up` starts and the demo data it loads through the admin API.

Small, but it shows the features a newcomer asks about on the first day:

- `chat-demo`: two OpenAI-style backends weighted 3:1; `chat-demo-a` serves vLLM-style
  `/metrics` that the controller scrapes; both have `max_in_flight` (priority
  admission); the model masks PII (`mask_pii`).
- `chat-canary` and the route `chat`: 90 % of callers to `chat-demo`, 10 % to
  `chat-canary`, every caller with `user_type: vip` to `chat-canary`
  (`X-Sluice-Route-Version` says which answered).
- `chat-slow`: a backend slower than the model's `timeout_ms`, so its answers come
  from its `fallback_model` `chat-demo` (`X-Sluice-Fallback: chat-demo`) in a second.
- `claude-demo`: an Anthropic-protocol backend (Anthropic's Messages API), reached
  from every caller API (`/v1/messages`, `/v1/chat/completions`, ...);
  `var/sluice-up.json` names it `demo_anthropic_model`.
- `sentiment-demo`: a predict (KServe v1) server; the model needs GPU class `L4`,
  which its backend declares (GPU-class affinity, `GET /api/v1/telemetry/affinity`);
  the model type `nlp/sentiment` maps to it, so brief 000's envelope (`model_type`,
  no `model`) reaches it through `POST /v1/predict`.
- `responses-demo`: a backend that speaks the OpenAI Responses API natively
  (`openai_responses`): `/v1/responses` passes through (stored responses,
  `previous_response_id`), chat callers are converted to it (docs/responses-api.md).
  Every chat model answers on `/v1/responses` too, converted.
- `realtime-demo`: OpenAI's Realtime API over a WebSocket (`GET /v1/realtime?model=
  realtime-demo`), served by the demo realtime backend (control_plane/demo/realtime.py);
  the plans cap sessions at once and their length.
- consumers `demo` (plan `demo`, priority standard) and `demo-vip` (attribute
  `user_type: vip`, plan `vip`, priority critical), each with an API key. The plans'
  limits are high enough never to get in a demo's way but make usage and quotas show.
- audio and images (`asr-demo` with three ASR vendors, `tts-demo`, `image-demo`, …):
  control_plane/demo/media_fleet.py.

Seeding is idempotent: a second run updates ports and reuses the keys it is given.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from control_plane.clients.admin import AdminClient
from control_plane.demo import media_fleet

DEMO_MODELS = [
    {"name": "chat-demo", "timeout_ms": 30000, "mask_pii": True},
    {"name": "chat-canary", "timeout_ms": 30000},
    {"name": "chat-slow", "timeout_ms": 1000, "fallback_model": "chat-demo"},
    {"name": "sentiment-demo", "timeout_ms": 5000, "gpu_class": "L4"},
    {"name": "claude-demo", "timeout_ms": 30000, "max_output_tokens": 4096},
    {"name": "responses-demo", "timeout_ms": 30000},
    # a realtime session is closed after this long with no event either way
    {"name": "realtime-demo", "timeout_ms": 60000},
    *media_fleet.MODELS,
]
DEMO_ANTHROPIC_MODEL = "claude-demo"   # var/sluice-up.json: demo_anthropic_model
DEMO_REALTIME_MODEL = "realtime-demo"
# latency_ms: what the demo backend waits before each answer
DEMO_BACKENDS = [
    {"name": "chat-demo-a", "model": "chat-demo", "protocol": "openai", "weight": 300,
     "max_in_flight": 64, "metrics": "vllm"},
    {"name": "chat-demo-b", "model": "chat-demo", "protocol": "openai", "weight": 100,
     "max_in_flight": 64},
    {"name": "chat-canary-a", "model": "chat-canary", "protocol": "openai", "weight": 100},
    {"name": "chat-slow-a", "model": "chat-slow", "protocol": "openai", "weight": 100,
     "latency_ms": 5000},
    {"name": "sentiment-demo-a", "model": "sentiment-demo", "protocol": "predict",
     "weight": 100, "gpu_class": "L4"},
    {"name": "claude-demo-a", "model": "claude-demo", "protocol": "anthropic", "weight": 100},
    {"name": "responses-demo-a", "model": "responses-demo", "protocol": "openai_responses",
     "weight": 100},
    {"name": "realtime-demo-a", "model": "realtime-demo", "protocol": "openai_realtime",
     "weight": 100, "latency_ms": 0},
    *media_fleet.BACKENDS,
]
DEMO_ROUTE = {"name": "chat", "versions": [
    {"model": "chat-canary", "conditions": {"user_type": "vip"}},
    {"model": "chat-demo", "percent": 90},
    {"model": "chat-canary", "percent": 10}]}
# brief 000's envelope names a model_type, not a model: which model serves each
DEMO_MODEL_TYPES = {"nlp/sentiment": "sentiment-demo", **media_fleet.MODEL_TYPES}
# generous: never in a demo's way, but usage and quotas have something to show
DEMO_PLANS = [
    {"name": "demo", "rate_per_second": 1000, "burst": 2000, "daily_requests": 1_000_000,
     "monthly_tokens": 100_000_000, "priority": "standard", "realtime_sessions": 10,
     "realtime_session_s": 1800},
    {"name": "vip", "rate_per_second": 1000, "burst": 2000, "daily_requests": 1_000_000,
     "monthly_tokens": 100_000_000, "priority": "critical", "realtime_sessions": 50,
     "realtime_session_s": 3600},
]
# consumer name -> (plan, attributes, key name in var/secrets.json and sluice-up.json)
DEMO_CONSUMERS = {
    "demo": ("demo", {}, "demo_api_key"),
    "demo-vip": ("vip", {"user_type": "vip"}, "demo_vip_api_key"),
}
DEMO_LATENCY_MS = 20   # every demo backend's latency, unless it says otherwise
# latency objectives (ms) of the demo models, for the p99 alert
DEMO_SLAS = "chat-demo=2000,chat-canary=2000,sentiment-demo=500,claude-demo=2000"


def backend_module(backend: Mapping[str, Any]) -> str:
    """The module that runs the demo backend (`python -m <module>`)."""
    if backend["protocol"] == "openai_realtime":
        return "control_plane.demo.realtime"
    return "control_plane.demo.backends"


def backend_args(backend: Mapping[str, Any], port: int) -> list[str]:
    """The demo backend's command-line flags (control_plane/demo/cli.py; the realtime
    one's: control_plane/demo/realtime.py)."""
    if backend["protocol"] == "openai_realtime":
        return ["--port", str(port), "--name", backend["name"],
                "--latency-ms", str(backend.get("latency_ms", DEMO_LATENCY_MS))]
    args = ["--protocol", backend.get("serves", backend["protocol"]), "--port", str(port),
            "--name", backend["name"],
            "--latency-ms", str(backend.get("latency_ms", DEMO_LATENCY_MS))]
    if backend.get("metrics"):
        args += ["--metrics", backend["metrics"], "--metrics-used", "0.25"]
    return args


def seed(admin: AdminClient, backend_urls: Mapping[str, str],
         keys: Mapping[str, str | None]) -> dict[str, str]:
    """Load the demo data; `keys` are the saved plain keys by key name (None: none
    yet). Returns the keys by name, new ones created where a saved one is gone."""
    models = {}
    for m in DEMO_MODELS:    # a fallback model comes before the models naming it
        models[m["name"]] = admin.upsert("models", m["name"],
                                         **{k: v for k, v in m.items() if k != "name"})
    mappings = media_fleet.seed_mappings(admin)
    for b in DEMO_BACKENDS:
        url = backend_urls[b["name"]]
        admin.upsert("backends", b["name"], model_id=models[b["model"]]["id"], url=url,
                     mapping_id=mappings.get(b.get("mapping")),
                     protocol=b["protocol"], weight=b["weight"], enabled=True,
                     max_in_flight=b.get("max_in_flight"), gpu_class=b.get("gpu_class"),
                     metrics_url=url + "/metrics" if b.get("metrics") else None,
                     metrics_format=b.get("metrics"))
    admin.upsert("routes", DEMO_ROUTE["name"], versions=DEMO_ROUTE["versions"],
                 enabled=True)
    types = {t["model_type"]: t for t in admin.list("model-types")}
    for model_type, target in DEMO_MODEL_TYPES.items():
        if model_type in types:
            admin.update("model-types", types[model_type]["id"], target=target)
        else:
            admin.create("model-types", model_type=model_type, target=target)
    plans = {p["name"]: admin.upsert("plans", p["name"],
                                     **{k: v for k, v in p.items() if k != "name"})
             for p in DEMO_PLANS}
    all_keys = admin.list("keys")
    out = {}
    for name, (plan, attributes, key_name) in DEMO_CONSUMERS.items():
        consumer = admin.upsert("consumers", name, enabled=True, attributes=attributes,
                                plan_id=plans[plan]["id"])
        key = keys.get(key_name)
        known = {k.get("prefix") for k in all_keys
                 if k.get("consumer_id") == consumer["id"] and k.get("enabled", True)}
        if not key or key[:10] not in known:
            key = admin.create("keys", consumer_id=consumer["id"], name=name)["key"]
        out[key_name] = key
    return out
