"""deploy/kubernetes against the code: each check passes on the manifests as they are, and fails,
naming the problem, on a copy broken the way it is there to catch."""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Callable

import pytest
import yaml

from tests.support.deploy import checks_cli, checks_keda, checks_pods
from tests.support.deploy.manifests import Doc, Manifests, label, load, pod_spec

Check = Callable[[Manifests], list[str]]
CHECKS: list[Check] = [
    checks_cli.check_kustomization,
    checks_cli.check_image,
    checks_cli.check_commands,
    checks_cli.check_env_read,
    checks_cli.check_kafka_settings,
    checks_keda.check_trigger_parameters,
    checks_keda.check_scaled_objects,
    checks_pods.check_gpu,
    checks_pods.check_metrics,
    checks_pods.check_security,
    checks_pods.check_image_user,
    checks_pods.check_disruption_budgets,
    checks_pods.check_schedulers,
    checks_pods.check_notifier_secrets,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_manifests_pass(check: Check) -> None:
    assert check(load()) == []


def doc(m: Manifests, kind: str, name: str) -> Doc:
    found = m.named(kind, name)
    assert found is not None, f"{kind}/{name}"
    return found


def workload(m: Manifests, name: str) -> Doc:
    found = m.named("Deployment", name) or m.named("StatefulSet", name)
    assert found is not None
    return found


def container(m: Manifests, name: str) -> Doc:
    spec: Doc = pod_spec(workload(m, name))["containers"][0]
    return spec


def set_env(m: Manifests, name: str, var: str, value: str) -> None:
    env = container(m, name).setdefault("env", [])
    env[:] = [v for v in env if v["name"] != var] + [{"name": var, "value": value}]


def trigger(m: Manifests) -> dict[str, str]:
    metadata: dict[str, str] = doc(m, "ScaledObject", "nearline-gpu-minilm")["spec"]["triggers"][0]["metadata"]
    return metadata


def kafka_config(m: Manifests) -> dict[str, str]:
    data: dict[str, str] = doc(m, "ConfigMap", "nearline-kafka")["data"]
    return data


def drop_resource(m: Manifests, name: str) -> None:
    m.kustomization["resources"].remove(name)
    del m.files[name]


GPU, PRE, SCHED = "nearline-gpu-minilm", "nearline-preprocess", "nearline-scheduler"
NOTIFIER = "nearline-notifier"

# (what breaks, how, the check that must catch it, a phrase its problem contains)
BREAKAGES: list[tuple[str, Callable[[Manifests], object], Check, str]] = [
    ("a file left out", lambda m: drop_resource(m, "storage.yaml"), checks_cli.check_kustomization, "storage.yaml"),
    ("a kustomize patch", lambda m: m.kustomization.update(patches=[]), checks_cli.check_kustomization, "patches"),
    (
        "a tagged image",
        lambda m: container(m, GPU).update(image="nearline:dev"),
        checks_cli.check_image,
        "nearline:dev",
    ),
    (
        "a command typo",
        lambda m: container(m, GPU).update(args=["worker", "gpus"]),
        checks_cli.check_commands,
        "No such command",
    ),
    ("no --model", lambda m: container(m, GPU).update(args=["worker", "gpu"]), checks_cli.check_commands, "model"),
    ("an unknown option", lambda m: container(m, PRE)["args"].append("--bogus"), checks_cli.check_commands, "--bogus"),
    (
        "a value the option refuses",
        lambda m: set_env(m, GPU, "NEARLINE_WORKER_GPU_MAX_LINGER_MS", "soon"),
        checks_cli.check_commands,
        "soon",
    ),
    ("another program", lambda m: container(m, PRE).update(command=["python"]), checks_cli.check_commands, "python"),
    (
        "a variable no option reads",
        lambda m: set_env(m, SCHED, "NEARLINE_INSTANCE_ID", "x"),
        checks_cli.check_env_read,
        "NEARLINE_INSTANCE_ID",
    ),
    (
        "another command's variable",
        lambda m: set_env(m, SCHED, "NEARLINE_MODEL_REPOSITORY", "/models"),
        checks_cli.check_env_read,
        "NEARLINE_MODEL_REPOSITORY",
    ),
    (
        "a librdkafka property typo",
        lambda m: kafka_config(m).update(NEARLINE_KAFKA_SASL_MECHANISMZ="PLAIN"),
        checks_cli.check_kafka_settings,
        "sasl.mechanismz",
    ),
    (
        "security faust cannot apply",
        lambda m: kafka_config(m).update(NEARLINE_KAFKA_SASL_MECHANISM="OAUTHBEARER"),
        checks_cli.check_kafka_settings,
        "preprocess",
    ),
    (
        "a parameter typo",
        lambda m: trigger(m).update(lagThresold="5"),
        checks_keda.check_trigger_parameters,
        "lagThresold",
    ),
    (
        "a bad enum",
        lambda m: trigger(m).update(offsetResetPolicy="oldest"),
        checks_keda.check_trigger_parameters,
        "oldest",
    ),
    ("a bad integer", lambda m: trigger(m).update(lagThreshold="10k"), checks_keda.check_trigger_parameters, "10k"),
    ("no group", lambda m: trigger(m).pop("consumerGroup"), checks_keda.check_trigger_parameters, "consumerGroup"),
    (
        "another group",
        lambda m: trigger(m).update(consumerGroup="gpu-minilm"),
        checks_keda.check_scaled_objects,
        "gpu-minilm",
    ),
    (
        "another topic",
        lambda m: trigger(m).update(topic="tensors.MiniLM"),
        checks_keda.check_scaled_objects,
        "tensors.MiniLM",
    ),
    (
        "a topic namespace",
        lambda m: kafka_config(m).update(NEARLINE_NAMESPACE="prod"),
        checks_keda.check_scaled_objects,
        "prod.gpu.minilm",
    ),
    (
        "another model",
        lambda m: container(m, GPU).update(args=["worker", "gpu", "--model", "efficientnet-lite0"]),
        checks_keda.check_scaled_objects,
        "gpu.efficientnet-lite0",
    ),
    (
        "more replicas than partitions",
        lambda m: doc(m, "ScaledObject", GPU)["spec"].update(maxReplicaCount=8),
        checks_keda.check_scaled_objects,
        "maxReplicaCount 8",
    ),
    (
        "idle consumers",
        lambda m: trigger(m).update(allowIdleConsumers="true"),
        checks_keda.check_scaled_objects,
        "allowIdle",
    ),
    (
        "replicas beside KEDA",
        lambda m: workload(m, GPU)["spec"].update(replicas=2),
        checks_keda.check_scaled_objects,
        "replicas",
    ),
    ("no TLS", lambda m: trigger(m).update(tls="disable"), checks_keda.check_scaled_objects, "SASL_SSL"),
    (
        "another mechanism",
        lambda m: kafka_config(m).update(NEARLINE_KAFKA_SASL_MECHANISM="SCRAM-SHA-256"),
        checks_keda.check_scaled_objects,
        "scram_sha256",
    ),
    (
        "another secret",
        lambda m: doc(m, "TriggerAuthentication", "nearline-kafka")["spec"]["secretTargetRef"][1].update(name="kafka"),
        checks_keda.check_scaled_objects,
        "password",
    ),
    (
        "servers from a variable the worker lacks",
        lambda m: trigger(m).update(bootstrapServersFromEnv="KAFKA_BROKERS"),
        checks_keda.check_scaled_objects,
        "KAFKA_BROKERS",
    ),
    (
        "no GPU",
        lambda m: container(m, GPU)["resources"]["limits"].pop("nvidia.com/gpu"),
        checks_pods.check_gpu,
        "nvidia.com/gpu",
    ),
    (
        "a GPU for preprocessing",
        lambda m: container(m, PRE)["resources"]["limits"].update({"nvidia.com/gpu": 1}),
        checks_pods.check_gpu,
        "does not use one",
    ),
    (
        "another metrics port",
        lambda m: set_env(m, PRE, "NEARLINE_METRICS_PORT", "9465"),
        checks_pods.check_metrics,
        "9465",
    ),
    (
        "an annotation elsewhere",
        lambda m: workload(m, SCHED)["spec"]["template"]["metadata"]["annotations"].update(
            {"prometheus.io/port": "8080"}
        ),
        checks_pods.check_metrics,
        "8080",
    ),
    (
        "a probe on a port nothing serves",
        lambda m: container(m, GPU)["readinessProbe"].update(httpGet={"path": "/health", "port": 8080}),
        checks_pods.check_metrics,
        "readinessProbe",
    ),
    (
        "root",
        lambda m: pod_spec(workload(m, SCHED))["securityContext"].pop("runAsNonRoot"),
        checks_pods.check_security,
        "root",
    ),
    (
        "a writable root",
        lambda m: container(m, GPU)["securityContext"].update(readOnlyRootFilesystem=False),
        checks_pods.check_security,
        "writable",
    ),
    (
        "no writable /tmp",
        lambda m: container(m, PRE).update(
            volumeMounts=[v for v in container(m, PRE)["volumeMounts"] if v["name"] != "tmp"]
        ),
        checks_pods.check_security,
        "TMPDIR",
    ),
    (
        "models off the volume",
        lambda m: doc(m, "ConfigMap", "nearline-models")["data"].update(NEARLINE_MODEL_REPOSITORY="/srv/models"),
        checks_pods.check_security,
        "/srv/models",
    ),
    (
        "another user than the image's",
        lambda m: pod_spec(workload(m, PRE))["securityContext"].update(runAsUser=1000),
        checks_pods.check_image_user,
        "1000:10001",
    ),
    (
        "no writable home for TensorRT",
        lambda m: container(m, GPU).update(
            volumeMounts=[v for v in container(m, GPU)["volumeMounts"] if v["name"] != "home"]
        ),
        checks_pods.check_image_user,
        "/home/nearline/.cache/nearline/tensorrt",
    ),
    (
        "no budget for the GPU workers",
        lambda m: m.files["gpu-minilm.yaml"].pop(),
        checks_pods.check_disruption_budgets,
        "Deployment/nearline-gpu-minilm",
    ),
    (
        "a budget that blocks drains",
        lambda m: doc(m, "PodDisruptionBudget", PRE)["spec"].update(maxUnavailable=None, minAvailable=1),
        checks_pods.check_disruption_budgets,
        "maxUnavailable",
    ),
    (
        "schedulers renamed on replacement",
        lambda m: workload(m, SCHED).update(kind="Deployment"),
        checks_pods.check_schedulers,
        "StatefulSet",
    ),
    (
        "one instance id for both",
        lambda m: set_env(m, SCHED, "NEARLINE_WORKER_SCHEDULER_INSTANCE_ID", "scheduler"),
        checks_pods.check_schedulers,
        "instance-id",
    ),
    (
        "unsigned webhooks",
        lambda m: container(m, NOTIFIER).update(
            env=[v for v in container(m, NOTIFIER)["env"] if "SIGNING" not in v["name"]]
        ),
        checks_pods.check_notifier_secrets,
        "is not from a Secret",
    ),
    (
        "a signing secret in the manifest",
        lambda m: set_env(m, NOTIFIER, "NEARLINE_WORKER_NOTIFIER_SIGNING_SECRET", "whsec_c2VjcmV0c2VjcmV0c2VjcmV0"),
        checks_pods.check_notifier_secrets,
        "written in the manifest",
    ),
]


@pytest.mark.parametrize(("breakage", "check", "phrase"), [b[1:] for b in BREAKAGES], ids=[b[0] for b in BREAKAGES])
def test_each_check_catches_its_breakage(breakage: Callable[[Manifests], object], check: Check, phrase: str) -> None:
    broken = copy.deepcopy(load())
    breakage(broken)
    problems = check(broken)
    assert any(phrase in p for p in problems), problems


@pytest.mark.process
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_renders_what_the_tests_read() -> None:
    """`kubectl kustomize` (offline) renders the same resources, in the namespace, with the image mapped."""
    m = load()
    out = subprocess.run(
        ["kubectl", "kustomize", str(m.directory)], capture_output=True, text=True, check=True, timeout=60
    )
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted(map(label, rendered)) == sorted(map(label, m.docs))
    image = m.kustomization["images"][0]
    images = {
        c["image"] for d in rendered if d["kind"] in ("Deployment", "StatefulSet") for c in pod_spec(d)["containers"]
    }
    assert images == {f"{image['newName']}:{image['newTag']}"}
    namespaced = [d for d in rendered if d["kind"] != "Namespace"]
    assert {d["metadata"].get("namespace") for d in namespaced} == {m.kustomization["namespace"]}
