"""The benches' `contract` target (bench/targets.py): lean plus the two filters and the
access-log line DESIGN.md's contract costs every proxied request. Its figures are read
as a lower bound for Sluice (bench/README.md), so it must really be lean underneath
(the key checked, the body decoded, the upstream's answer passed on) and write one line
per request with the fields of the gateway's own line (docs/contracts.md), in order."""
from __future__ import annotations

import json
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest
import requests

from control_plane.runtime.procs import free_ports, stop

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:   # bench/ is a folder of scripts, not an installed package
    sys.path.insert(0, str(REPO))
from bench import targets  # noqa: E402
KEY = "sk-test-contract"


def documented_fields() -> list[str]:
    """The keys of the access-log line of docs/contracts.md, in their order."""
    doc = (REPO / "docs" / "contracts.md").read_text()
    section = doc.split("## Access log", 1)[1]
    example = re.search(r"```json\n(.*?)```", section, re.S).group(1)
    return list(json.loads(example.replace("\n", "")))


@pytest.fixture
def contract(tmp_path):
    if shutil.which("nginx") is None:
        pytest.fail("nginx missing: scripts/setup.sh installs it")
    upstream_port, port = free_ports(2)
    procs = [targets.start_nginx(tmp_path / "upstream", 1,
                                 targets.upstream_http(upstream_port), upstream_port)]
    procs.append(targets.start_nginx(tmp_path / "contract", 1,
                                     targets.contract_http(port, upstream_port, KEY), port,
                                     targets.LUA_MODULES))
    try:
        yield f"http://127.0.0.1:{port}", tmp_path / "contract", procs[-1]
    finally:
        for proc in reversed(procs):
            stop(proc)


def test_contract_is_lean_with_a_line_per_request(contract):
    url, prefix, proc = contract
    chat = {"model": "bench-chat", "messages": [{"role": "user", "content": "hi"}]}
    ok = requests.post(url + "/v1/chat/completions", json=chat,
                       headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert ok.status_code == 200
    assert ok.json() == targets.UPSTREAM_ANSWER
    wrong_key = requests.post(url + "/v1/chat/completions", json=chat,
                              headers={"Authorization": "Bearer sk-other"}, timeout=10)
    assert wrong_key.status_code == 403
    no_model = requests.post(url + "/v1/chat/completions", data="not json",
                             headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert no_model.status_code == 400

    stop(proc, sig=signal.SIGQUIT)   # graceful: nginx writes its log buffer out
    lines = (prefix / "logs" / "access.log").read_text().splitlines()
    assert len(lines) == 3
    entries = [json.loads(line) for line in lines]
    assert [list(e) for e in entries] == [documented_fields()] * 3
    assert [e["status"] for e in entries] == ["200", "403", "400"]
    assert entries[0]["path"] == "/v1/chat/completions"
    assert entries[0]["upstream_ms"] not in ("", "-")   # it went to the upstream
    assert entries[1]["upstream_ms"] == ""   # it did not
