"""The Grafana dashboard: every panel's query is valid PromQL (promtool) and reads
only metrics that Sluice exports or that docs/contracts.md reserves for telemetry."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from control_plane.controller import cp_metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "sluice.json"
# named in docs/contracts.md for the weights and GPU telemetry work; no data until then
RESERVED = {"sluice_backend_weight", "sluice_gpu_utilization_ratio",
            "sluice_gpu_memory_free_ratio"}
SUFFIXES = ("_bucket", "_sum", "_count")


def exported() -> set[str]:
    names = set()
    for lua in (REPO / "lua" / "sluice").glob("*.lua"):
        names |= set(re.findall(r'register\(\s*"([a-z_:]+)"', lua.read_text()))
    for metric in cp_metrics.REGISTRY.collect():
        names |= {s.name for s in metric.samples} | {metric.name}
    return names


def queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def test_queries_are_valid_promql(tmp_path):
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": q} for i, q in enumerate(queries())]}]}
    path = tmp_path / "rules.json"   # YAML is a superset of JSON
    path.write_text(json.dumps(rules))
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: scripts/setup.sh installs Debian's prometheus"
    res = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_queries_read_known_metrics():
    known = exported() | RESERVED
    for q in queries():
        for name in re.findall(r"\b(sluice_[a-z_]+)", q):
            base = name
            for suffix in SUFFIXES:
                if name.endswith(suffix) and name[:-len(suffix)] in known:
                    base = name[:-len(suffix)]
            assert base in known, f"{name} in {q!r} is not exported by Sluice"


def test_provisioned_by_compose():
    compose = (REPO / "docker-compose.yml").read_text()
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards" in compose
    provider = (REPO / "deploy/grafana/provisioning/dashboards/sluice.yml").read_text()
    assert "path: /var/lib/grafana/dashboards" in provider
    source = (REPO / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    uids = {p["datasource"]["uid"] for p in json.loads(DASHBOARD.read_text())["panels"]}
    assert uids == {"sluice-prometheus"} and "uid: sluice-prometheus" in source
