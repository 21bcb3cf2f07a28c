"""The internal listener, the last-known-good file, reloads, and the generated config."""
from __future__ import annotations

import json
import stat
import subprocess

import pytest
import requests

from control_plane.runtime.gateway import GatewayProcess as Gateway
from control_plane.runtime.nginx_conf import render


def _status(gw):
    r = requests.get(gw.internal_url + "/internal/snapshot",
                     headers={"Authorization": f"Bearer {gw.cfg.token}"}, timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def test_fresh_gateway_serves_nothing(gateway_factory):
    gateway = gateway_factory()  # it needs one never pushed to: a gateway of its own
    assert _status(gateway) == {"version": 0, "loaded_at": None, "source": "none"}


def test_push_is_served_and_reported(gateway_factory, default_snapshot, helpers):
    gateway = gateway_factory()  # it reads the raw status: a gateway of its own
    r = gateway.push(default_snapshot)
    assert r.status_code == 200
    assert r.json() == {"version": 1}
    st = _status(gateway)
    assert st["version"] == 1 and st["source"] == "push" and st["loaded_at"] > 0
    assert gateway.served_version() == 1
    assert helpers.chat(gateway).status_code == 200


def test_internal_needs_token(gateway, default_snapshot, helpers):
    url = gateway.internal_url + "/internal/snapshot"
    err = helpers.assert_error
    err(requests.get(url, timeout=5), 401, "unauthorized")
    err(requests.post(url, json=default_snapshot, timeout=5), 401, "unauthorized")
    wrong = {"Authorization": "Bearer " + "x" * len(gateway.cfg.token)}
    err(requests.get(url, headers=wrong, timeout=5), 403, "forbidden")
    err(requests.post(url, json=default_snapshot, headers=wrong, timeout=5),
                403, "forbidden")
    assert gateway.served_version() == 0     # nothing was taken


def test_internal_listener_not_on_public_port(served, helpers):
    r = requests.get(served.url + "/internal/snapshot",
                     headers={"Authorization": f"Bearer {served.cfg.token}"}, timeout=5)
    helpers.assert_error(r, 404, "not_found")


@pytest.mark.parametrize("mutate", [
    lambda s: s.pop("version"),
    lambda s: s.update(version=0),
    lambda s: s.update(version="3"),
    lambda s: s.update(models=[s["models"]["chat-demo"]]),
    lambda s: s["models"]["chat-demo"]["backends"][0].update(port=70000),
    lambda s: s["models"]["chat-demo"]["backends"][0].update(host="backend.example"),
    lambda s: s["models"]["chat-demo"]["backends"][0].update(protocol="grpc"),
    lambda s: s["models"]["chat-demo"]["backends"][0].update(weight=-1),
    lambda s: s["models"]["chat-demo"].update(timeout_ms=0),
    lambda s: s["keys"].update({"not-a-hash": {"consumer_id": 1}}),
    lambda s: s["consumers"]["1"].update(allowed_models="chat-demo"),
], ids=["no-version", "version-0", "version-str", "models-list", "port", "host-name",
        "protocol", "weight", "timeout", "key-hash", "allowed-models"])
def test_invalid_snapshot_refused_and_old_one_kept(served, default_snapshot, helpers, mutate):
    bad = json.loads(json.dumps(default_snapshot))
    bad["version"] = 2
    bad["models"]["chat-demo"]["backends"][0]["weight"] = 0   # would drain chat-demo
    mutate(bad)
    r = served.push(bad)
    helpers.assert_error(r, 400, "invalid_request")
    assert served.served_version() == 1
    assert helpers.chat(served).status_code == 200


def test_non_json_snapshot_refused(served, helpers):
    r = requests.post(served.internal_url + "/internal/snapshot", data=b"{not json",
                      headers={"Authorization": f"Bearer {served.cfg.token}"}, timeout=5)
    helpers.assert_error(r, 400, "invalid_request")
    assert served.served_version() == 1


def test_older_version_is_409_same_version_is_accepted(gateway, default_snapshot, helpers):
    snap = dict(default_snapshot, version=5)
    assert gateway.push(snap).status_code == 200
    helpers.assert_error(gateway.push(dict(snap, version=4)), 409, "conflict")
    assert gateway.served_version() == 5
    r = gateway.push(snap)                                   # idempotent re-push
    assert r.status_code == 200 and r.json() == {"version": 5}


def test_newer_snapshot_changes_routing(served, default_snapshot, backends, helpers):
    assert helpers.chat(served).headers["X-Demo-Backend"] == "openai-a"
    snap = json.loads(json.dumps(default_snapshot))
    snap["version"] = 2
    snap["models"]["chat-demo"]["backends"] = [backends["openai-b"].entry(7)]
    assert served.push(snap).status_code == 200
    for _ in range(6):                       # every worker picks the new version up
        assert helpers.chat(served).headers["X-Demo-Backend"] == "openai-b"


def test_lkg_serves_after_restart_without_push(gateway_factory, prefix, default_snapshot,
                                               helpers):
    first = gateway_factory()
    assert first.push(dict(default_snapshot, version=3)).status_code == 200
    assert json.loads(first.lkg_path.read_text())["version"] == 3
    first.stop()

    second = gateway_factory(first.cfg)          # same prefix, same ports, no push
    st = _status(second)
    assert st["version"] == 3 and st["source"] == "lkg"
    r = helpers.chat(second)
    assert r.status_code == 200 and r.headers["X-Demo-Backend"] == "openai-a"


def test_reload_keeps_snapshot(served, helpers):
    before = _status(served)
    served.reload()
    after = _status(served)
    assert after == before                       # still the pushed one, not reloaded from disk
    assert helpers.chat(served).status_code == 200


def test_config_file_is_private_and_valid(gateway):
    mode = stat.S_IMODE(gateway.conf_path.stat().st_mode)
    assert mode == 0o600
    assert gateway.cfg.token in gateway.conf_path.read_text()
    res = subprocess.run(["/usr/sbin/nginx", "-t", "-p", f"{gateway.prefix}/",
                          "-c", "conf/nginx.conf"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_render_refuses_unsafe_token(gateway):
    cfg = gateway.cfg
    bad = type(cfg)(**{**cfg.__dict__, "token": 'short"; os.exit() --'})
    with pytest.raises(ValueError):
        render(bad)


def test_stop_leaves_nothing_running(gateway_factory):
    gw: Gateway = gateway_factory()
    master = gw.proc.pid
    workers = gw._worker_pids()
    assert workers
    gw.stop()
    for pid in workers | {master}:
        assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_render_refuses_shared_port(gateway):
    cfg = gateway.cfg
    with pytest.raises(ValueError):
        render(type(cfg)(**{**cfg.__dict__, "internal_port": cfg.port}))
