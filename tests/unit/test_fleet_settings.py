"""Settings of the fleet (membership, internal TLS) and what they render to."""
from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.runtime.membership import advertise_default, register_url
from control_plane.runtime.nginx_conf import GatewayConfig, render
from control_plane.settings import SettingsError, load_settings


def test_defaults():
    s = load_settings({})
    assert (s.control_plane_url, s.gateway_name, s.advertise_url) == (None, None, None)
    assert (s.heartbeat_interval, s.gateway_ttl, s.gone_after) == (5.0, 15.0, 150.0)
    assert (s.internal_tls_cert, s.internal_tls_key, s.internal_ca) == (None, None, None)


def test_values_are_parsed(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    s = load_settings({"SLUICE_CONTROL_PLANE_URL": "http://cp:8080/",
                       "SLUICE_GATEWAY_NAME": "edge-1.example",
                       "SLUICE_GATEWAY_ADVERTISE_URL": "https://10.0.0.5:8001",
                       "SLUICE_HEARTBEAT_INTERVAL": "2", "SLUICE_GATEWAY_TTL": "6",
                       "SLUICE_GATEWAY_GONE_AFTER": "30", "SLUICE_INTERNAL_CA": str(ca)})
    assert s.control_plane_url == "http://cp:8080" and s.gateway_name == "edge-1.example"
    assert s.advertise_url == "https://10.0.0.5:8001" and s.internal_ca == str(ca)
    assert (s.heartbeat_interval, s.gateway_ttl, s.gone_after) == (2.0, 6.0, 30.0)


@pytest.mark.parametrize("name,value,message", [
    ("SLUICE_CONTROL_PLANE_URL", "cp:8080", r"is not an http\(s\) URL"),
    ("SLUICE_GATEWAY_NAME", "edge 1", "letters, digits"),
    ("SLUICE_GATEWAY_TTL", "0", "positive"),
    ("SLUICE_INTERNAL_CA", "/no/such/ca.pem", "is not a readable file"),
])
def test_bad_values_name_the_variable(name, value, message):
    with pytest.raises(SettingsError, match=message) as err:
        load_settings({name: value})
    assert name in str(err.value)


def test_register_url_and_advertise_default():
    assert register_url("http://cp:8080") == "http://cp:8080/api/v1/gateways/register"
    assert register_url("http://cp:8080/api/v1/") == "http://cp:8080/api/v1/gateways/register"
    assert advertise_default("10.1.2.3", 8001, tls=True) == "https://10.1.2.3:8001"
    assert advertise_default("0.0.0.0", 8001, tls=False).startswith("http://")
    assert "0.0.0.0" not in advertise_default("0.0.0.0", 8001, tls=False)


def test_internal_tls_renders_only_into_the_internal_server(tmp_path):
    cert, key = tmp_path / "gw.pem", tmp_path / "gw.key"
    cert.write_text("c")
    key.write_text("k")
    base = dict(prefix=Path(tmp_path), port=18000, internal_port=18001,
                token="t" * 32)
    plain = render(GatewayConfig(**base))
    assert "ssl_certificate" not in plain
    conf = render(GatewayConfig(**base, internal_tls_cert=cert, internal_tls_key=key))
    internal = conf[conf.index("--- internal listener"):]
    public = conf[:conf.index("--- internal listener")]
    assert "listen 127.0.0.1:18001 ssl;" in internal
    assert f"ssl_certificate {cert.resolve()};" in internal
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in internal
    assert "ssl" not in public.split("--- public listener")[1].split("location")[0]
    with pytest.raises(ValueError, match="both a certificate and a key"):
        render(GatewayConfig(**base, internal_tls_cert=cert))


def test_the_runtime_reaches_its_internal_listener_where_it_listens(tmp_path):
    from control_plane.runtime.gateway import GatewayProcess as Gateway

    def url(host, **tls):
        return Gateway(GatewayConfig(prefix=tmp_path, port=1, internal_port=2,
                                     token="t" * 32, internal_host=host, **tls)).internal_url
    assert url("127.0.0.1") == "http://127.0.0.1:2"
    assert url("0.0.0.0") == "http://127.0.0.1:2"
    assert url("10.1.2.3") == "http://10.1.2.3:2"
    assert url("fd00::5") == "http://[fd00::5]:2"
    assert url("10.1.2.3", internal_tls_cert=tmp_path / "c") == "https://10.1.2.3:2"
