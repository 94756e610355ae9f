"""deploy/kubernetes as the tests read it: the kustomization's resources, without kustomize or a cluster."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy" / "kubernetes"
WORKLOADS = ("Deployment", "StatefulSet")
# What a container sees for a value Kubernetes fills in: any string will do for a secret; a pod's
# name is what the scheduler StatefulSet's first pod is called.
SECRET_VALUE = "from-a-secret"
POD_FIELDS = {"metadata.name": "nearline-scheduler-0", "metadata.namespace": "nearline"}

Doc = dict[str, Any]


@dataclass
class Manifests:
    directory: Path
    kustomization: Doc
    files: dict[str, list[Doc]]  # resource file -> its documents, in the kustomization's order

    @property
    def docs(self) -> list[Doc]:
        return [doc for docs in self.files.values() for doc in docs]

    def of_kind(self, *kinds: str) -> list[Doc]:
        return [d for d in self.docs if d.get("kind") in kinds]

    def named(self, kind: str, name: str) -> Doc | None:
        return next((d for d in self.of_kind(kind) if d["metadata"]["name"] == name), None)

    def containers(self) -> Iterator[tuple[Doc, Doc]]:
        """(workload, container) for every container of every Deployment and StatefulSet."""
        for workload in self.of_kind(*WORKLOADS):
            spec = pod_spec(workload)
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                yield workload, container


def load(directory: Path = DEPLOY) -> Manifests:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    files = {
        name: [d for d in yaml.safe_load_all((directory / name).read_text(encoding="utf-8")) if d]
        for name in kustomization.get("resources", [])
    }
    return Manifests(directory, kustomization, files)


def pod_spec(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]["template"]["spec"]
    return spec


def label(doc: Doc) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def container_env(manifests: Manifests, container: Doc) -> tuple[dict[str, str], list[str]]:
    """The environment the container starts with (envFrom first, then env, as Kubernetes orders
    them), and a problem for each reference to something the manifests do not hold."""
    env: dict[str, str] = {}
    problems: list[str] = []
    name = container["name"]
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            ref = source["configMapRef"]["name"]
            config_map = manifests.named("ConfigMap", ref)
            if config_map is None:
                problems.append(f"container {name}: envFrom ConfigMap {ref} is not in the kustomization")
            else:
                env.update({source.get("prefix", "") + k: str(v) for k, v in config_map.get("data", {}).items()})
        else:
            problems.append(f"container {name}: envFrom {sorted(source)} is not one the tests resolve")
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        source = var.get("valueFrom", {})
        if "secretKeyRef" in source:
            env[var["name"]] = SECRET_VALUE
        elif "fieldRef" in source and source["fieldRef"]["fieldPath"] in POD_FIELDS:
            env[var["name"]] = POD_FIELDS[source["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            data = (manifests.named("ConfigMap", ref["name"]) or {}).get("data", {})
            if ref["key"] not in data:
                problems.append(f"container {name}: {var['name']} names ConfigMap key {ref['name']}/{ref['key']}")
            env[var["name"]] = str(data.get(ref["key"], ""))
        else:
            problems.append(
                f"container {name}: {var['name']} comes from {sorted(source)}, which the tests do not resolve"
            )
    return env, problems


def secret_ref(container: Doc, env_name: str) -> tuple[str, str] | None:
    """(secret, key) that the container's variable env_name is read from, if it is."""
    for var in container.get("env", []):
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if var["name"] == env_name and ref:
            return ref["name"], ref["key"]
    return None
