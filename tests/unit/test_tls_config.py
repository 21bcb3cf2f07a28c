"""How the public HTTPS listener's settings reach nginx.conf (render only, no nginx):
the listen lines, the certificate lines, and the configurations that cannot work."""
from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.runtime.nginx_conf import GatewayConfig, render


@pytest.fixture
def pem(tmp_path) -> tuple[Path, Path]:
    cert, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    cert.write_text("not parsed by render\n")
    key.write_text("not parsed by render\n")
    return cert, key


def _cfg(**over) -> GatewayConfig:
    return GatewayConfig(prefix=Path("/tmp/unused"), port=8000, internal_port=8001,
                         token="t" * 20, **over)


def _public_server(text: str) -> str:
    return text.split("# --- public listener", 1)[1].split("location / {", 1)[0]


def test_plain_only_by_default():
    server = _public_server(render(_cfg()))
    assert "listen 127.0.0.1:8000;" in server
    assert " ssl" not in "\n".join(line for line in server.splitlines()
                                   if line.strip().startswith("listen"))
    assert "ssl_certificate " not in server


def test_both_listeners_share_one_server(pem):
    text = render(_cfg(tls_port=8443, tls_cert=pem[0], tls_key=pem[1]))
    server = _public_server(text)
    assert "listen 127.0.0.1:8000;" in server
    assert "listen 127.0.0.1:8443 ssl http2;" in server
    assert f'ssl_certificate "{pem[0]}";' in server
    assert f'ssl_certificate_key "{pem[1]}";' in server
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in server
    assert "ssl_session_tickets off;" in server
    assert text.count("location / {") == 2          # public and internal, no copy


def test_https_only(pem):
    server = _public_server(render(_cfg(tls_port=8443, tls_cert=pem[0], tls_key=pem[1],
                                        plain=False)))
    assert "listen 127.0.0.1:8443 ssl http2;" in server
    assert ":8000" not in server


@pytest.mark.parametrize("over, reason", [
    ({"plain": False}, "no public listener"),
    ({"tls_port": 8443}, "needs both tls_cert and tls_key"),
    ({"tls_port": 8001, "certs": True}, "must differ"),
    ({"tls_port": 8000, "certs": True}, "must differ"),
    ({"certs": True}, "need tls_port"),
])
def test_configurations_that_cannot_work(pem, over, reason):
    if over.pop("certs", False):
        over.update(tls_cert=pem[0], tls_key=pem[1])
    with pytest.raises(ValueError, match=reason):
        render(_cfg(**over))


def test_certificate_paths_nginx_would_misread_or_cannot_read(tmp_path, pem):
    odd = tmp_path / "a$b.pem"
    odd.write_text("x")
    with pytest.raises(ValueError, match="would not read"):
        render(_cfg(tls_port=8443, tls_cert=odd, tls_key=pem[1]))
    with pytest.raises(ValueError, match="not readable"):
        render(_cfg(tls_port=8443, tls_cert=pem[0], tls_key=tmp_path / "missing.pem"))
