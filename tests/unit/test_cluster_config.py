"""Cluster mode settings: SLUICE_REDIS_URL / SLUICE_REDIS_FAILURE, and how they reach
the gateway's nginx.conf (phases.init options, resolver)."""
from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.runtime import nginx_conf
from control_plane.runtime.nginx_conf import GatewayConfig, render
from control_plane.settings import SettingsError, load_settings
from control_plane.settings import RedisURL, parse_redis_url


def test_defaults_no_redis_fail_open():
    s = load_settings({})
    assert (s.redis_url, s.redis_failure) == (None, "open")


def test_redis_settings():
    s = load_settings({"SLUICE_REDIS_URL": "redis://:s3cret@10.0.0.5:6380/2",
                       "SLUICE_REDIS_FAILURE": "Closed"})
    assert (s.redis_url, s.redis_failure) == ("redis://:s3cret@10.0.0.5:6380/2", "closed")
    assert parse_redis_url(s.redis_url) == RedisURL("10.0.0.5", 6380, 2, None, "s3cret")
    assert parse_redis_url("redis://cache") == RedisURL("cache", 6379, 0)
    assert parse_redis_url("redis://app:p%40ss@h/0") == RedisURL("h", 6379, 0, "app", "p@ss")


@pytest.mark.parametrize("name,value,reason", [
    ("SLUICE_REDIS_URL", "http://h:6379", "redis://"),
    ("SLUICE_REDIS_URL", "redis://:pw@h/zero", "database must be a number"),
    ("SLUICE_REDIS_URL", "redis://:pw@h:99999", "port must be a number in 0..65535"),
    ("SLUICE_REDIS_URL", "redis://:pw@h:pw/0", "port must be a number in 0..65535"),
    ("SLUICE_REDIS_FAILURE", "maybe", "open or closed"),
])
def test_bad_values(name, value, reason):
    with pytest.raises(SettingsError, match=reason) as exc:
        load_settings({name: value})
    assert name in str(exc.value)
    assert "pw" not in str(exc.value)   # the URL may carry a password: not echoed


def _cfg(**over) -> GatewayConfig:
    return GatewayConfig(prefix=Path("/tmp/unused"), port=1, internal_port=2,
                         token="t" * 20, **over)


def test_without_redis_init_gets_nil():
    text = render(_cfg())
    assert "redis = nil" in text and "\n    resolver " not in text


def test_redis_options_reach_init_as_lua():
    text = render(_cfg(redis_url='redis://u:a"b\\c@localhost:7000/3', redis_failure="closed"))
    # localhost -> 127.0.0.1 (cosockets do not read /etc/hosts); odd bytes as \ddd
    assert ('redis = { host = "127.0.0.1", port = 7000, db = 3, failure = "closed", '
            'user = "u", password = "a\\034b\\092c" }') in text
    assert "\n    resolver " not in text
    with pytest.raises(ValueError, match="open or closed"):
        render(_cfg(redis_url="redis://127.0.0.1", redis_failure="sometimes"))


def test_redis_host_name_gets_a_resolver(tmp_path, monkeypatch):
    conf = tmp_path / "resolv.conf"
    conf.write_text("search example\nnameserver 127.0.0.11\nnameserver fd00::1\n")
    assert nginx_conf._nameservers(conf) == ["127.0.0.11", "[fd00::1]"]
    monkeypatch.setattr(nginx_conf, "_nameservers", lambda: ["127.0.0.11"])
    text = render(_cfg(redis_url="redis://redis:6379/0"))
    assert "resolver 127.0.0.11 valid=30s;" in text and 'host = "redis"' in text


def test_sluice_up_passes_redis_to_its_gateway(monkeypatch):
    from control_plane.runtime import up

    monkeypatch.setenv("SLUICE_REDIS_URL", "redis://10.1.2.3:6379/1")
    monkeypatch.setenv("SLUICE_REDIS_FAILURE", "closed")
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    got = up._gateway_settings()
    assert (got["redis_url"], got["redis_failure"]) == ("redis://10.1.2.3:6379/1", "closed")
