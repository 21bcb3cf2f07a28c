"""The JS SDK (clients/js, npm package sluice-client): Node's own test runner runs
clients/js/test/ against a real gateway with the demo backends started here, and
tool_backend.py's backend as "tools-demo"."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from backend_http import entry
from backend_http import served as serve_http
from tool_backend import ToolModel

REPO = Path(__file__).resolve().parents[2]
JS = REPO / "clients" / "js"
PLAN_KEY = "sk-test-js-planned-0123456789abcdef"   # consumer 3: one request per 2 s


def test_js_client_against_the_gateway(gateway_factory, helpers, backends, dead_port):
    node = shutil.which("node")
    assert node, "node is missing: scripts/setup.sh installs the nodejs package"
    with serve_http(ToolModel) as tool_port:
        run_node(node, gateway_factory, helpers, backends, dead_port, tool_port)


def run_node(node, gateway_factory, helpers, backends, dead_port, tool_port):
    snap = helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "predict-demo": (5000, [backends["predict-a"].entry(2)]),
        "empty-demo": (5000, []),               # no backend: 503 backend_unavailable
        "tools-demo": (5000, [entry(3, "tools", "openai", tool_port)]),   # tool_backend.py
    })
    helpers.add_planned(snap, PLAN_KEY, {"rate_per_second": 0.5, "burst": 1}, plan_name="tiny")
    gw = gateway_factory()
    r = gw.push(snap)
    assert r.status_code == 200, r.text

    env = {**os.environ, "SLUICE_BASE_URL": gw.url, "SLUICE_API_KEY": helpers.KEY,
           "SLUICE_TEST_PLAN_KEY": PLAN_KEY,
           "SLUICE_TEST_DEAD_URL": f"http://127.0.0.1:{dead_port}"}
    tests = sorted(str(p) for p in (JS / "test").glob("*.test.js"))
    assert tests
    done = subprocess.run([node, "--test", *tests], cwd=JS, env=env, capture_output=True,
                          text=True, timeout=120)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
