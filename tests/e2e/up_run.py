"""Starting and stopping `sluice up` in a test: free ports, a private var folder, and
a look at which of its processes are alive (tests/e2e/test_up.py, test_supervise.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def ours(var: Path) -> list[str]:
    """Command lines of live processes that belong to this `sluice up` run."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if str(var) in cmd or f"SLUICE_VAR_DIR={var}".encode() in env:
            found.append(f"{d.name}: {cmd}")
    return found


def start_up(var: Path, ports: list[int], **env_extra: str) -> subprocess.Popen:
    """`sluice up` on `ports` (5 of them: gateway, internal, API, controller metrics,
    gateway HTTPS), with `var` as its var folder; its output in .stdout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "SLUICE_ADMIN_TOKEN", "SLUICE_GATEWAY_TOKEN")}
    env.update(SLUICE_VAR_DIR=str(var), SLUICE_GATEWAY_PORT=str(ports[0]),
               SLUICE_INTERNAL_PORT=str(ports[1]), SLUICE_API_PORT=str(ports[2]),
               SLUICE_CONTROLLER_METRICS_PORT=str(ports[3]),
               SLUICE_GATEWAY_TLS_PORT=str(ports[4]), **env_extra)
    return subprocess.Popen([sys.executable, "-m", "control_plane.cli", "up"], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def wait_info(var: Path, proc: subprocess.Popen, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    path = var / "sluice-up.json"
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"sluice up exited {proc.returncode}:\n{proc.stdout.read()}")
        assert time.monotonic() < deadline, "sluice up did not come up"
        time.sleep(0.2)
    time.sleep(0.2)  # written in one go, but let the banner print too
    return json.loads(path.read_text())


def stop_up(proc: subprocess.Popen, sig: int = signal.SIGINT) -> str:
    """Stop it with `sig` (SIGINT is what Ctrl-C sends); return all it printed."""
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    return out
