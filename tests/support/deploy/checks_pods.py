"""What no schema sees, part 3: pods as the workers need them. GPU workers get a GPU, metrics are
announced where they are served, the non-root read-only containers run as the image's user and
still have the writable folders and the model repository the code uses, drains go one worker at
a time, and schedulers keep their names. Each check returns its problems, one line each."""

from __future__ import annotations

import os
import shlex
from pathlib import Path, PurePosixPath
from unittest import mock

from gpu_consumer.engines.tensorrt_engine import default_cache_dir
from tests.support.deploy.cli_commands import PROGRAM, environment
from tests.support.deploy.manifests import ROOT, Doc, Manifests, label
from tests.support.deploy.workers import Container, containers, running

GPU = "nvidia.com/gpu"
METRICS_ENV = "NEARLINE_METRICS_PORT"


def check_gpu(m: Manifests) -> list[str]:
    problems = []
    for c in containers(m):
        resources = c.spec.get("resources", {})
        limit = resources.get("limits", {}).get(GPU)
        if c.path == f"{PROGRAM} worker gpu":
            if not isinstance(limit, int) or limit < 1:
                problems.append(f"{c.where}: runs the GPU worker without a {GPU} limit (has {limit!r})")
            elif resources.get("requests", {}).get(GPU, limit) != limit:
                problems.append(f"{c.where}: {GPU} request and limit differ")
        elif limit or resources.get("requests", {}).get(GPU):
            problems.append(f"{c.where}: holds a GPU for `{c.path}`, which does not use one")
    return problems


def check_metrics(m: Manifests) -> list[str]:
    """The port named metrics, NEARLINE_METRICS_PORT and the Prometheus annotations agree, and
    probes look at that port: no worker serves anything else."""
    problems = []
    for c in containers(m):
        ports = [p["containerPort"] for p in c.spec.get("ports", []) if p.get("name") == "metrics"]
        if len(ports) != 1:
            problems.append(f"{c.where}: {len(ports)} ports named metrics")
            continue
        port = ports[0]
        if c.env.get(METRICS_ENV) != str(port):
            problems.append(f"{c.where}: {METRICS_ENV} is {c.env.get(METRICS_ENV)!r}, the metrics port is {port}")
        annotations = c.workload["spec"]["template"]["metadata"].get("annotations", {})
        expected = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}
        for key, value in expected.items():
            if annotations.get(key) != value:
                problems.append(f"{label(c.workload)}: pod annotation {key} is {annotations.get(key)!r}, not {value!r}")
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c.spec.get(kind)
            if probe is None:
                continue
            action = probe.get("httpGet") or probe.get("tcpSocket") or {}
            if (
                action.get("port") not in ("metrics", port)
                or probe.get("httpGet", {}).get("path", "/metrics") != "/metrics"
            ):
                problems.append(
                    f"{c.where}: {kind} looks at {action}, and the worker serves nothing but /metrics on {port}"
                )
    return problems


def check_security(m: Manifests) -> list[str]:
    problems = []
    for c in containers(m):
        pod, own = c.pod.get("securityContext", {}), c.spec.get("securityContext", {})
        if not own.get("runAsNonRoot", pod.get("runAsNonRoot")) or own.get("runAsUser", pod.get("runAsUser")) == 0:
            problems.append(f"{c.where}: may run as root")
        if own.get("seccompProfile", pod.get("seccompProfile", {})).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{c.where}: no seccomp profile")
        if own.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{c.where}: allowPrivilegeEscalation is not false")
        if own.get("capabilities", {}).get("drop") != ["ALL"] or own.get("capabilities", {}).get("add"):
            problems.append(f"{c.where}: capabilities are not all dropped")
        if own.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{c.where}: the root filesystem is writable")
        problems += _writable_places(c)
    return problems


def _writable_places(c: Container) -> list[str]:
    """A read-only root still needs $TMPDIR writable (faust's data folder, tempfile), and the
    model repository the command reads must be on a volume, not in the image."""
    problems = []
    tmpdir = c.env.get("TMPDIR", "/tmp")
    if _volume_at(c, tmpdir, writable=True).get("emptyDir") is None:
        problems.append(f"{c.where}: $TMPDIR ({tmpdir}) is not on a writable emptyDir")
    if c.invocation is not None and "model_repository" in c.invocation.params:
        repository = str(c.invocation.params["model_repository"])
        if not repository.startswith("/") or "persistentVolumeClaim" not in _volume_at(c, repository):
            problems.append(f"{c.where}: the model repository {repository} is not on a persistent volume")
    return problems


def _volume_at(c: Container, path: str, writable: bool = False) -> Doc:
    """The volume that holds path in the container ({} if none does, or only read-only)."""
    mounts = [mt for mt in c.spec.get("volumeMounts", []) if PurePosixPath(path).is_relative_to(mt["mountPath"])]
    mount = max(mounts, key=lambda mt: len(mt["mountPath"]), default=None)
    if mount is None or (writable and mount.get("readOnly")):
        return {}
    volume: Doc = next((v for v in c.pod.get("volumes", []) if v["name"] == mount["name"]), {})
    return volume


def dockerfile_runtime(path: Path = ROOT / "Dockerfile") -> tuple[str, dict[str, str]]:
    """USER and ENV of the Dockerfile's last stage: the image the pods run."""
    lines = path.read_text(encoding="utf-8").replace("\\\n", " ").splitlines()
    stage = [line.split(None, 1) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    last = max(i for i, (word, *_) in enumerate(stage) if word.upper() == "FROM")
    user = "root"
    env: dict[str, str] = {}
    for word, *rest in stage[last:]:
        if word.upper() == "USER":
            user = rest[0].strip()
        elif word.upper() == "ENV":
            env.update(dict(part.split("=", 1) for part in shlex.split(rest[0])))
    return user, env


def check_image_user(m: Manifests) -> list[str]:
    """Pods run as the Dockerfile's user, and the GPU worker's TensorRT engine cache (under the
    image's $HOME: gpu_consumer/engines/tensorrt_engine.py) lands on a writable emptyDir."""
    user, image_env = dockerfile_runtime()
    uid, _, gid = user.partition(":")
    problems = []
    for c in containers(m):
        pod, own = c.pod.get("securityContext", {}), c.spec.get("securityContext", {})
        ids = (str(own.get("runAsUser", pod.get("runAsUser"))), str(own.get("runAsGroup", pod.get("runAsGroup"))))
        if ids != (uid, gid or uid):
            problems.append(f"{c.where}: runs as {':'.join(ids)}, the image's user is {user}")
        if c.path == f"{PROGRAM} worker gpu":
            with environment(c.env), mock.patch.dict(os.environ, {"HOME": image_env.get("HOME", "/root")}):
                cache_dir = str(default_cache_dir())
            if _volume_at(c, cache_dir, writable=True).get("emptyDir") is None:
                problems.append(f"{c.where}: the TensorRT engine cache {cache_dir} is not on a writable emptyDir")
    return problems


def check_disruption_budgets(m: Manifests) -> list[str]:
    """Each workload has one PodDisruptionBudget, of maxUnavailable: a minAvailable on a workload
    that may run one replica (KEDA's minimum) would block every node drain."""
    problems = []
    budgets = m.of_kind("PodDisruptionBudget")
    for workload in m.of_kind("Deployment", "StatefulSet"):
        labels = workload["spec"]["template"]["metadata"].get("labels", {})
        covering = [b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        if len(covering) != 1:
            problems.append(f"{label(workload)}: {len(covering)} PodDisruptionBudgets select its pods")
        problems += [f"{label(b)}: no maxUnavailable" for b in covering if not b["spec"].get("maxUnavailable")]
    return problems


def check_schedulers(m: Manifests) -> list[str]:
    """Schedulers fail over by name: each one's --instance-id is its pod's name, which only a
    StatefulSet keeps when a pod is replaced (jobs/scheduling/scheduler.py: a claimed tick is
    finished by the scheduler with the same instance id)."""
    problems = []
    schedulers = running(m, f"{PROGRAM} worker scheduler")
    if not schedulers:
        return ["no container runs `nearline worker scheduler`"]
    for c in schedulers:
        assert c.invocation is not None
        if c.workload["kind"] != "StatefulSet" or c.workload["spec"].get("replicas", 1) < 2:
            problems.append(f"{label(c.workload)}: schedulers should be a StatefulSet of 2 or more to fail over")
        names = c.invocation.envvars("instance_id")
        from_pod_name = [
            v["name"]
            for v in c.spec.get("env", [])
            if v["name"] in names and v.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name"
        ]
        if not from_pod_name:
            problems.append(f"{c.where}: --instance-id ({' or '.join(sorted(names))}) is not the pod's name")
    return problems


def check_notifier_secrets(m: Manifests) -> list[str]:
    """Notifiers sign their POSTs (jobs/notifications/signing.py) with a secret from a Kubernetes
    Secret: --signing-secret's variable from a secretKeyRef, never a value in the manifest or an
    argument, which anyone who may read the manifests or the process list would read."""
    problems = []
    notifiers = running(m, f"{PROGRAM} worker notifier")
    if not notifiers:
        return ["no container runs `nearline worker notifier`"]
    for c in notifiers:
        assert c.invocation is not None
        names = c.invocation.envvars("signing_secrets")
        given = [v for v in c.spec.get("env", []) if v["name"] in names]
        args = [str(a) for a in c.spec.get("args", [])]
        from_file = any(a.startswith("--signing-secret-file") for a in args) or any(
            v["name"] in c.invocation.envvars("signing_secret_file") for v in c.spec.get("env", [])
        )  # a mounted Secret's file
        if any("value" in v for v in given) or any(a.split("=")[0] == "--signing-secret" for a in args):
            problems.append(f"{c.where}: a signing secret written in the manifest; take it from a Secret")
        elif not from_file and not any(v.get("valueFrom", {}).get("secretKeyRef") for v in given):
            problems.append(f"{c.where}: --signing-secret ({' or '.join(sorted(names))}) is not from a Secret")
    return problems
