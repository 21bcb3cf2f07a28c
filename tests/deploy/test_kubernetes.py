"""deploy/kubernetes/: every manifest, the base and the production overlay as rendered
by `kubectl kustomize` (kubectl v1.35 under .tools/, which scripts/setup.sh installs),
valid against the Kubernetes schemas of a current version, offline (kubernetes-validate
ships them); and what an operator relies on: probes, replicas,
requests and limits, non-root pods, secrets and settings that exist."""
from __future__ import annotations

import copy
import functools
import json
import re
import socket
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv

from cli_check import parse
from control_plane.settings import VARIABLES as _VARIABLES

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
KUBECTL = REPO / ".tools" / "bin" / "kubectl"
KUBECTL_MINOR = "v1.35."
# the oldest version still supported upstream as we write this, and the newest the
# installed kubernetes-validate knows
VERSIONS = ["1.31.0", kv.latest_version()]
# read by the processes, though not through Settings
OTHER_SETTINGS = {"SLUICE_LOG_LEVEL"}


@pytest.fixture
def offline(monkeypatch):
    """No network while validating: the schemas must come with the package."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access during validation: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@functools.cache
def kubectl() -> str:
    """kubectl of the version scripts/setup-kubectl.sh pins; fails loudly without it."""
    assert KUBECTL.exists(), \
        f"{KUBECTL} is missing: run scripts/setup.sh (or scripts/setup-kubectl.sh)"
    out = subprocess.run([str(KUBECTL), "version", "--client", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    version = json.loads(out)["clientVersion"]["gitVersion"]
    assert version.startswith(KUBECTL_MINOR), f"{KUBECTL} is {version}, not {KUBECTL_MINOR}x"
    return str(KUBECTL)


@functools.cache
def _kustomize(name: str) -> tuple[dict, ...]:
    run = subprocess.run([kubectl(), "kustomize", str(K8S / name)],
                         capture_output=True, text=True)
    assert run.returncode == 0, f"kubectl kustomize {name} failed: {run.stderr}"
    return tuple(d for d in yaml.safe_load_all(run.stdout) if d)


def rendered(name: str) -> list[dict]:
    """The resources `kubectl kustomize deploy/kubernetes/<name>` renders (a fresh copy)."""
    return copy.deepcopy(list(_kustomize(name)))


def load_documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def pod_spec(doc: dict) -> dict | None:
    """The pod template's spec of a workload, None for other kinds."""
    if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return doc["spec"]["template"]["spec"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def containers(doc: dict) -> list[dict]:
    spec = pod_spec(doc) or {}
    return spec.get("initContainers", []) + spec.get("containers", [])


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def validate(doc: dict, version: str) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kv.ValidationError as exc:
        raise AssertionError(f"{doc['kind']}/{doc['metadata']['name']} is not valid for "
                             f"Kubernetes {version}: {exc.caught.message} at "
                             f"{'/'.join(map(str, exc.caught.absolute_path))}") from None


def test_schemas_of_a_current_version_are_installed():
    versions = kv.all_versions()
    assert "1.31.0" in versions and kv.major_minor(kv.latest_version()) >= "1.31", versions


BASE_FILES = sorted(p for p in (K8S / "base").glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("path", BASE_FILES, ids=lambda p: p.name)
def test_every_base_manifest_is_valid(path, offline):
    docs = load_documents(path)
    assert docs, f"{path} holds no resource"
    for doc in docs:
        for version in VERSIONS:
            validate(doc, version)


def test_every_file_is_in_a_kustomization():
    """A manifest left out of kustomization.yaml is never applied."""
    for folder in (K8S / "base", K8S / "overlays" / "production"):
        k = yaml.safe_load((folder / "kustomization.yaml").read_text())
        listed = set(k.get("resources", [])) | {p["path"] for p in k.get("patches", [])}
        files = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
        assert files <= listed, f"{folder}: not in kustomization.yaml: {files - listed}"


@pytest.mark.parametrize("name", ["base", "overlays/production"])
def test_rendered_kustomization_is_valid(name, offline):
    docs = rendered(name)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "Secret", "ConfigMap", "HorizontalPodAutoscaler",
            "PodDisruptionBudget", "Job", "NetworkPolicy"} <= kinds, kinds
    for doc in docs:
        for version in VERSIONS:
            validate(doc, version)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "sluice", doc["metadata"]


@pytest.mark.parametrize("name", ["base", "overlays/production"])
def test_every_container_has_requests_limits_and_runs_unprivileged(name):
    workloads = [d for d in rendered(name) if pod_spec(d) is not None]
    assert len(workloads) == 5, [d["metadata"]["name"] for d in workloads]
    for doc in workloads:
        pod = pod_spec(doc)
        assert pod["securityContext"]["runAsNonRoot"] is True, doc["metadata"]["name"]
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for c in containers(doc):
            where = f"{doc['metadata']['name']}/{c['name']}"
            for part in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"].get(part, {})), (where, part)
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert c["image"].startswith(("sluice:", "registry.example.com/sluice:")), where


def test_gateway_probes_shipper_sidecar_and_scaling():
    docs = rendered("base")
    gw = by_kind(docs, "Deployment")["sluice-gateway"]
    pod = pod_spec(gw)
    by_name = {c["name"]: c for c in pod["containers"]}
    gateway, shipper = by_name["gateway"], by_name["shipper"]
    assert gateway["command"][:2] == ["sluice", "gateway"]
    ports = {p["name"]: p["containerPort"] for p in gateway["ports"]}
    # liveness and readiness on the public port (a kubelet reaches it; no secrets)
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert ports == {"http": 8000, "internal": 8001}
    env = {e["name"]: e for e in gateway["env"]}
    assert env["SLUICE_GATEWAY_ADVERTISE_URL"]["value"] == "http://$(POD_IP):8001"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert "SLUICE_GATEWAY_TOKEN" in env
    config = by_kind(docs, "ConfigMap")["sluice-settings"]["data"]
    assert config["SLUICE_CONTROL_PLANE_URL"] == "http://sluice-api:8080"
    assert config["SLUICE_INTERNAL_PORT"] == "8001" and config["SLUICE_GATEWAY_PORT"] == "8000"

    # the shipper reads the access log nginx writes, through one emptyDir
    assert shipper["command"] == ["sluice", "shipper"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    logs = "/var/lib/sluice/gateway/logs"
    [gw_mount] = [m for m in gateway["volumeMounts"] if m["mountPath"] == logs]
    [sh_mount] = [m for m in shipper["volumeMounts"] if m["mountPath"] == logs]
    assert gw_mount["name"] == sh_mount["name"] and "emptyDir" in volumes[gw_mount["name"]]
    sh_env = {e["name"]: e for e in shipper["env"]}
    assert sh_env["SLUICE_ACCESS_LOGS"]["value"] == f"$(POD_NAME)={logs}/access.log"
    assert gateway["command"][-1] == "/var/lib/sluice/gateway"   # logs/ under the prefix

    hpa = by_kind(docs, "HorizontalPodAutoscaler")["sluice-gateway"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "sluice-gateway"}
    assert hpa["spec"]["minReplicas"] >= 2
    pdb = by_kind(docs, "PodDisruptionBudget")["sluice-gateway"]
    assert pdb["apiVersion"] == "policy/v1"
    labels = gw["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_controller_pair_and_api():
    docs = rendered("base")
    deployments = by_kind(docs, "Deployment")
    controller = deployments["sluice-controller"]
    assert controller["spec"]["replicas"] == 2
    assert containers(controller)[0]["command"] == ["sluice", "controller"]
    api = containers(deployments["sluice-api"])[0]
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    [job] = by_kind(docs, "Job").values()
    assert containers(job)[0]["command"] == ["sluice", "migrate", "upgrade"]


@pytest.mark.parametrize("name", ["base", "overlays/production"])
def test_services_select_pods_and_name_their_ports(name):
    docs = rendered(name)
    pods = {n: d["spec"]["template"] for n, d in by_kind(docs, "Deployment").items()}
    services = by_kind(docs, "Service")
    assert services["sluice-gateway"]["spec"]["type"] == "LoadBalancer"
    assert services["sluice-gateway-internal"]["spec"]["clusterIP"] == "None"
    assert services["sluice-postgres"]["spec"]["type"] == "ExternalName"
    assert services["sluice-redis"]["spec"]["type"] == "ExternalName"
    for sname, svc in services.items():
        if svc["spec"].get("type") == "ExternalName":
            continue
        selected = [t for t in pods.values()
                    if svc["spec"]["selector"].items() <= t["metadata"]["labels"].items()]
        assert len(selected) == 1, sname
        names = {p["name"] for c in selected[0]["spec"]["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in names, (sname, port)


@pytest.mark.parametrize("name", ["base", "overlays/production"])
def test_referenced_secrets_and_settings_exist(name):
    docs = rendered(name)
    secrets = {n: set(d.get("stringData", {})) | set(d.get("data", {}))
               for n, d in by_kind(docs, "Secret").items()}
    configmaps = {n: d["data"] for n, d in by_kind(docs, "ConfigMap").items()}
    known = set(_VARIABLES) | OTHER_SETTINGS
    for doc in docs:
        for c in containers(doc):
            where = f"{doc['metadata']['name']}/{c['name']}"
            for src in c.get("envFrom", []):
                assert src["configMapRef"]["name"] in configmaps, where
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets.get(ref["name"], ()), (where, ref)
                assert e["name"] in known or e["name"] in ("POD_NAME", "POD_IP") \
                    or not e["name"].startswith("SLUICE_"), (where, e["name"])
        for v in (pod_spec(doc) or {}).get("volumes", []):
            if "secret" in v:
                assert v["secret"]["secretName"] in secrets, v
    for data in configmaps.values():
        assert set(data) <= known, set(data) - known
    # every value is an obvious placeholder: no real secret is ever committed
    for doc in by_kind(docs, "Secret").values():
        for key, value in doc["stringData"].items():
            assert re.search("CHANGE-ME|PLACEHOLDER", value), key


def test_production_overlay():
    docs = rendered("overlays/production")
    gw = by_kind(docs, "Deployment")["sluice-gateway"]
    assert gw["spec"]["replicas"] == 6
    assert by_kind(docs, "HorizontalPodAutoscaler")["sluice-gateway"]["spec"]["minReplicas"] == 6
    gateway = {c["name"]: c for c in pod_spec(gw)["containers"]}["gateway"]
    # the base's settings stay, the overlay's are added
    env = {e["name"]: e.get("value") for e in gateway["env"]}
    assert env["SLUICE_TLS_CERT"] == "/etc/sluice/tls/tls.crt"
    assert env["SLUICE_GATEWAY_TLS_PORT"] == "8443" and "SLUICE_GATEWAY_TOKEN" in env
    mounts = {m["mountPath"]: m["name"] for m in gateway["volumeMounts"]}
    assert mounts["/etc/sluice/tls"] == "tls" and "/var/lib/sluice/gateway/logs" in mounts
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["resources"]["limits"]["cpu"] == "4"
    tls = by_kind(docs, "Secret")["sluice-tls"]
    assert tls["type"] == "kubernetes.io/tls"
    ports = {p["port"]: p["targetPort"] for p in by_kind(docs, "Service")["sluice-gateway"]
             ["spec"]["ports"]}
    assert ports == {80: "http", 443: "https"}
    images = {c["image"] for d in docs for c in containers(d)}
    assert images == {"registry.example.com/sluice:0.1.0"}


@pytest.mark.parametrize("name", ["base", "overlays/production"])
def test_every_command_parses_with_the_sluice_cli(name, monkeypatch):
    commands = {tuple(c["command"]) for d in rendered(name) for c in containers(d)}
    handlers = {parse(monkeypatch, list(cmd[1:])) for cmd in commands}
    assert all(cmd[0] == "sluice" for cmd in commands), commands
    assert handlers == {"_api", "_controller", "_gateway", "_shipper", "_migrate", "_worker"}
