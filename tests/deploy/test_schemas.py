"""deploy/kubernetes against the API schemas, offline: the core kinds with kubernetes-validate in
strict mode (an unknown field is an error, as `kubectl apply --validate=strict` makes it), KEDA's
kinds with the OpenAPI schemas of KEDA's own CRDs (tests/deploy/keda/SOURCE.md), made as strict."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.support.deploy.checks_keda import KEDA
from tests.support.deploy.manifests import Doc, label, load

# The oldest Kubernetes the manifests are written for (PodDisruptionBudget's
# unhealthyPodEvictionPolicy is GA from 1.31) and the newest kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.31", "1.37")
CRDS = {"ScaledObject": "keda.sh_scaledobjects.yaml", "TriggerAuthentication": "keda.sh_triggerauthentications.yaml"}

MANIFESTS = load()
CORE = [d for d in MANIFESTS.docs if not d["apiVersion"].startswith("keda.sh/")]
KEDA_DOCS = [d for d in MANIFESTS.docs if d["apiVersion"].startswith("keda.sh/")]


def validate_core(doc: Doc, version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


@cache
def crd_validator(kind: str, version: str) -> jsonschema.Draft7Validator:
    crd = yaml.safe_load((KEDA / CRDS[kind]).read_text(encoding="utf-8"))
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return jsonschema.Draft7Validator(strict(served["schema"]["openAPIV3Schema"]))


def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused: the API server's strict field validation does
    that for structural schemas, which otherwise leave additionalProperties open."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def validate_keda(doc: Doc) -> None:
    group, _, version = doc["apiVersion"].partition("/")
    assert group == "keda.sh" and doc["kind"] in CRDS, f"no vendored CRD for {doc['apiVersion']} {doc['kind']}"
    crd_validator(doc["kind"], version).validate(doc)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("doc", CORE, ids=label)
def test_each_core_resource_is_valid_in_strict_mode(doc: Doc, version: str) -> None:
    validate_core(doc, version)


@pytest.mark.parametrize("doc", KEDA_DOCS, ids=label)
def test_each_keda_resource_is_valid_against_its_crd(doc: Doc) -> None:
    validate_keda(doc)


def test_there_is_a_scaled_object_and_its_authentication() -> None:
    assert sorted(d["kind"] for d in KEDA_DOCS) == ["ScaledObject", "TriggerAuthentication"]


def _first(kind: str) -> Doc:
    return copy.deepcopy(next(d for d in MANIFESTS.docs if d["kind"] == kind))


def test_strict_core_validation_refuses_an_unknown_field() -> None:
    deployment = _first("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePullPolicyy"):
        validate_core(deployment, KUBERNETES_VERSIONS[0])


def test_core_validation_refuses_a_wrong_type() -> None:
    budget = _first("PodDisruptionBudget")
    budget["spec"]["unhealthyPodEvictionPolicy"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(budget, KUBERNETES_VERSIONS[0])


def test_the_crd_schema_refuses_a_misspelt_field() -> None:
    scaled = _first("ScaledObject")
    scaled["spec"]["maxReplicaCnt"] = scaled["spec"].pop("maxReplicaCount")
    with pytest.raises(jsonschema.ValidationError, match="maxReplicaCnt"):
        validate_keda(scaled)


def test_the_crd_schema_refuses_a_wrong_type_and_a_missing_field() -> None:
    scaled = _first("ScaledObject")
    scaled["spec"]["minReplicaCount"] = "1"
    with pytest.raises(jsonschema.ValidationError, match="'1' is not of type 'integer'"):
        validate_keda(scaled)
    auth = _first("TriggerAuthentication")
    del auth["spec"]["secretTargetRef"][0]["key"]
    with pytest.raises(jsonschema.ValidationError, match="'key' is a required property"):
        validate_keda(auth)
