"""Settings from the environment, overlaid by the SLUICE_CONFIG file."""
from __future__ import annotations

import pytest

from control_plane.settings import Settings, SettingsError, load_settings


def test_defaults():
    s = load_settings({})
    assert s == Settings()
    assert (s.api_host, s.api_port, s.gateway_port, s.internal_port) == (
        "127.0.0.1", 8080, 8000, 8001)
    assert (s.controller_interval, s.push_timeout, s.gateways) == (0.5, 5.0, ())
    with pytest.raises(SettingsError, match="DATABASE_URL is required"):
        s.require_database_url()


def test_every_variable():
    s = load_settings({
        "DATABASE_URL": "postgresql://u@h/db", "SLUICE_ADMIN_TOKEN": "a",
        "SLUICE_GATEWAY_TOKEN": "g",
        "SLUICE_GATEWAYS": " http://127.0.0.1:9180/ , http://10.0.0.2:9180,",
        "SLUICE_API_HOST": "0.0.0.0", "SLUICE_API_PORT": "9090",
        "SLUICE_GATEWAY_PORT": "18000", "SLUICE_INTERNAL_PORT": "18001",
        "SLUICE_CONTROLLER_INTERVAL": "0.25", "SLUICE_PUSH_TIMEOUT": "2"})
    assert s.database_url == "postgresql://u@h/db"
    assert (s.admin_token, s.gateway_token) == ("a", "g")
    assert s.gateways == ("http://127.0.0.1:9180", "http://10.0.0.2:9180")
    assert (s.api_host, s.api_port, s.gateway_port, s.internal_port) == (
        "0.0.0.0", 9090, 18000, 18001)
    assert (s.controller_interval, s.push_timeout) == (0.25, 2.0)


@pytest.mark.parametrize("name,value,reason", [
    ("SLUICE_API_PORT", "eighty", "expected a number"),
    ("SLUICE_GATEWAY_PORT", "70000", "between 1 and 65535"),
    ("SLUICE_INTERNAL_PORT", "0", "between 1 and 65535"),
    ("SLUICE_CONTROLLER_INTERVAL", "-1", "positive number of seconds"),
    ("SLUICE_PUSH_TIMEOUT", "nan", "positive number of seconds"),
    ("SLUICE_GATEWAYS", "127.0.0.1:9180", "is not an http(s) URL"),
    ("SLUICE_RESTART_BACKOFF", "0", "positive number of seconds"),
    ("SLUICE_RESTART_BACKOFF_MAX", "soon", "expected a number"),
    ("SLUICE_DB_CONNECT_TIMEOUT", "1.5", "expected a number"),
    ("SLUICE_DB_CONNECT_TIMEOUT", "0", "whole number >= 1"),
    ("SLUICE_CORS_ORIGINS", "https://app.example.com/path", "is not an origin"),
    ("SLUICE_CORS_ORIGINS", "*,https://a.example", "nor *"),
    ("SLUICE_IP_RATE", "0", "positive number"),
    ("SLUICE_TRUSTED_PROXIES", "10.0.0.0/8, proxy.internal", "not an IP network"),
    ("SLUICE_IP_V6_PREFIX", "129", "from 1 to 128"),
])
def test_bad_values_name_the_variable(name, value, reason):
    with pytest.raises(SettingsError) as err:
        load_settings({name: value})
    assert str(err.value).startswith(f"{name}={value!r}: ")
    assert reason in str(err.value)


def test_cors_origins_any_or_a_list():
    assert load_settings({}).cors_origins == ()
    assert load_settings({"SLUICE_CORS_ORIGINS": "*"}).cors_origins == ("*",)
    assert load_settings({"SLUICE_CORS_ORIGINS": "https://a.example, http://localhost:3000"}
                         ).cors_origins == ("https://a.example", "http://localhost:3000")


PASSWORD = "Hunter2-s3cret"


@pytest.mark.parametrize("name,value,reason", [
    ("DATABASE_URL", f"postgresql//app:{PASSWORD}@db.internal/sluice", "must be a URL"),
    ("SLUICE_REDIS_URL", f"http://:{PASSWORD}@cache:6379/0", "redis://"),
    ("SLUICE_REDIS_URL", f"redis://:{PASSWORD}@cache:6379/0?x=1", "no query"),
    ("SLUICE_REDIS_URL", f"redis://:{PASSWORD}@cache/db{PASSWORD}", "database must be"),
    # a "/" in the password: urlsplit reads what precedes it as user:port
    ("SLUICE_REDIS_URL", f"redis://app:{PASSWORD}/x@cache/0", "port must be a number"),
    ("SLUICE_SCALING_WEBHOOK", f"hooks.example/notify?token={PASSWORD}", "http(s) URL"),
    ("SLUICE_SCALING_WEBHOOK", f"https://hooks.example:{PASSWORD}/notify", "port must be"),
])
def test_bad_secret_values_name_the_variable_never_the_value(name, value, reason):
    with pytest.raises(SettingsError) as err:
        load_settings({name: value})
    message = str(err.value)
    assert message.startswith(f"{name}=<redacted>: ")
    assert reason in message
    for part in (PASSWORD, PASSWORD.split("-")[0], value):
        assert part not in message
        assert part not in repr(err.value)


def test_config_file_overlays_environment(tmp_path):
    path = tmp_path / "sluice.env"
    path.write_text("# comment\n\nSLUICE_API_PORT=9999\n"
                    "export SLUICE_ADMIN_TOKEN='from file'\n")
    s = load_settings({"SLUICE_CONFIG": str(path), "SLUICE_API_PORT": "1234",
                       "SLUICE_PUSH_TIMEOUT": "3"})
    assert (s.api_port, s.admin_token, s.push_timeout) == (9999, "from file", 3.0)
    assert s.config_file == str(path)

    path.write_text("SLUICE_API_PORT=7777\n")  # re-read on the next load (SIGHUP)
    assert load_settings({"SLUICE_CONFIG": str(path)}).api_port == 7777


def test_config_file_errors(tmp_path):
    with pytest.raises(SettingsError, match="SLUICE_CONFIG: cannot read"):
        load_settings({"SLUICE_CONFIG": str(tmp_path / "missing")})
    bad = tmp_path / "bad.env"
    bad.write_text("SLUICE_API_PORT 80\n")
    with pytest.raises(SettingsError, match=r"bad.env:1: expected KEY=VALUE"):
        load_settings({"SLUICE_CONFIG": str(bad)})


def test_settings_are_frozen():
    with pytest.raises(AttributeError):
        load_settings({}).api_port = 1  # type: ignore[misc]


@pytest.mark.parametrize("url", ["postgresql://u:p@h:5/db", "postgres://u:p@h:5/db",
                                 "postgresql+psycopg2://u:p@h:5/db"])
def test_database_urls_use_the_driver_we_ship(url):
    from control_plane.db import normalize_url

    assert normalize_url(url).render_as_string(hide_password=False) == \
        "postgresql+psycopg2://u:p@h:5/db"


def test_admin_ui_session_settings():
    s = load_settings({"SLUICE_SECRET_KEY": " s3cret ", "SLUICE_COOKIE_SECURE": "yes"})
    assert (s.secret_key, s.cookie_secure) == ("s3cret", True)
    assert load_settings({"SLUICE_COOKIE_SECURE": "0"}).cookie_secure is False
    with pytest.raises(SettingsError, match="SLUICE_COOKIE_SECURE='maybe': must be true"):
        load_settings({"SLUICE_COOKIE_SECURE": "maybe"})


def test_supervision_and_database_settings():
    s = load_settings({})
    assert (s.restart_backoff, s.restart_backoff_max, s.restart_reset_after) == (1.0, 30.0, 30.0)
    assert s.db_connect_timeout == 3
    s = load_settings({"SLUICE_RESTART_BACKOFF": "0.2", "SLUICE_RESTART_BACKOFF_MAX": "5",
                       "SLUICE_RESTART_RESET_AFTER": "10", "SLUICE_DB_CONNECT_TIMEOUT": "2"})
    assert (s.restart_backoff, s.restart_backoff_max, s.restart_reset_after) == (0.2, 5.0, 10.0)
    assert s.db_connect_timeout == 2


def test_gateway_tls_variables():
    s = load_settings({})
    assert (s.tls_cert, s.tls_key, s.gateway_tls_port, s.gateway_plain) == (
        None, None, 8443, True)
    s = load_settings({"SLUICE_TLS_CERT": "/etc/sluice/chain.pem",
                       "SLUICE_TLS_KEY": "/etc/sluice/key.pem",
                       "SLUICE_GATEWAY_TLS_PORT": "9443", "SLUICE_GATEWAY_PLAIN": "off"})
    assert (s.tls_cert, s.tls_key, s.gateway_tls_port, s.gateway_plain) == (
        "/etc/sluice/chain.pem", "/etc/sluice/key.pem", 9443, False)


@pytest.mark.parametrize("env,reason", [
    ({"SLUICE_TLS_CERT": "/etc/sluice/chain.pem"}, "set both"),
    ({"SLUICE_TLS_KEY": "/etc/sluice/key.pem"}, "set both"),
    ({"SLUICE_GATEWAY_PLAIN": "off"}, "no public listener"),
    ({"SLUICE_GATEWAY_PLAIN": "sometimes"}, "must be true or false"),
])
def test_gateway_tls_variables_that_do_not_fit(env, reason):
    with pytest.raises(SettingsError, match=reason):
        load_settings(env)


def test_per_ip_limit_settings_make_the_snapshot_section():
    assert Settings().ip_limit() == {"rate": None, "burst": 20, "trusted_proxies": [],
                                     "ipv6_prefix": 64}
    s = load_settings({"SLUICE_IP_RATE": "2.5", "SLUICE_IP_BURST": "40",
                       "SLUICE_TRUSTED_PROXIES": " 10.1.2.3/8, 2001:db8::1 ,",
                       "SLUICE_IP_V6_PREFIX": "56"})
    assert s.ip_limit() == {"rate": 2.5, "burst": 40,
                            "trusted_proxies": ["10.0.0.0/8", "2001:db8::1/128"],
                            "ipv6_prefix": 56}
