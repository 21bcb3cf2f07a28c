"""Uploads over HTTPS and HTTP/2 (issue 25): curl's multipart form to the OpenAI
backend (the body proxied from nginx's file) and to a vendor whose answer is
converted (the HTTP/2 request served again as HTTP/1.1: @sluice_h1_loop)."""
from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from control_plane.demo import backends as demo
from control_plane.demo import media
from control_plane.runtime import procs
from control_plane.runtime.certs import CertAuthority
from control_plane.runtime.nginx_conf import GatewayConfig

CURL = shutil.which("curl")
HTTP_VERSION = "--http2"


@pytest.fixture(scope="module")
def pki():
    folder = Path(tempfile.mkdtemp(prefix="sluice-media-tls-"))
    folder.chmod(0o755)
    ca = CertAuthority.create(folder)
    cert, key = ca.issue(folder, "server", ["127.0.0.1", "localhost"])
    yield ca, cert, key, folder
    shutil.rmtree(folder, ignore_errors=True)


def test_uploads_over_http2(gateway_factory, prefix, pki, helpers, backends):
    ca, cert, key, folder = pki
    port, internal_port, tls_port = procs.free_ports(3)
    gw = gateway_factory(GatewayConfig(prefix=prefix, port=port, internal_port=internal_port,
                                       tls_port=tls_port, tls_cert=cert, tls_key=key,
                                       token=secrets.token_urlsafe(24)))
    raw = demo.serve("asr-raw", "127.0.0.1", 0, "asr-raw")
    try:
        vendor = {"id": 2, "name": "asr-raw", "protocol": "vendor", "mapping": "asr-raw",
                  "scheme": "http", "host": "127.0.0.1", "port": raw.port,
                  "host_header": "localhost", "base_path": "", "weight": 100}
        snap = helpers.make_snapshot(1, {
            "whisper-demo": (5000, [backends["openai-a"].entry(1)]),
            "raw-asr": (5000, [vendor])}, mappings={"asr-raw": {
                "path": "/v1/recognize", "upload": "raw", "request": {},
                "query": {"lang": "zh"}, "response": {"output": "/result/0/transcript"}}})
        for m in snap["models"].values():
            m["media_tasks"] = ["transcription"]
        assert gw.push(snap).status_code == 200
        audio = media.wav(70.0, "h2")   # 2.2 MB: past the upload location's buffer
        path = folder / "h2.wav"
        path.write_bytes(audio)
        for model in ("whisper-demo", "raw-asr"):
            res = subprocess.run(
                [CURL, "-sS", HTTP_VERSION, "--cacert", str(ca.cert), "-w", "\n%{http_version} %{http_code}",
                 "-H", f"Authorization: Bearer {helpers.KEY}", "-F", f"model={model}",
                 "-F", f"file=@{path};type=audio/wav", "-F", "response_format=json",
                 gw.tls_url + "/v1/audio/transcriptions"],
                capture_output=True, text=True, timeout=30)
            assert res.returncode == 0, res.stderr
            answer, status = res.stdout.rsplit("\n", 1)
            assert status == "2 200", res.stdout
            assert json.loads(answer)["text"] == media.transcript(audio)[0], model
    finally:
        raw.shutdown()
