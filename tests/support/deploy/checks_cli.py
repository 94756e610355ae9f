"""What no schema sees, part 1: the kustomization holds what the folder holds and names one image,
and every container runs a real `nearline` command with variables that command reads and Kafka
settings its clients accept. Each check returns its problems, one line each."""

from __future__ import annotations

from confluent_kafka import KafkaException

from kafka_io.clients import make_producer
from kafka_io.errors import SecuritySettingsError
from kafka_io.faust_auth import faust_credentials
from kafka_io.settings import ENV_KAFKA_PREFIX
from tests.support.deploy.cli_commands import PROGRAM, console_script
from tests.support.deploy.manifests import ROOT, Manifests, label
from tests.support.deploy.workers import containers

# The kustomization fields manifests.load() applies; any other (a patch, a generator) would make
# the tests check something other than what `kubectl apply -k` applies.
UNDERSTOOD = {"apiVersion", "kind", "namespace", "resources", "images"}


def check_kustomization(m: Manifests) -> list[str]:
    problems = [
        f"kustomization.yaml uses {k}, which tests/deploy does not apply"
        for k in sorted(set(m.kustomization) - UNDERSTOOD)
    ]
    on_disk = {p.name for p in m.directory.glob("*.yaml")} - {"kustomization.yaml"}
    listed = set(m.kustomization.get("resources", []))
    problems += [
        f"{name} is in {m.directory.relative_to(ROOT)}/ but not a resource of kustomization.yaml"
        for name in sorted(on_disk - listed)
    ]
    problems += [f"kustomization.yaml lists {name}, which does not exist" for name in sorted(listed - on_disk)]
    seen: set[str] = set()
    for doc in m.docs:
        if label(doc) in seen:
            problems.append(f"{label(doc)} is defined twice")
        seen.add(label(doc))
    return problems


def check_image(m: Manifests) -> list[str]:
    """Every container names the one image the kustomization maps, untagged, so its newName and
    newTag are the only place to change it."""
    images = m.kustomization.get("images", [])
    if len(images) != 1:
        return [f"kustomization.yaml should map exactly one image, maps {len(images)}"]
    name = images[0]["name"]
    return [
        f"{label(w)} container {c['name']}: image {c.get('image')!r} is not {name!r}, the name kustomization.yaml maps"
        for w, c in m.containers()
        if c.get("image") != name
    ]


def check_commands(m: Manifests) -> list[str]:
    problems = []
    target = console_script(PROGRAM)
    if target != "jobs.cli:main":
        problems.append(f"pyproject.toml installs {PROGRAM} as {target!r}, not jobs.cli:main")
    for c in containers(m):
        if c.spec.get("command") != [PROGRAM]:
            problems.append(f"{c.where}: command {c.spec.get('command')} is not [{PROGRAM!r}]")
        problems += c.problems
    return problems


def check_env_read(m: Manifests) -> list[str]:
    """Every variable a container sets is one its own command reads: an option's variable, or a
    librdkafka property (NEARLINE_KAFKA_*, read by KafkaSettings.from_env in every command)."""
    problems = []
    for c in containers(m):
        if c.invocation is None:
            continue  # check_commands says why
        read = c.invocation.envvars()
        for name in sorted(c.env):
            if name in read or name.startswith(ENV_KAFKA_PREFIX):
                continue
            problems.append(f"{c.where}: sets {name}, which `{c.path}` does not read")
    return problems


def check_kafka_settings(m: Manifests) -> list[str]:
    """librdkafka accepts every container's NEARLINE_KAFKA_* properties (a producer is made with
    them, as the workers make theirs), and the faust preprocess worker can apply them."""
    problems = []
    for c in containers(m):
        if c.invocation is None:
            continue
        settings = c.kafka_settings()
        try:
            make_producer(settings, log_level=0)  # no log lines about the absent cluster
        except KafkaException as exc:
            problems.append(f"{c.where}: librdkafka refuses {sorted(settings.extra)}: {exc.args[0].str()}")
        except SecuritySettingsError as exc:  # make_producer's words for what librdkafka refused
            problems.append(f"{c.where}: librdkafka refuses {sorted(settings.extra)}: {exc}")
        if c.path == f"{PROGRAM} worker preprocess":
            try:
                faust_credentials(settings.extra)
            except SecuritySettingsError as exc:
                problems.append(f"{c.where}: {exc}")
    return problems
