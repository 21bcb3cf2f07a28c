"""`sluice up` (what `make run` runs), as a newcomer meets it: start, call, stop, again."""
from __future__ import annotations

import json
import re
import stat
import subprocess
import time
from pathlib import Path

import openai
import pytest
import requests
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families
from up_run import ours, start_up, stop_up, wait_info

from control_plane.demo import media
from control_plane.runtime import procs

def _read_banner(proc: subprocess.Popen) -> str:
    """What `sluice up` prints once it is up, through its last line."""
    lines = []
    while not lines or "Ctrl-C stops everything." not in lines[-1]:
        line = proc.stdout.readline()
        assert line, "sluice up closed its output before the banner:\n" + "".join(lines)
        lines.append(line)
    return "".join(lines)


def _https_curl(banner: str, info: dict) -> None:
    """The printed `curl --cacert` over HTTPS works as printed (run by a shell)."""
    block = banner.split("Over HTTPS", 1)[1].split("\n\n", 1)[0]
    command = block.split("\n", 1)[1].replace("\\\n", " ")
    assert f"--cacert {info['ca_cert']} {info['gateway_tls_url']}/" in command, command
    res = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["choices"][0]["message"]["content"] == "echo: hello"


def _anthropic_curl(banner: str, info: dict) -> None:
    """The printed Messages API call works as printed (run by a shell)."""
    block = banner.split("Anthropic's Messages API (any chat model", 1)[1].split("\n\n", 1)[0]
    command = block.split("\n", 1)[1].replace("\\\n", " ")
    assert f"{info['gateway_url']}/v1/messages" in command, command
    res = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["content"] == [{"type": "text", "text": "echo: hello"}]


def _sign_in(info: dict) -> None:
    """The admin UI answers at ui_url and lets the printed first admin in."""
    browser = requests.Session()
    page = browser.get(info["ui_url"] + "/login", timeout=5)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    resp = browser.post(info["ui_url"] + "/login", timeout=5, allow_redirects=False,
                        data={"username": info["admin_user"], "csrf_token": token,
                              "password": info["admin_password"]})
    assert resp.status_code == 302, resp.text
    assert "Dashboard" in browser.get(info["ui_url"] + "/", timeout=5).text


def _poll(get, done, timeout: float = 30):
    """get() until done(result) or the timeout; returns the last result."""
    deadline = time.monotonic() + timeout
    while True:
        result = get()
        if done(result) or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def _registered_gateway(info: dict, internal_url: str) -> dict:
    """The admin API lists `sluice up`'s gateway as a member of the fleet: it
    registered itself and heartbeats (its last-seen moves on), with the Sluice version
    and the boot id of the nginx that serves."""
    admin = requests.Session()
    admin.headers["Authorization"] = f"Bearer {info['admin_token']}"
    [gw] = admin.get(info["admin_url"] + "/gateways", timeout=5).json()["items"]
    assert gw["registered"] is True and gw["state"] == "live", gw
    assert gw["internal_url"] == internal_url and gw["left_at"] is None, gw
    assert gw["sluice_version"] and gw["sluice_version"] != "unknown", gw
    usage = requests.get(internal_url + "/internal/usage", timeout=5,
                         headers={"Authorization": f"Bearer {info['gateway_token']}"}).json()
    assert gw["boot_id"] == usage["boot"], (gw, usage)
    later = _poll(lambda: admin.get(info["admin_url"] + f"/gateways/{gw['id']}",
                                    timeout=5).json(),
                  lambda g: g["last_seen_at"] != gw["last_seen_at"])
    assert gw["last_seen_at"] and later["last_seen_at"] > gw["last_seen_at"], (gw, later)
    assert later["state"] == "live" and later["boot_id"] == gw["boot_id"]
    return later


def _media_features(info: dict) -> None:
    """The audio and image demo (control_plane/demo/media_fleet.py) on the official
    client: one ASR model over three vendor shapes, one answer shape; speech; images."""
    client = openai.OpenAI(base_url=info["gateway_url"] + "/v1", api_key=info["demo_api_key"],
                           max_retries=0)
    audio = media.wav(1.0, "up")
    seen = set()
    for _ in range(30):
        r = client.audio.transcriptions.with_raw_response.create(
            model=info["demo_asr_model"], file=("a.wav", audio, "audio/wav"))
        assert r.parse().text == media.transcript(audio)[0]
        seen.add(r.headers["x-demo-backend"])
    assert seen == {"asr-demo-openai", "asr-demo-json", "asr-demo-raw"}
    with client.audio.speech.with_streaming_response.create(
            model=info["demo_tts_model"], voice="alloy", input="hello",
            response_format="wav") as speech:
        assert speech.read()[:4] == b"RIFF"
    image = client.images.generate(model=info["demo_image_model"], prompt="a boat",
                                   response_format="b64_json")
    assert image.data[0].b64_json


def _demo_features(info: dict) -> None:
    """What the demo data shows out of the box, as a caller and an operator see it."""
    admin = requests.Session()
    admin.headers["Authorization"] = f"Bearer {info['admin_token']}"

    def chat(key: str, model: str, content: str = "hi") -> requests.Response:
        resp = requests.post(info["gateway_url"] + "/v1/chat/completions", timeout=10,
                             headers={"Authorization": f"Bearer {key}"},
                             json={"model": model,
                                   "messages": [{"role": "user", "content": content}]})
        assert resp.status_code == 200, resp.text
        return resp

    routes = admin.get(info["admin_url"] + "/routes", timeout=5).json()["items"]
    assert [(r["name"], [v["model"] for v in r["versions"]]) for r in routes] == [
        (info["demo_route"], ["chat-canary", "chat-demo", "chat-canary"])]
    # the route's vip condition sends the vip consumer to the canary, every time
    for _ in range(3):
        vip = chat(info["demo_vip_api_key"], info["demo_route"])
        assert vip.headers["X-Sluice-Route-Version"] == "chat-canary"
        assert vip.json()["model"] == "chat-canary"
    plain = chat(info["demo_api_key"], info["demo_route"])
    assert plain.headers["X-Sluice-Route-Version"] == plain.json()["model"]
    assert plain.json()["model"] in ("chat-demo", "chat-canary")
    # brief 000's envelope exactly as the brief writes it: model_type, no model
    rid = "6f1c2a4e-5b7d-4c3e-9a8b-0d1e2f3a4b5c"
    brief = requests.post(info["gateway_url"] + "/v1/predict", timeout=10,
                          headers={"Authorization": f"Bearer {info['demo_api_key']}"},
                          json={"api_version": "1.0", "model_type": "nlp/sentiment",
                                "params": {"input": ["what a fine day"]},
                                "request_id": rid})
    assert brief.status_code == 200, brief.text
    assert brief.json()["model"] == "sentiment-demo" and brief.json()["request_id"] == rid
    assert len(brief.json()["outputs"]) == 1
    # the Anthropic-protocol demo model, from an Anthropic caller and an OpenAI one
    claude = info["demo_anthropic_model"]
    msg = requests.post(info["gateway_url"] + "/v1/messages", timeout=10,
                        headers={"x-api-key": info["demo_api_key"],
                                 "anthropic-version": "2023-06-01"},
                        json={"model": claude, "max_tokens": 20,
                              "messages": [{"role": "user", "content": "hi"}]})
    assert msg.status_code == 200, msg.text
    assert msg.json()["content"] == [{"type": "text", "text": "echo: hi"}]
    assert chat(info["demo_api_key"], claude).json()["choices"][0]["message"]["content"] \
        == "echo: hi"
    # chat-slow's backend answers after its model's timeout: the fallback answers
    slow = chat(info["demo_api_key"], "chat-slow")
    assert slow.headers["X-Sluice-Fallback"] == "chat-demo"
    assert slow.json()["choices"][0]["message"]["content"] == "echo: hi"
    # chat-demo masks PII before its backends see it
    masked = chat(info["demo_api_key"], "chat-demo", "mail bob@example.com")
    assert masked.json()["choices"][0]["message"]["content"] == "echo: mail <email>"
    assert masked.headers["X-RateLimit-Limit"] == "2000"    # the demo plan's burst
    # the controller scrapes chat-demo-a's vLLM /metrics
    scrapes = _poll(lambda: admin.get(info["admin_url"] + "/telemetry/scrapes",
                                      timeout=5).json()["scrapes"],
                    lambda items: all(not s["stale"] for s in items))
    assert [(s["backend"], s["stale"], s["free_fraction"]) for s in scrapes] == [
        ("chat-demo-a", False, 0.75)]
    # a model served by vendors only is never probed (services/health.py): unknown
    vendors_only = {"tts-vendor", "ocr-demo"}
    health = _poll(lambda: admin.get(info["admin_url"] + "/health", timeout=5).json(),
                   lambda h: {v for m, v in h["models"].items()
                              if m not in vendors_only} == {"ready"})
    assert health["models"] == {m: "unknown" if m in vendors_only else "ready"
                                for m in info["demo_models"]}
    affinity = admin.get(info["admin_url"] + "/telemetry/affinity", timeout=5).json()
    assert [(m["model"], m["gpu_class"]) for m in affinity["models"]] == [
        ("sentiment-demo", "L4")]
    # usage per consumer, against the demo plan's quotas
    consumers = admin.get(info["admin_url"] + "/consumers", timeout=5).json()["items"]
    demo_id = next(c["id"] for c in consumers if c["name"] == "demo")
    usage = _poll(lambda: admin.get(info["admin_url"] + f"/consumers/{demo_id}/usage",
                                    timeout=5).json(),
                  lambda u: u["today"]["requests"] >= 4)
    assert usage["plan"]["name"] == "demo" and usage["today"]["requests"] >= 4
    daily = next(q for q in usage["quotas"] if q["quota"] == "daily_requests")
    assert daily["used"] >= 4 and daily["remaining"] == daily["limit"] - daily["used"]

    # a realtime session (WebSocket) with the official client, on the demo realtime backend
    client = OpenAI(base_url=info["gateway_url"] + "/v1", api_key=info["demo_api_key"],
                    max_retries=0)
    with client.realtime.connect(model=info["demo_realtime_model"], max_retries=0) as conn:
        assert conn.recv().type == "session.created"
        conn.conversation.item.create(item={"type": "message", "role": "user",
                                            "content": [{"type": "input_text", "text": "hi"}]})
        conn.response.create()
        said = ""
        for event in conn:
            if event.type == "response.output_audio_transcript.delta":
                said += event.delta
            if event.type == "response.done":
                break
    assert said == "echo: hi"

    # async: 202 and a job at once; its answer by polling (up started RabbitMQ and a worker)
    sub = requests.post(info["gateway_url"] + "/v1/chat/completions", timeout=10,
                        headers={"Authorization": f"Bearer {info['demo_api_key']}",
                                 "Prefer": "respond-async"},
                        json={"model": "chat-demo",
                              "messages": [{"role": "user", "content": "later"}]})
    assert sub.status_code == 202, sub.text
    job = _poll(lambda: requests.get(info["gateway_url"] + sub.headers["Location"], timeout=5,
                                     headers={"Authorization": f"Bearer {info['demo_api_key']}"}
                                     ).json(),
                lambda j: j["status"] == "succeeded")
    assert job["result"]["body"]["choices"][0]["message"]["content"] == "echo: later"


def test_up_serves_prints_how_and_stops_everything(var):
    ports = procs.free_ports(5)
    first = start_up(var, ports)
    banner = ""
    try:
        info = wait_info(var, first)
        banner = _read_banner(first)
        # HTTPS beside HTTP, with a private demo CA under var/
        assert info["gateway_tls_url"] == f"https://127.0.0.1:{ports[4]}"
        assert Path(info["ca_cert"]).is_relative_to(var)
        key_files = [p for p in (var / "tls").iterdir() if p.suffix == ".key"]
        assert key_files and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in key_files)
        _https_curl(banner, info)
        _anthropic_curl(banner, info)
        mode = stat.S_IMODE((var / "sluice-up.json").stat().st_mode)
        assert mode == 0o600
        assert info["admin_url"].endswith("/api/v1")
        assert info["gateway_url"] == f"http://127.0.0.1:{ports[0]}"
        chat_model = info["demo_models"][0]

        resp = requests.post(info["gateway_url"] + "/v1/chat/completions", timeout=10,
                             headers={"Authorization": f"Bearer {info['demo_api_key']}"},
                             json={"model": chat_model,
                                   "messages": [{"role": "user", "content": "hi"}]})
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["message"]["content"] == "echo: hi"
        metrics = requests.get(info["metrics_url"], timeout=5,
                               headers={"Authorization": f"Bearer {info['gateway_token']}"})
        assert metrics.status_code == 200
        assert f'sluice_requests_total{{model="{chat_model}",' in metrics.text
        # the controller ships the request's log line into Postgres
        rid = resp.headers["X-Request-Id"]
        deadline = time.monotonic() + 20
        while True:
            found = requests.get(info["admin_url"] + f"/logs?request_id={rid}", timeout=5,
                                 headers={"Authorization": f"Bearer {info['admin_token']}"})
            if found.json()["items"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [i["model"] for i in found.json()["items"]] == [chat_model]
        # the controller's own metrics, read by the real Prometheus parser
        text = requests.get(info["controller_metrics_url"], timeout=5).text
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for fam in text_string_to_metric_families(text) for s in fam.samples}
        gateway = _registered_gateway(info, f"http://127.0.0.1:{ports[1]}")
        gw_name = gateway["name"]
        assert samples[("sluice_controller_pushes_total",
                        (("gateway", gw_name), ("outcome", "ok")))] >= 1
        config = samples[("sluice_controller_config_version", ())]
        assert samples[("sluice_gateway_acked_version", (("gateway", gw_name),))] == config
        assert samples[("sluice_shipper_rows_total", (("source", "gateway"),))] >= 1
        assert samples[("sluice_model_sla_seconds", (("model", "chat-demo"),))] == 2.0
        models = requests.get(info["admin_url"] + "/models", timeout=5,
                              headers={"Authorization": f"Bearer {info['admin_token']}"})
        assert {m["name"] for m in models.json()["items"]} == set(info["demo_models"])
        _sign_in(info)
        _demo_features(info)
        _media_features(info)
        running = "\n".join(ours(var))
        for part in ("postgres", "nginx", "gunicorn", "controller", "demo.backends"):
            assert part in running, f"{part} not found among:\n{running}"
    finally:
        out = banner + stop_up(first)
    assert first.returncode == 0, out
    assert "curl" in out and info["demo_api_key"] in out
    assert info["demo_vip_api_key"] in out and "X-Sluice-Route-Version" in out
    assert info["ui_url"] in out and info["admin_password"] in out
    assert ours(var) == []
    with pytest.raises(requests.ConnectionError):
        requests.get(info["gateway_url"], timeout=2)

    # A second run comes up on the same data and keeps the demo key working.
    ca_pem = Path(info["ca_cert"]).read_text()
    (var / "sluice-up.json").unlink()
    second = start_up(var, ports)
    try:
        again = wait_info(var, second)
        # the demo CA and certificate are reused: callers' trust in the CA survives
        assert again["ca_cert"] == info["ca_cert"]
        assert Path(again["ca_cert"]).read_text() == ca_pem
        https = requests.get(again["gateway_tls_url"] + "/v1/models", verify=again["ca_cert"],
                             headers={"X-API-Key": again["demo_api_key"]}, timeout=10)
        assert https.status_code == 200, https.text
        assert again["demo_api_key"] == info["demo_api_key"]
        assert again["demo_vip_api_key"] == info["demo_vip_api_key"]
        assert again["admin_password"] == info["admin_password"]
        # the same member, back with the boot id of its new nginx
        back = _registered_gateway(again, f"http://127.0.0.1:{ports[1]}")
        assert back["name"] == gateway["name"] and back["boot_id"] != gateway["boot_id"]
        _sign_in(again)
        resp = requests.post(again["gateway_url"] + "/v1/models/sentiment-demo/predict",
                             headers={"X-API-Key": again["demo_api_key"]},
                             json={"instances": ["fine"]}, timeout=10)
        assert resp.status_code == 200, resp.text
        vip = requests.post(again["gateway_url"] + "/v1/chat/completions", timeout=10,
                            headers={"Authorization": f"Bearer {again['demo_vip_api_key']}"},
                            json={"model": again["demo_route"],
                                  "messages": [{"role": "user", "content": "hi"}]})
        assert vip.headers.get("X-Sluice-Route-Version") == "chat-canary", vip.text
    finally:
        out = stop_up(second)
    assert second.returncode == 0, out
    assert ours(var) == []
