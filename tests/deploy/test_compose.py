"""docker-compose.yml as Debian's docker-compose (1.29) reads it — `config` needs no
Docker daemon — and what scaling the gateways relies on; the load balancer's nginx
config; the image built from Debian packages only; the gateway replica's script,
run for real: nginx and the shipper together, one's death ends the replica."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg2
import pytest
import requests
import yaml

from cli_check import parse
from control_plane.runtime import procs
from waiting import eventually

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
LB_CONF = REPO / "deploy" / "compose" / "lb.conf"
GATEWAY_SH = REPO / "deploy" / "compose" / "gateway.sh"


def compose_config(path: Path = COMPOSE) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is not installed: run scripts/setup.sh (Debian docker-compose)"
    # no daemon is needed, nor may one be used: point DOCKER_HOST nowhere
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "COMPOSE_"))}
    env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"
    return subprocess.run([exe, "-f", str(path), "config"], capture_output=True, text=True,
                          env=env, cwd=path.parent, timeout=60)


@pytest.fixture(scope="module")
def config() -> dict:
    res = compose_config()
    assert res.returncode == 0, res.stderr
    return yaml.safe_load(res.stdout)


def test_compose_file_is_valid_and_a_broken_one_is_not(config, tmp_path):
    assert {"postgres", "redis", "migrate", "api", "controller", "gateway", "lb",
            "prometheus", "grafana"} <= set(config["services"])
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("    expose:", "    exposes:", 1))
    res = compose_config(broken)
    assert res.returncode != 0 and "exposes" in res.stderr, res.stderr


def test_gateways_scale_behind_the_load_balancer(config):
    services = config["services"]
    gateway = services["gateway"]
    # a fixed host port or container name would stop `--scale gateway=3`
    assert "ports" not in gateway and "container_name" not in gateway
    assert not any("container_name" in s for s in services.values())
    assert services["lb"]["ports"][0]["published"] in (8000, "8000")
    assert services["lb"]["depends_on"] == {"gateway": {"condition": "service_started"}}
    [mount] = services["lb"]["volumes"]
    assert mount == f"{LB_CONF}:/etc/sluice/lb.conf:ro"
    assert "/etc/sluice/lb.conf" in " ".join(services["lb"]["command"])
    assert services["controller"]["scale"] == 2


def test_gateways_register_themselves(config):
    services = config["services"]
    env = services["gateway"]["environment"]
    assert env["SLUICE_CONTROL_PLANE_URL"] == "http://api:8080"
    assert env["SLUICE_GATEWAY_TOKEN"] and env["SLUICE_INTERNAL_HOST"] == "0.0.0.0"
    assert env["SLUICE_REDIS_URL"] == "redis://redis:6379/0"
    assert services["api"]["environment"]["SLUICE_GATEWAY_TOKEN"] == env["SLUICE_GATEWAY_TOKEN"]
    # nobody keeps a static list: replicas come and go
    assert not any("SLUICE_GATEWAYS" in s.get("environment", {}) for s in services.values())
    assert services["gateway"]["command"] == ["/opt/sluice/deploy/compose/gateway.sh"]
    assert "COPY deploy/compose/gateway.sh ./deploy/compose/gateway.sh" in \
        (REPO / "deploy" / "Dockerfile").read_text()


def test_load_balancer_config(config, tmp_path):
    text = LB_CONF.read_text()
    # Docker's DNS, re-resolved at run time through a variable: every replica
    assert re.search(r"^\s*resolver 127\.0\.0\.11 valid=\d+s", text, re.M)
    assert re.search(r"set \$gateways gateway;\s*proxy_pass http://\$gateways:8000;", text)
    assert "proxy_next_upstream error timeout non_idempotent;" in text
    # the service's own command, on this machine's nginx, with -t
    shell, flag, command = config["services"]["lb"]["command"]
    command = (command.replace("/etc/sluice/lb.conf", str(LB_CONF))
               .replace("/tmp/lb", str(tmp_path / "lb")) + " -t")
    res = subprocess.run([shell, flag, command], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and "test is successful" in res.stderr, res.stderr


def test_image_builds_from_debian_packages_only():
    lines = [ln.strip() for ln in (REPO / "deploy" / "Dockerfile").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert [ln for ln in lines if ln.startswith("FROM ")] == ["FROM debian:12"]
    run = " ".join(ln for ln in lines if not ln.startswith(("FROM", "COPY", "WORKDIR", "ENV",
                                                              "USER", "EXPOSE")))
    assert "scripts/setup.sh" in run
    assert not re.search(r"\b(curl|wget|add-apt-repository|pip install)\b", run), run
    assert "USER 10001:10001" in lines


def test_gateway_replica_runs_nginx_and_shipper_and_ends_with_either(db_url):
    """deploy/compose/gateway.sh as a container runs it: the gateway answers, its
    access log reaches Postgres through the shipper beside it, and when nginx dies
    the script stops the shipper and exits non-zero (compose then restarts it)."""
    top = Path(tempfile.mkdtemp(prefix="sluice-replica-"))
    top.chmod(0o755)
    port, internal = procs.free_ports(2)
    token = "replica-token-0123456789"
    env = dict(os.environ, DATABASE_URL=db_url, SLUICE_GATEWAY_TOKEN=token,
               SLUICE_GATEWAY_PREFIX=str(top / "gw"), SLUICE_GATEWAY_NAME="replica-1",
               SLUICE_GATEWAY_HOST="127.0.0.1", SLUICE_GATEWAY_PORT=str(port),
               SLUICE_INTERNAL_PORT=str(internal), SLUICE_SHIP_INTERVAL="0.2",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = procs.spawn([str(GATEWAY_SH), "--workers", "1"], log=top / "replica.log", env=env)
    try:
        procs.wait_http(f"http://127.0.0.1:{internal}/internal/snapshot", proc=proc)
        for _ in range(3):   # no snapshot yet: 503s, logged all the same
            requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)

        def shipped():
            with psycopg2.connect(db_url) as conn, conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM inference_logs WHERE gateway = 'replica-1'")
                return cur.fetchone()[0] >= 3
        eventually(shipped, timeout=30, message="the replica's access log in Postgres")

        nginx_master = int((top / "gw" / "logs" / "nginx.pid").read_text())
        os.kill(nginx_master, signal.SIGTERM)   # nginx ends, workers with it
        rc = proc.wait(30)
        log = (top / "replica.log").read_text()
        assert rc != 0, log
        assert "stopping the replica" in log, log
        children = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True,
                                  text=True).stdout.split()
        assert children == [], f"left running: {children}\n{log}"
    finally:
        procs.stop(proc)
        shutil.rmtree(top, ignore_errors=True)


def test_every_sluice_command_parses(config, monkeypatch):
    """The services' `sluice` commands, and those gateway.sh runs, parse with the CLI
    (demo-backend has a parser of its own and is left out)."""
    commands = [s["command"] for s in config["services"].values()
                if s.get("command", [None])[0] == "sluice" and s["command"][1] != "demo-backend"]
    script = GATEWAY_SH.read_text()
    assert 'sluice gateway --prefix "$prefix" "$@" &' in script
    assert re.search(r'^SLUICE_ACCESS_LOGS="\$name=\$prefix/logs/access.log" sluice shipper &$',
                     script, re.M)
    commands += [["sluice", "gateway", "--prefix", "/var/lib/sluice/gateway"],
                 ["sluice", "shipper"]]
    handlers = {parse(monkeypatch, cmd[1:]) for cmd in commands}
    assert handlers == {"_migrate", "_api", "_controller", "_gateway", "_shipper", "_worker"}
