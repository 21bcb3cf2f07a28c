"""TLS on the gateway's internal listener, with a CA the test makes with openssl: the
controller verifies it (SLUICE_INTERNAL_CA), a member advertises https://, plain HTTP
and unverified clients get nothing."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import requests
from fleet_members import listed, start_member
from waiting import eventually

from control_plane.clients.gateway import GatewayClient, GatewayError
from control_plane.runtime import procs
from control_plane.runtime.gateway import GatewayProcess as Gateway
from control_plane.runtime.nginx_conf import GatewayConfig


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    assert openssl, "openssl missing: install Debian's openssl"
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True)


def make_ca(folder: Path, name: str) -> Path:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN={name}", cwd=folder)
    return folder / f"{name}.pem"


def make_server_cert(folder: Path, ca: str) -> tuple[Path, Path]:
    (folder / "ext.cnf").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
        "extendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "gw.key", "-out", "gw.csr", "-subj", "/CN=gateway", cwd=folder)
    _openssl("x509", "-req", "-in", "gw.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", "gw.pem", "-days", "2", "-extfile", "ext.cnf",
             cwd=folder)
    return folder / "gw.pem", folder / "gw.key"


@pytest.fixture
def pki(bare_stack):
    folder = bare_stack.tmp / "pki"
    folder.mkdir()
    folder.chmod(0o755)
    ca = make_ca(folder, "internal-ca")
    other = make_ca(folder, "other-ca")
    cert, key = make_server_cert(folder, "internal-ca")
    return {"ca": ca, "other_ca": other, "cert": cert, "key": key}


def test_internal_listener_speaks_only_verified_tls(bare_stack, pki):
    port, internal = procs.free_ports(2)
    gw = Gateway(GatewayConfig(prefix=bare_stack.tmp / "gw-tls", port=port,
                               internal_port=internal, token=bare_stack.gateway_token,
                               workers=1, internal_tls_cert=pki["cert"],
                               internal_tls_key=pki["key"], internal_ca=pki["ca"]))
    gw.start()
    bare_stack.gateways.append(gw)
    assert gw.internal_url.startswith("https://")
    good = GatewayClient(bare_stack.gateway_token, ca=str(pki["ca"]))
    assert good.snapshot_status(gw.internal_url)["version"] == 0

    with pytest.raises(GatewayError, match="SSLError"):
        GatewayClient(bare_stack.gateway_token, ca=str(pki["other_ca"])).snapshot_status(
            gw.internal_url)
    with pytest.raises(GatewayError, match="SSLError"):
        GatewayClient(bare_stack.gateway_token).snapshot_status(gw.internal_url)
    plain = requests.get(f"http://127.0.0.1:{internal}/internal/snapshot", timeout=5,
                         headers={"Authorization": f"Bearer {bare_stack.gateway_token}"})
    assert plain.status_code == 400 and '"version"' not in plain.text
    # the public listener is untouched: plain HTTP as before
    assert requests.get(gw.url + "/healthz", timeout=5).status_code == 200


def test_a_tls_member_joins_and_the_controller_pushes_over_verified_tls(bare_stack, pki):
    with open(bare_stack.config_file, "a") as f:
        f.write(f"SLUICE_INTERNAL_CA={pki['ca']}\n")
    bare_stack.start_api()
    bare_stack.start_controller()
    bare_stack.admin.create("models", name="chat-demo")
    version = bare_stack.admin.config_version()
    m = start_member(bare_stack, "edge-tls", SLUICE_INTERNAL_TLS_CERT=str(pki["cert"]),
                     SLUICE_INTERNAL_TLS_KEY=str(pki["key"]),
                     SLUICE_INTERNAL_CA=str(pki["ca"]))
    eventually(lambda: m.view.served_version() == version, 20,
               message="the controller pushed over TLS")
    g = listed(bare_stack)["edge-tls"]
    assert g["internal_url"].startswith("https://127.0.0.1:") and g["state"] == "live"
    eventually(lambda: listed(bare_stack)["edge-tls"]["acked_version"] == version, 10)
    assert listed(bare_stack)["edge-tls"]["last_error"] is None


def test_a_controller_with_another_ca_does_not_push_and_says_why(bare_stack, pki):
    with open(bare_stack.config_file, "a") as f:
        f.write(f"SLUICE_INTERNAL_CA={pki['other_ca']}\n")
    bare_stack.start_api()
    bare_stack.start_controller()
    start_member(bare_stack, "edge-tls", SLUICE_INTERNAL_TLS_CERT=str(pki["cert"]),
                 SLUICE_INTERNAL_TLS_KEY=str(pki["key"]),
                 SLUICE_INTERNAL_CA=str(pki["ca"]))
    g = eventually(lambda: (g := listed(bare_stack).get("edge-tls")) and g["last_error"]
                   and g, 20)
    assert "SSLError" in g["last_error"] and g["acked_version"] is None
    assert bare_stack.gateway_token not in g["last_error"]
