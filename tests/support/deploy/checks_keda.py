"""What no schema sees, part 2: the ScaledObject scales the GPU worker on that worker's own consumer
group and topic, no further than the topic's partitions, with the workers' Kafka security, and
with trigger parameters KEDA's Kafka scaler knows (a trigger's metadata is a free string map in
the CRD). Each check returns its problems, one line each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from jobs.submit import pipeline_topics
from kafka_io.topology import LANES, Topics
from tests.support.deploy.cli_commands import PROGRAM
from tests.support.deploy.manifests import Doc, Manifests, label, secret_ref
from tests.support.deploy.workers import Container, containers

KEDA = Path(__file__).parents[2] / "deploy" / "keda"
# librdkafka's security settings as KEDA's Kafka scaler spells them
SASL = {"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}


@dataclass(frozen=True)
class ScalerParam:
    name: str
    go_type: str
    order: frozenset[str]
    optional: bool
    default: str | None
    enum: tuple[str, ...]


@cache
def kafka_scaler_params() -> dict[str, ScalerParam]:
    """The Kafka scaler's parameters, from the `keda:"..."` tags of its vendored kafkaMetadata struct."""
    source = (KEDA / "kafka_scaler_metadata.go").read_text(encoding="utf-8")
    params = {}
    for go_type, tag in re.findall(r'^\s*\w+\s+(\S+)\s+`keda:"([^"]*)"`', source, re.M):
        parts = dict(p.split("=", 1) if "=" in p else (p, "") for p in tag.split(","))
        enum = tuple(parts["enum"].split(";")) if "enum" in parts else ()
        params[parts["name"]] = ScalerParam(
            parts["name"],
            go_type,
            frozenset(parts["order"].split(";")),
            "optional" in parts,
            parts.get("default"),
            enum,
        )
    return params


def check_trigger_parameters(m: Manifests) -> list[str]:
    problems = []
    params = kafka_scaler_params()
    for so in m.of_kind("ScaledObject"):
        for trigger in so["spec"]["triggers"]:
            if trigger["type"] != "kafka":
                problems.append(f"{label(so)}: a {trigger['type']} trigger, the tests know KEDA's kafka scaler only")
                continue
            metadata = trigger.get("metadata", {})
            for key, value in metadata.items():
                param = params.get(key.removesuffix("FromEnv"))
                from_env = key.endswith("FromEnv")
                if param is None or ("triggerMetadata" if not from_env else "resolvedEnv") not in param.order:
                    problems.append(f"{label(so)}: the kafka scaler has no trigger parameter {key}")
                elif not from_env:
                    problems += [f"{label(so)}: {key}: {p}" for p in _value_problems(param, str(value))]
            for param in params.values():
                required = not param.optional and param.default is None and "triggerMetadata" in param.order
                if required and param.name not in metadata and f"{param.name}FromEnv" not in metadata:
                    problems.append(f"{label(so)}: the kafka scaler needs {param.name}")
    return problems


def _value_problems(param: ScalerParam, value: str) -> list[str]:
    if param.enum and value not in param.enum:
        return [f"{value!r} is not one of {list(param.enum)}"]
    if param.go_type == "bool" and value not in ("true", "false"):
        return [f"{value!r} is not true or false"]
    if param.go_type.startswith("int") and not re.fullmatch(r"-?\d+", value):
        return [f"{value!r} is not an integer"]
    return []


def check_scaled_objects(m: Manifests) -> list[str]:
    problems = []
    for so in m.of_kind("ScaledObject"):
        ref = so["spec"]["scaleTargetRef"]
        target = m.named(ref.get("kind", "Deployment"), ref["name"])
        if target is None:
            problems.append(f"{label(so)}: scales {ref.get('kind', 'Deployment')}/{ref['name']}, which is not defined")
            continue
        if "replicas" in target["spec"]:
            problems.append(f"{label(target)} sets replicas, which every apply would reset under {label(so)}")
        wanted = ref.get("envSourceContainerName")
        owned = [c for c in containers(m) if c.workload is target]
        container = next((c for c in owned if wanted in (None, c.spec["name"])), None)
        if container is None or container.invocation is None:
            problems.append(f"{label(so)}: no container {wanted} in {label(target)} runs a command the CLI accepts")
            continue
        problems += [f"{label(so)}: {p}" for p in _scaling_problems(so, container)]
        problems += [f"{label(so)}: {p}" for p in _security_problems(m, so, container)]
    return problems


def _scaling_problems(so: Doc, c: Container) -> list[str]:
    assert c.invocation is not None
    if c.path != f"{PROGRAM} worker gpu":
        return [f"scales {c.where}, which runs `{c.path}`, not the GPU worker"]
    model, namespace = c.invocation.params["model"], c.invocation.params["namespace"]
    topics = Topics(namespace)
    tensors = topics.tensors(model)
    partitions = {spec.name: spec.partitions for spec in pipeline_topics(topics, model)}[tensors]
    # one trigger per lane: KEDA scales on the larger, so a live backlog adds workers on its own
    lanes = {topics.lane(tensors, p) for p in LANES}
    scaled = {t.get("metadata", {}).get("topic") for t in so["spec"]["triggers"]}
    problems = (
        []
        if scaled == lanes
        else [f"triggers scale on topics {sorted(map(str, scaled))}, not both lanes {sorted(lanes)}"]
    )
    if so["spec"].get("maxReplicaCount") != partitions:
        problems.append(
            f"maxReplicaCount {so['spec'].get('maxReplicaCount')} is not {partitions}, the partitions "
            f"{tensors} is created with: more workers would own no partition"
        )
    for trigger in so["spec"]["triggers"]:
        metadata = trigger.get("metadata", {})
        if metadata.get("consumerGroup") != topics.gpu_group(model):
            problems.append(
                f"consumerGroup {metadata.get('consumerGroup')!r} is not the worker's {topics.gpu_group(model)!r}"
            )
        if metadata.get("topic") not in lanes:
            problems.append(f"topic {metadata.get('topic')!r} is not a lane of the worker's {tensors!r}")
        if metadata.get("allowIdleConsumers") != "false":
            problems.append('allowIdleConsumers must be "false": replicas beyond the partitions would idle on a GPU')
        for key, var in metadata.items():
            if key.endswith("FromEnv") and var not in c.env:
                problems.append(f"{key} names {var}, which {c.where} does not have")
        servers = metadata.get("bootstrapServersFromEnv")
        if servers is not None and servers not in c.invocation.envvars("bootstrap_servers"):
            problems.append(f"bootstrapServersFromEnv names {servers}, not what `{c.path}` reads its servers from")
        if "bootstrapServers" in metadata and metadata["bootstrapServers"] != c.invocation.params["bootstrap_servers"]:
            problems.append("bootstrapServers differs from the worker's")
    return problems


def _security_problems(m: Manifests, so: Doc, c: Container) -> list[str]:
    """The scaler connects as the workers do: TLS and SASL mechanism as their NEARLINE_KAFKA_*
    properties say, credentials from the same Secret keys."""
    extra = {k: str(v) for k, v in c.kafka_settings().extra.items()}
    protocol = extra.get("security.protocol", "PLAINTEXT").upper()
    mechanism = (extra.get("sasl.mechanism") or extra.get("sasl.mechanisms") or "").upper()
    tls = "enable" if protocol in ("SSL", "SASL_SSL") else "disable"
    sasl = SASL.get(mechanism, mechanism.lower()) if protocol.startswith("SASL") else "none"
    problems = []
    for trigger in so["spec"]["triggers"]:
        metadata = trigger.get("metadata", {})
        if metadata.get("tls", "disable") != tls:
            problems.append(
                f"tls is {metadata.get('tls', 'disable')!r}, the workers' security.protocol {protocol} means {tls!r}"
            )
        if metadata.get("sasl", "none") != sasl:
            problems.append(f"sasl is {metadata.get('sasl', 'none')!r}, the workers' settings mean {sasl!r}")
        if sasl == "none":
            continue
        auth_ref = trigger.get("authenticationRef", {})
        auth = m.named(auth_ref.get("kind", "TriggerAuthentication"), auth_ref.get("name", ""))
        if auth is None:
            problems.append(f"SASL without a TriggerAuthentication in the manifests (authenticationRef {auth_ref})")
            continue
        given = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"].get("secretTargetRef", [])}
        for parameter, var in (
            ("username", "NEARLINE_KAFKA_SASL_USERNAME"),
            ("password", "NEARLINE_KAFKA_SASL_PASSWORD"),
        ):
            theirs = secret_ref(c.spec, var)
            if given.get(parameter) != theirs:
                problems.append(
                    f"{label(auth)} takes {parameter} from {given.get(parameter)}, the workers' {var} from {theirs}"
                )
    return problems
