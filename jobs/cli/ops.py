"""Operating on what is in Kafka: `nearline reprocess`, `replay`, `offsets` and `dlq`."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gpu_consumer import ENGINES
from jobs.cli.options import cluster_options, repository_option
from jobs.cli.validators import require_servers
from jobs.exit_codes import ExitCode
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics


@click.command(name="reprocess")
@click.argument("job_id")
@click.option(
    "--model",
    "-m",
    "model_spec",
    required=True,
    metavar="MODEL[@VERSION]",
    help="The model to re-run, at a version [default: its latest].",
)
@click.option("--engine", type=click.Choice(ENGINES), default="auto")
@cluster_options
@repository_option
def reprocess_cmd(
    job_id: str, model_spec: str, engine: str, bootstrap_servers: str, namespace: str, model_repository: Path
) -> None:
    """Re-run a job's inference from its tensor records with another model version.

    The version must take the same inputs (same tokenizer or image preprocessing): only inference
    is repeated. Its results become the ones `results` reports (the newest version wins).
    """
    from jobs.reprocess import reprocess

    model, _, version = model_spec.partition("@")
    reprocess(
        require_servers(bootstrap_servers),
        Topics(namespace),
        model_repository,
        job_id,
        model,
        version or None,
        engine_kind=engine,
        log=lambda line: click.echo(line, err=True),
    )


# what replay writes is JSON Lines, and a file named otherwise is refused before anything is read
REPLAY_SUFFIXES = (".jsonl", ".ndjson")


@click.command(name="replay")
@click.option("--topic", required=True, help="A topic, without the namespace's prefix (e.g. results, raw.text).")
@click.option("--partition", type=click.IntRange(min=0), default=None, help="One partition [default: all].")
@click.option("--from-offset", type=click.IntRange(min=0), default=None)
@click.option("--from-time", default=None, help="ISO 8601, e.g. 2026-11-29T18:00:00Z.")
@click.option("--to-offset", type=click.IntRange(min=0), default=None, help="Stop before this offset.")
@click.option("--to-time", default=None, help="Stop after the last record at or before this time.")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None, help="- or /dev/stdout: stdout."
)
@cluster_options
def replay_cmd(
    topic: str,
    partition: int | None,
    from_offset: int | None,
    from_time: str | None,
    to_offset: int | None,
    to_time: str | None,
    output: Path | None,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Decode a topic's records from an offset or a time to JSON lines, and stop at the end.

    \b
    Example:
      nearline replay --topic results --from-time 2026-11-29T18:00:00Z -o results.jsonl
    """
    import json

    from jobs.replay import message_json, namespace_hint, replay_messages
    from results.output import names_stdout

    output = None if names_stdout(output) else output  # - and /dev/stdout: standard output, not a file
    if output is not None and output.suffix.lower() not in REPLAY_SUFFIXES:
        # it wrote JSON Lines whatever the name said: a .parquet or .csv that no reader could open
        raise click.BadParameter(
            f"{output.name}: replay writes JSON Lines (one decoded record per line, any topic), so name the "
            f"file .jsonl or .ndjson (a job's results as Parquet or Arrow: nearline results JOB -o out.parquet)",
            param_hint="'--output' / '-o'",
        )
    messages = replay_messages(
        require_servers(bootstrap_servers),
        Topics(namespace).name(topic),
        partition=partition,
        from_offset=from_offset,
        from_time=from_time,
        to_offset=to_offset,
        to_time=to_time,
        hint=namespace_hint(namespace, topic),
    )
    out = output.open("w", encoding="utf-8") if output else sys.stdout
    count = 0
    try:
        for msg in messages:
            out.write(json.dumps(message_json(msg), ensure_ascii=False) + "\n")
            count += 1
    finally:
        if output:
            out.close()
    click.echo(f"{count} records", err=True)


@click.group()
def offsets() -> None:
    """Consumer-group offsets: where a group is, and moving it."""


# --group and --topic are named inside --namespace, as `worker gpu --model m` names its group gpu.m
GROUP_HELP = "A consumer group, without the namespace's prefix (e.g. gpu.minilm, preprocess)."
TOPIC_HELP = "A topic, without the namespace's prefix (e.g. tensors.minilm, raw.text)."


@offsets.command(name="show")
@click.option("--group", required=True, help=GROUP_HELP)
@click.option("--topic", required=True, help=TOPIC_HELP)
@cluster_options
def offsets_show(group: str, topic: str, bootstrap_servers: str, namespace: str) -> None:
    """Committed offset, end and lag per partition."""
    from jobs.replay import namespace_hint, require_group, require_topic
    from kafka_io.offsets import group_offsets

    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    require_topic(settings, topics.name(topic), hint=namespace_hint(namespace, topic))
    require_group(settings, topics.name(group), hint=namespace_hint(namespace, group))
    group, topic = topics.name(group), topics.name(topic)
    rows = group_offsets(settings, group, topic)
    click.echo("partition\tcommitted\tend\tlag")
    for r in rows:
        committed = r.committed if r.committed >= 0 else "-"
        click.echo(f"{r.partition}\t{committed}\t{r.end}\t{r.lag}")
    click.echo(f"total lag {sum(r.lag for r in rows)}", err=True)


@offsets.command(name="reset")
@click.option("--group", required=True, help=GROUP_HELP)
@click.option("--topic", required=True, help=TOPIC_HELP)
@click.option("--to-earliest", "to", flag_value="earliest")
@click.option("--to-latest", "to", flag_value="latest")
@click.option("--to-offset", type=click.IntRange(min=0), default=None)
@click.option("--to-datetime", "to_time", default=None, help="The first record at or after this ISO 8601 time.")
@click.option("--execute", is_flag=True, help="Move the group; without it the moves are only printed.")
@click.option("--dry-run", is_flag=True, help="Print the moves only (what happens without --execute).")
@cluster_options
def offsets_reset(
    group: str,
    topic: str,
    to: str | None,
    to_offset: int | None,
    to_time: str | None,
    execute: bool,
    dry_run: bool,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Move a stopped group to the start, the end, an offset or a time (Kafka refuses while it has
    members). Prints the moves; `--execute` makes them, as kafka-consumer-groups does."""
    from jobs.replay import namespace_hint, require_group, reset_targets
    from kafka_io.errors import KafkaIOError
    from kafka_io.groups import live_groups
    from kafka_io.offsets import active_members_error, group_offsets, reset_group_offsets

    if execute and dry_run:
        raise click.UsageError("--execute and --dry-run contradict each other: give one")
    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    hints = namespace_hint(namespace, topic), namespace_hint(namespace, group)
    group, topic = topics.name(group), topics.name(topic)
    target = reset_targets(settings, topic, to=to, to_offset=to_offset, to_time=to_time, hint=hints[0])
    require_group(settings, group, hint=hints[1])  # a reset of a typo created a new group
    # Asked before the moves are printed: Kafka refuses them all while the group has members, and
    # a list of moves followed by that refusal reads as if they had been made.
    live = bool(live_groups(settings, [group]))
    if live and execute:
        click.echo(f"error: {active_members_error(group)}", err=True)
        raise SystemExit(ExitCode.FAILED)
    current = {r.partition: r.committed for r in group_offsets(settings, group, topic)}
    for p in sorted(target):
        click.echo(f"{topic}/{p}: {current.get(p, -1001) if current.get(p, -1) >= 0 else '-'} -> {target[p]}")
    if not execute:
        why = active_members_error(group) if live else "add --execute to move the group"
        click.echo(f"{'dry run' if dry_run else 'plan only'}: nothing changed; {why}", err=True)
        return
    try:
        reset_group_offsets(settings, group, {(topic, p): o for p, o in target.items()})
    except KafkaIOError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(ExitCode.FAILED) from None
    click.echo(f"group {group} reset on {topic}", err=True)


@click.group()
def dlq() -> None:
    """The dead-letter topic: records a stage could not process, with the reason."""


def _dlq_filters(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--stage", type=click.Choice(["preprocess", "inference"]), default=None)(f)
    f = click.option("--job", "job_id", default=None, help="Only this job's dead letters.")(f)
    return cluster_options(f)


def _known_job(settings: KafkaSettings, topics: Topics, job_id: str | None, found: list[Any]) -> None:
    """Exit 1 for a --job that names no job and has no dead letter: "0 dead letters" read as if
    the job existed and had none."""
    from jobs.registry import load_jobs

    if job_id is None or found or job_id in load_jobs(settings, topics):
        return
    click.echo(f"error: no job {job_id} in {topics.jobs} and no dead letter of it (nearline jobs list)", err=True)
    raise SystemExit(ExitCode.FAILED)


@dlq.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array, an object per dead letter.")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Every dead letter, with its status: outstanding, replayed (put back, no outcome yet), superseded "
    "(its record failed again later) or resolved (its record has a result) [default: the outstanding ones only].",
)
@_dlq_filters
def dlq_list(
    as_json: bool, show_all: bool, job_id: str | None, stage: str | None, bootstrap_servers: str, namespace: str
) -> None:
    """One line per outstanding dead letter: id (PARTITION:OFFSET), stage, error, job and record.

    Outstanding: the latest dead letter of a record that has no result yet, what `dlq replay` takes."""
    import json

    from jobs.dlq import OUTSTANDING, entries, select
    from jobs.printable import shown

    settings = require_servers(bootstrap_servers)
    every = entries(settings, Topics(namespace), job_id=job_id)
    _known_job(settings, Topics(namespace), job_id, every)
    chosen = select(every, job_id=job_id, stage=stage, status=None if show_all else OUTSTANDING)
    # oldest first, the same every time: in topic order the partitions came interleaved as read
    chosen.sort(key=lambda e: (e.letter.failed_at, e.partition, e.offset))
    if as_json:
        click.echo(json.dumps([e.summary() for e in chosen], indent=2))
    else:
        for e in chosen:
            d = e.letter
            status = f"{e.status}\t" if show_all else ""
            # ids and errors come from any producer: escaped, so they cannot rewrite the terminal
            texts = "\t".join(shown(text or "") for text in (d.job_id, d.record_id, d.error[:100]))
            click.echo(f"{e.id}\t{status}{d.stage}\t{d.error_type}\t{texts}")
    outstanding = sum(e.status == OUTSTANDING for e in chosen)
    click.echo(f"{len(chosen)} dead letters" + (f", {outstanding} outstanding" if show_all else ""), err=True)


_DIGITS = re.compile(r"[0-9]+")  # no sign, no "1.5", no "²" (a digit to str.isdigit, not to int)


def _letter_ids(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """Each id as PARTITION:OFFSET, two whole numbers (01:7 is 1:7); anything else is a usage
    error (exit 2): `dlq show abc` said "no dead letter at abc" and exited 1, as if it had looked."""
    ids = []
    for text in value:
        partition, colon, offset = text.strip().partition(":")
        if not (colon and _DIGITS.fullmatch(partition) and _DIGITS.fullmatch(offset)):
            raise click.BadParameter(
                f"{text!r} is not a dead letter id: PARTITION:OFFSET, e.g. 2:17 (nearline dlq list shows them)"
            )
        ids.append(f"{int(partition)}:{int(offset)}")
    return tuple(ids)


@dlq.command(name="show")
@click.argument("ids", nargs=-1, required=True, metavar="PARTITION:OFFSET...", callback=_letter_ids)
@cluster_options
def dlq_show(ids: tuple[str, ...], bootstrap_servers: str, namespace: str) -> None:
    """Everything about some dead letters, the payload included (base64): JSON Lines, one object
    per dead letter, so a large payload streams instead of being held in one array."""
    import json

    from jobs.dlq import letters, select

    chosen = select(letters(require_servers(bootstrap_servers), Topics(namespace)), ids=ids, status=None)
    for e in chosen:
        click.echo(json.dumps(e.detail()))
    missing = set(ids) - {e.id for e in chosen}
    if missing:
        click.echo(f"error: no dead letter at {', '.join(sorted(missing))}", err=True)
        raise SystemExit(ExitCode.FAILED)


@dlq.command(name="replay")
@click.argument("ids", nargs=-1, metavar="[PARTITION:OFFSET...]", callback=_letter_ids)
@click.option("--force", is_flag=True, help="Replay again letters an earlier replay put back that have no outcome yet.")
@click.option(
    "--wait-s",
    "wait_s",
    type=click.FloatRange(min=0),
    default=60.0,
    metavar="SECONDS",
    help="How long to wait for another `dlq replay` of this dead-letter topic to finish before refusing (exit 1).",
)
@_dlq_filters
def dlq_replay(
    ids: tuple[str, ...],
    force: bool,
    wait_s: float,
    job_id: str | None,
    stage: str | None,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Re-inject outstanding dead letters into the topic they failed on, after a fix.

    Each record that has no result yet is replayed once, from its latest dead letter; a record
    that fails again gets a new one, which the next replay takes. A record replayed again before
    its stage has taken it is skipped (status replayed) unless --force: its results are kept once.

    One replay runs at a time per dead-letter topic: a second one started meanwhile waits for the
    first (up to --wait) and then replays only what is still outstanding."""
    from jobs.dlq_lock import ReplayBusyError, replay_turn

    if not (ids or job_id or stage):
        raise click.UsageError("name dead letters (PARTITION:OFFSET), a --job or a --stage")
    settings = require_servers(bootstrap_servers)
    try:
        with replay_turn(
            settings, Topics(namespace), wait_s=wait_s, on_wait=lambda s: click.echo(s, err=True)
        ) as check:
            _replay_outstanding(settings, Topics(namespace), ids, force, job_id, stage, check)
    except ReplayBusyError as exc:
        click.echo(str(exc), err=True)
        raise SystemExit(ExitCode.FAILED) from None


def _replay_outstanding(
    settings: KafkaSettings,
    topics: Topics,
    ids: tuple[str, ...],
    force: bool,
    job_id: str | None,
    stage: str | None,
    check: Callable[[], None],
) -> None:
    """`dlq replay`'s work, while it holds the dead-letter topic's replay claim."""
    from jobs.dlq import OUTSTANDING, REPLAYED, RESOLVED, SUPERSEDED, entries, replay, select

    every = entries(settings, topics, job_id=job_id)
    _known_job(settings, topics, job_id, every)
    named = select(every, job_id=job_id, stage=stage, ids=ids, status=None)
    missing = set(ids) - {e.id for e in named}
    if missing:  # said before anything is replayed, as `dlq show` says it
        click.echo(f"error: no dead letter at {', '.join(sorted(missing))} that matches", err=True)
        raise SystemExit(ExitCode.FAILED)
    for e in named if ids else ():  # one named that is not the one to replay: say why
        if e.status == RESOLVED:
            click.echo(f"not replayed: {e.id}: its record has a result", err=True)
        elif e.status == SUPERSEDED:
            click.echo(f"not replayed: {e.id}: its record failed again later, at {e.latest}", err=True)
    in_flight = [e for e in named if e.status == REPLAYED and not force]
    for e in in_flight if ids else ():
        click.echo(
            f"not replayed: {e.id}: replayed already, and its record has no outcome yet (--force: again)", err=True
        )
    if in_flight and not ids:
        click.echo(
            f"not replayed: {len(in_flight)} dead letters an earlier replay put back, whose records have no "
            "result or new dead letter yet (--force replays them again)",
            err=True,
        )
    chosen = [e for e in named if e.status == OUTSTANDING or (force and e.status == REPLAYED)]
    cut = [e for e in chosen if e.letter.truncated]
    for e in cut:  # only the start of the record was kept: replaying it would send a corrupt record
        click.echo(
            f"not replayed: {e.id} keeps {len(e.letter.payload):,} of its {e.letter.payload_size:,} bytes "
            f"(sha256 {e.letter.payload_sha256}); submit the original again",
            err=True,
        )
    check()  # the claim still holds: nobody else replays meanwhile
    sent = replay(settings, topics, [e for e in chosen if not e.letter.truncated])
    click.echo(f"replayed {sent} dead letters", err=True)
