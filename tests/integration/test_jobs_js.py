"""The JS SDK's async jobs (clients/js: submit, wait, cancel) against a real gateway
with the jobs service and a worker; the webhook it asked for arrives, and the SDK's
verifySignature accepts its signature (checked in Node on the body as received)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import requests

from waiting import eventually

JS = Path(__file__).resolve().parents[2] / "clients" / "js"


def test_js_sdk_submit_wait_and_verify(jobs_stack, receiver):
    node = shutil.which("node")
    assert node, "node is missing: scripts/setup.sh installs the nodejs package"
    consumer, key = jobs_stack.keys["alice"]
    secret = requests.post(f"{jobs_stack.admin_url}/consumers/{consumer['id']}/webhook-secret",
                           headers={"Authorization": f"Bearer {jobs_stack.admin_token}"},
                           timeout=10).json()["secret"]
    env = {**os.environ, "SLUICE_BASE_URL": jobs_stack.gateway.url, "SLUICE_API_KEY": key,
           "SLUICE_TEST_CALLBACK_URL": receiver.url}
    done = subprocess.run([node, "--test", "test/jobs.integration.js"], cwd=JS, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]

    eventually(lambda: receiver.calls, timeout=20)
    _, headers, raw = receiver.calls[0]
    script = ("import { verifySignature } from './src/index.js';"
              "const [s, h, b] = JSON.parse(process.argv[1]);"
              "const ok = await verifySignature(s, h, b);"
              "const bad = await verifySignature(s, h, b + 'x');"
              "process.stdout.write(JSON.stringify([ok, bad]));")
    out = subprocess.run([node, "--input-type=module", "-e", script,
                          json.dumps([secret, headers["X-Sluice-Signature"], raw.decode()])],
                         cwd=JS, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [True, False]
