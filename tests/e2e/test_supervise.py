"""One failure stays one failure: `sluice up` under load while each child is killed in
turn, and `sluice gateway` exiting non-zero when its nginx dies.

The counts of each phase are printed (pytest -s shows them).
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from up_run import REPO, ours, start_up, stop_up, wait_info
from waiting import eventually

from control_plane.demo import fleet
from control_plane.runtime import procs

# model -> how many client threads call it without pause
LOAD = {"chat-demo": 2, "chat-canary": 1, "sentiment-demo": 1}
FAST = {"SLUICE_RESTART_BACKOFF": "0.2", "SLUICE_RESTART_BACKOFF_MAX": "1",
        # the circuit breaker that opened on the killed backend lets it back in soon
        "SLUICE_BREAKER_COOLDOWN_S": "1"}


def _stat(pid: str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def children(up: subprocess.Popen, var: Path) -> dict[str, int]:
    """The live children of `sluice up` by name, as `ps` shows them."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if int(_stat(d.name)[1]) != up.pid:
                continue
            argv = (d / "cmdline").read_bytes().decode().split("\0")
        except (OSError, IndexError):
            continue
        line = " ".join(argv)
        if "control_plane.demo." in line and "--name" in argv:   # backends, realtime
            found[argv[argv.index("--name") + 1]] = int(d.name)
        elif "gunicorn" in line:
            found["api"] = int(d.name)
        elif "control_plane.cli controller" in line:
            found["controller"] = int(d.name)
        elif "control_plane.cli worker" in line:
            found["worker"] = int(d.name)
        elif "rabbit" in line and ("beam" in line or "rabbitmq-server" in line):
            found["rabbitmq"] = int(d.name)
        elif line.startswith("nginx: master"):
            found["gateway"] = int(d.name)
    try:
        pid = int((var / "pg" / "postmaster.pid").read_text().split()[0])
        if _stat(str(pid))[0] != "Z":
            found["postgres"] = pid
    except (OSError, ValueError, IndexError):
        pass
    return found


class Load:
    """Client threads calling the demo models without pause; counts per model."""

    def __init__(self, info: dict):
        self.info = info
        self.lock = threading.Lock()
        self.counts = {model: [0, 0] for model in LOAD}   # [ok, failed]
        self.why: dict[str, str] = {}   # model -> how its last failure looked
        # 429s of the demo plan's own rate limit (1,000/s): the load outruns it on a
        # fast machine; the gateway is right to refuse them, and they are not failures
        # of a part that died. Counted apart so that the figures show them.
        self.limited = {model: 0 for model in LOAD}
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(model,), daemon=True)
                        for model, n in LOAD.items() for _ in range(n)]

    def call(self, session: requests.Session, model: str) -> bool | None:
        """True: answered; False: failed; None: refused by the plan's rate limit."""
        gw, key = self.info["gateway_url"], self.info["demo_api_key"]
        try:
            if model == "sentiment-demo":
                resp = session.post(f"{gw}/v1/models/{model}/predict", timeout=10,
                                    headers={"X-API-Key": key}, json={"instances": ["ok"]})
            else:
                resp = session.post(f"{gw}/v1/chat/completions", timeout=10,
                                    headers={"Authorization": f"Bearer {key}"},
                                    json={"model": model,
                                          "messages": [{"role": "user", "content": "hi"}]})
            if resp.status_code == 429 and '"rate_limited"' in resp.text:
                return None
            if resp.status_code != 200:
                self.why[model] = f"{resp.status_code} {resp.text[:200]}"
            return resp.status_code == 200
        except requests.RequestException as exc:
            self.why[model] = repr(exc)[:200]
            return False

    def _run(self, model: str) -> None:
        session = requests.Session()
        while not self.stopping.is_set():
            ok = self.call(session, model)
            with self.lock:
                if ok is None:
                    self.limited[model] += 1
                else:
                    self.counts[model][0 if ok else 1] += 1

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(15)

    def peek(self) -> dict[str, tuple[int, int]]:
        with self.lock:
            return {m: (ok, failed) for m, (ok, failed) in self.counts.items()}

    def take(self) -> dict[str, tuple[int, int]]:
        """The counts since the last take(), and start again from zero."""
        with self.lock:
            out = {m: (ok, failed) for m, (ok, failed) in self.counts.items()}
            self.counts = {model: [0, 0] for model in LOAD}
        return out


def _kill_each(up: subprocess.Popen, var: Path, load: Load, name: str,
               kill: Callable[[int], None], recovered: Callable[[], object],
               affected: set[str]) -> dict[str, tuple[int, int]]:
    """Kill child `name` under load; wait until it runs again (a new pid) and serves
    (`recovered`) and every model has answered since; check the others' pids."""
    before = children(up, var)
    assert name in before, before
    load.take()
    kill(before[name])
    eventually(lambda: children(up, var).get(name) not in (None, before[name]), timeout=60,
               message=f"{name} runs again with a new pid")
    eventually(recovered, timeout=60, message=f"{name} serves again")
    eventually(lambda: all(ok >= 20 for ok, _ in load.peek().values()), timeout=60,
               message="every model answers after the restart")
    counts = load.take()
    print(f"\nkilled {name}: " + "; ".join(f"{m} {ok} ok, {failed} failed"
                                          for m, (ok, failed) in counts.items())
          + f" (rate-limited by the plan since the start: {sum(load.limited.values())})")
    after = children(up, var)
    assert after[name] != before[name]
    assert {k: v for k, v in after.items() if k != name} == \
        {k: v for k, v in before.items() if k != name}, "another child was restarted"
    for model, (_, failed) in counts.items():
        if model not in affected:
            assert failed == 0, (f"{model} failed {failed} times while {name} was down; "
                                    f"last: {load.why.get(model)}")
    return counts


def _async_job(info: dict) -> bool:
    """A job submitted now ends succeeded within 20 s."""
    auth = {"Authorization": f"Bearer {info['demo_api_key']}"}
    sub = requests.post(info["gateway_url"] + "/v1/chat/completions", timeout=5,
                        headers={**auth, "Prefer": "respond-async"},
                        json={"model": "chat-demo", "messages": [{"role": "user",
                                                                  "content": "async"}]})
    if sub.status_code != 202:
        return False
    job = eventually(lambda: (j := requests.get(info["gateway_url"] + sub.headers["Location"],
                                                headers=auth, timeout=5).json())["status"]
                     in ("succeeded", "failed") and j, timeout=20)
    return job["status"] == "succeeded"


def _get(url: str, **kw) -> requests.Response:
    return requests.get(url, timeout=5, **kw)


def test_each_child_killed_under_load_is_restarted_alone(var):
    up = start_up(var, procs.free_ports(5), **FAST)
    load = None
    try:
        info = wait_info(var, up)
        admin = requests.Session()
        admin.headers["Authorization"] = f"Bearer {info['admin_token']}"
        internal = {"Authorization": f"Bearer {info['gateway_token']}"}
        served = info["metrics_url"].replace("/metrics", "/internal/snapshot")
        started = children(up, var)
        # the services and every demo backend of the fleet (control_plane/demo/fleet.py)
        assert set(started) == {"postgres", "api", "controller", "gateway", "worker", "rabbitmq",
                                *(b["name"] for b in fleet.DEMO_BACKENDS)}, started
        assert {"chat-demo-a", "chat-canary-a", "claude-demo-a",
                "realtime-demo-a", "asr-demo-openai"} <= set(started)
        load = Load(info)
        load.start()
        eventually(lambda: all(ok >= 20 for ok, _ in load.peek().values()), timeout=30)
        warm = load.take()
        assert all(failed == 0 for _, failed in warm.values()), warm

        def canary_serves() -> bool:
            return load.call(requests.Session(), "chat-canary")
        _kill_each(up, var, load, "chat-canary-a", lambda pid: os.kill(pid, signal.SIGKILL),
                   canary_serves, affected={"chat-canary"})

        # gunicorn's arbiter only: its orphaned workers hold the port until stopped
        _kill_each(up, var, load, "api", lambda pid: os.kill(pid, signal.SIGKILL),
                   lambda: admin.get(info["admin_url"] + "/config", timeout=5).ok,
                   affected=set())
        healthz = _get(info["admin_url"].replace("/api/v1", "/healthz"))   # no token
        assert healthz.json() == {"status": "ok"}

        _kill_each(up, var, load, "controller", lambda pid: os.kill(pid, signal.SIGKILL),
                   lambda: _get(info["controller_metrics_url"]).ok, affected=set())
        # a config change after the restart reaches the gateway: the new controller pushes
        plans = admin.get(info["admin_url"] + "/plans", timeout=5).json()["items"]
        demo_plan = next(p["id"] for p in plans if p["name"] == "demo")
        assert admin.patch(info["admin_url"] + f"/plans/{demo_plan}", json={"burst": 2001},
                           timeout=5).ok
        version = admin.get(info["admin_url"] + "/config", timeout=5).json()["version"]
        eventually(lambda: _get(served, headers=internal).json()["version"] == version,
                   timeout=30, message="the restarted controller pushes the change")

        # async jobs: a killed worker, a killed broker (its whole process group), and the
        # next job is answered; interactive traffic never notices
        def job_succeeds() -> bool:
            return _async_job(info)
        _kill_each(up, var, load, "worker", lambda pid: os.kill(pid, signal.SIGKILL),
                   job_succeeds, affected=set())
        _kill_each(up, var, load, "rabbitmq", lambda pid: os.killpg(pid, signal.SIGKILL),
                   job_succeeds, affected=set())

        # the gateways serve on their snapshot; the API answers again by itself
        _kill_each(up, var, load, "postgres", lambda pid: os.kill(pid, signal.SIGKILL),
                   lambda: _get(info["admin_url"].replace("/api/v1", "/readyz")).ok
                   and admin.get(info["admin_url"] + "/models", timeout=5).ok,
                   affected=set())

        # every nginx process: the port closes, every model fails until it is back on
        # its last-known-good snapshot
        counts = _kill_each(up, var, load, "gateway",
                            lambda pid: os.killpg(pid, signal.SIGKILL),
                            lambda: all(load.call(requests.Session(), m) for m in LOAD),
                            affected=set(LOAD))
        assert all(ok >= 20 for ok, _ in counts.values())
        snapshot = _get(served, headers=internal).json()
        print(f"restarted nginx serves snapshot version {snapshot['version']} "
              f"(from {snapshot['source']})")
    finally:
        if load is not None:
            load.stop()
        out = stop_up(up, signal.SIGTERM)   # test_up.py stops it with SIGINT
    print(out[-3000:])
    assert up.returncode == 0, out
    for name in ("chat-canary-a", "api", "controller", "postgres", "gateway", "worker",
                 "rabbitmq"):
        assert f"{name}: restarted" in out, out
    assert "gateway: nginx master pid" in out and "was killed by SIGKILL" in out
    assert ours(var) == [], "Ctrl-C left processes running"


@pytest.fixture
def prefix():
    top = Path(tempfile.mkdtemp(prefix="sluice-gw-"))
    top.chmod(0o755)  # nginx workers run as nobody under root
    yield top / "gw"
    shutil.rmtree(top, ignore_errors=True)


def _gateway(prefix: Path, ports: list[int]) -> subprocess.Popen:
    port, internal = ports
    env = dict(os.environ, SLUICE_GATEWAY_TOKEN=secrets.token_urlsafe(24),
               SLUICE_GATEWAY_PORT=str(port), SLUICE_INTERNAL_PORT=str(internal),
               SLUICE_GATEWAY_HOST="127.0.0.1")
    proc = subprocess.Popen([sys.executable, "-m", "control_plane.cli", "gateway",
                             "--prefix", str(prefix), "--workers", "2"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()   # said once nginx serves
    assert "serves on port" in line, line + proc.communicate(timeout=30)[0]
    return proc


def _nginx_master(parent: int) -> int:
    for d in Path("/proc").iterdir():
        try:
            if (d.name.isdigit() and int(_stat(d.name)[1]) == parent
                    and (d / "cmdline").read_bytes().startswith(b"nginx: master")):
                return int(d.name)
        except (OSError, IndexError):
            continue
    raise AssertionError(f"no nginx master under pid {parent}")


def test_sluice_gateway_exits_non_zero_when_its_nginx_dies(prefix):
    ports = procs.free_ports(2)
    port = ports[0]
    proc = _gateway(prefix, ports)
    try:
        master = _nginx_master(proc.pid)
        workers = [p for p in procs.group_members(master) if p != master]
        assert workers
        assert requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code
        os.kill(master, signal.SIGKILL)   # the workers live on, orphaned, on the port
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            procs.stop(proc)
    assert proc.returncode == 1, out
    assert f"nginx master pid {master} was killed by SIGKILL" in out
    # nothing is left holding the port, so the orchestrator can start it again
    assert procs.group_members(master) == []
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/", timeout=2)
    # started again on the same prefix and ports, it serves; SIGTERM stops it with 0
    again = _gateway(prefix, ports)
    try:
        master = _nginx_master(again.pid)
        assert requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code
    finally:
        again.send_signal(signal.SIGTERM)
        out, _ = again.communicate(timeout=30)
    assert again.returncode == 0, out
    assert procs.group_members(master) == []
