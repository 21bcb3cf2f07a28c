"""Render deploy/kubernetes/ kustomizations in Python, for the tests.

Neither `kubectl` nor `kustomize` is a Debian package, so the tests render the
kustomizations themselves. Only what deploy/kubernetes/ uses is supported, and
anything else is refused rather than ignored: `resources` (files, or folders with a
kustomization), `namespace`, `images` (newName/newTag) and `patches` with a `path` to
a strategic-merge patch, merged the way Kubernetes merges these lists (containers,
env, volumes by name; volumeMounts by mountPath; ports by port number).
"""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "images", "patches"}
# the kinds of deploy/kubernetes/ that take no namespace
CLUSTER_SCOPED = {"Namespace"}
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath"}


class KustomizeError(ValueError):
    pass


def load_documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def build(folder: Path) -> list[dict]:
    """The resources `folder`'s kustomization.yaml renders to."""
    k = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(k) - SUPPORTED
    if unknown:
        raise KustomizeError(f"{folder}: fields this renderer does not know: {sorted(unknown)}")
    docs: list[dict] = []
    for entry in k.get("resources", []):
        path = (folder / entry).resolve()
        docs += build(path) if path.is_dir() else load_documents(path)
    for patch in k.get("patches", []):
        if set(patch) != {"path"}:
            raise KustomizeError(f"{folder}: only `patches: - path: FILE` is supported")
        for p in load_documents(folder / patch["path"]):
            i = _target(docs, p, folder / patch["path"])
            docs[i] = merge(docs[i], p)
    if "namespace" in k:
        for d in docs:
            if d["kind"] not in CLUSTER_SCOPED:
                d.setdefault("metadata", {})["namespace"] = k["namespace"]
    for image in k.get("images", []):
        _set_image(docs, image)
    return docs


def _target(docs: list[dict], patch: dict, where: Path) -> int:
    meta = patch.get("metadata", {})
    found = [i for i, d in enumerate(docs)
             if d["kind"] == patch["kind"] and d["metadata"]["name"] == meta.get("name")
             and meta.get("namespace") in (None, d["metadata"].get("namespace"))]
    if len(found) != 1:
        raise KustomizeError(f"{where}: patch matches {len(found)} resources, not one")
    return found[0]


def merge(base, patch):
    """Strategic merge of `patch` into `base` (neither is modified)."""
    if not (isinstance(base, dict) and isinstance(patch, dict)):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif key in out and isinstance(out[key], list) and isinstance(value, list):
            out[key] = _merge_list(key, out[key], value)
        elif key in out:
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(key: str, base: list, patch: list) -> list:
    if key == "ports" and all(isinstance(x, dict) for x in base + patch):
        mk = "containerPort" if any("containerPort" in x for x in base + patch) else "port"
    elif key in MERGE_KEYS:
        mk = MERGE_KEYS[key]
    else:
        return copy.deepcopy(patch)   # a plain list is replaced
    out = copy.deepcopy(base)
    for item in patch:
        same = [i for i, x in enumerate(out) if x.get(mk) == item.get(mk)]
        if same:
            out[same[0]] = merge(out[same[0]], item)
        else:
            out.append(copy.deepcopy(item))
    return out


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


def _set_image(docs: list[dict], image: dict) -> None:
    for d in docs:
        for c in containers(d):
            name, _, tag = c["image"].partition(":")
            if name != image["name"]:
                continue
            c["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag or 'latest')}"
