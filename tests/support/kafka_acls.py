"""ACLs as an operator writes them, applied by the test: the `kafka-acls.sh` lines of
docs/deploy.md, read from the page and applied through the Admin API (CreateAcls, what the script
sends; the script itself is not among the broker jars the tests fetch). So the list the page gives
is the list a trial proves sufficient, not a copy of it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kafka_io.clients import make_admin
from kafka_io.settings import KafkaSettings

DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
RESOURCES = {
    "--topic": ResourceType.TOPIC,
    "--group": ResourceType.GROUP,
    "--transactional-id": ResourceType.TRANSACTIONAL_ID,
}


def documented_acl_lines(worker: str, doc: Path = DEPLOY_DOC) -> list[str]:
    """The kafka-acls.sh commands of docs/deploy.md's block for `worker` (its first comment line
    names it: `# preprocess`, `# gpu`, ...), continuation lines joined."""
    text = doc.read_text(encoding="utf-8").replace("\\\n", " ")
    lines, current = [], None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# "):
            current = stripped[2:].split(":")[0].split()[0]
        elif stripped.startswith("kafka-acls.sh") and current == worker:
            lines.append(stripped)
    return lines


def bindings(line: str, variables: dict[str, str]) -> list[AclBinding]:
    """The ACLs one kafka-acls.sh --add line makes, its $VARIABLES replaced from `variables`."""
    expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: variables[m.group(1)], line)
    args = shlex.split(expanded)
    assert "--add" in args, f"not an --add line: {line}"
    principals, operations, hosts = [], [], []
    resources: list[tuple[ResourceType, str]] = []
    pattern = ResourcePatternType.LITERAL
    i = 1
    while i < len(args):
        arg = args[i]
        if arg == "--cluster":
            resources.append((ResourceType.BROKER, "kafka-cluster"))
            i += 1
            continue
        if arg == "--add":
            i += 1
            continue
        value = args[i + 1]
        if arg == "--allow-principal":
            principals.append(value)
        elif arg == "--operation":
            operations.append(AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", value).upper()])  # DescribeConfigs
        elif arg == "--allow-host":
            hosts.append(value)
        elif arg == "--resource-pattern-type":
            pattern = ResourcePatternType[value.upper()]
        elif arg in RESOURCES:
            resources.append((RESOURCES[arg], value))
        elif arg not in ("--bootstrap-server", "--command-config"):
            raise AssertionError(f"{arg}: not an option this reader knows ({line})")
        i += 2
    return [
        AclBinding(kind, name, pattern, principal, host, operation, AclPermissionType.ALLOW)
        for kind, name in resources
        for principal in principals
        for host in hosts or ["*"]
        for operation in operations
    ]


def apply_documented_acls(admin_settings: KafkaSettings, variables: dict[str, str], workers: list[str]) -> int:
    """Apply the documented ACLs of each worker kind, as the admin: how many ACLs were made."""
    lines = [line for worker in workers for line in documented_acl_lines(worker)]
    assert lines, f"docs/deploy.md lists no kafka-acls.sh lines for {workers}"
    return grant_acls(admin_settings, lines, variables)


def grant_acls(admin_settings: KafkaSettings, lines: list[str], variables: dict[str, str]) -> int:
    """Apply kafka-acls.sh --add lines, as the admin: how many ACLs were made."""
    made = [b for line in lines for b in bindings(line, variables)]
    admin: AdminClient = make_admin(admin_settings)
    for future in admin.create_acls(made, request_timeout=30).values():
        future.result(timeout=60)
    return len(made)


def revoke_acls(admin_settings: KafkaSettings, principal: str, resource: ResourceType) -> int:
    """Delete every ACL of `principal` on resources of one type, as the admin: how many were deleted."""
    admin: AdminClient = make_admin(admin_settings)
    # None matches any name and any host (the filter's types say str; the client takes None)
    wanted = AclBindingFilter(
        resource,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        principal,
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    return sum(len(f.result(timeout=60)) for f in admin.delete_acls([wanted], request_timeout=30).values())
