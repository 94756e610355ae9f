"""The `nearline` command line. Every option is also an environment variable (shown in --help)."""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from jobs.exit_codes import ExitCode
from jobs.local import ENV_MODEL_REPOSITORY
from jobs.progress import Progress
from jobs.submit import BacklogRefusedError, InvalidInputError, JobInput, SubmitReport, submit
from kafka_io.errors import BrokerUnavailableError
from kafka_io.settings import ENV_BOOTSTRAP, ENV_NAMESPACE, KafkaSettings, Topics
from producers.images import MAX_IMAGE_BYTES
from schemas.model_config import ModelNotFoundError

HOME = Path.home() / ".nearline"


class NearlineGroup(click.Group):
    """Turns the errors users can cause or fix into one clear line and a distinct exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        from gpu_consumer.engine import EngineLoadError
        from gpu_consumer.export import ExportUnavailableError
        from gpu_consumer.isolation import EngineFault

        try:
            return super().invoke(ctx)
        except InvalidInputError as exc:
            for error in exc.errors[:50]:
                click.echo(f"error: {error}", err=True)
            if len(exc.errors) > 50:
                click.echo(f"... and {len(exc.errors) - 50} more", err=True)
            click.echo(
                f"nothing was submitted: {len(exc.errors)} invalid record(s); fix them or pass --skip-invalid",
                err=True,
            )
            ctx.exit(ExitCode.INVALID_INPUT)
        except (BrokerUnavailableError, ModelNotFoundError, ExportUnavailableError, EngineLoadError) as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(ExitCode.UNAVAILABLE)
        except BacklogRefusedError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(ExitCode.REFUSED)
        except EngineFault as exc:
            click.echo(f"error: the engine failed on everything it was given, so no record was blamed: {exc}", err=True)
            ctx.exit(ExitCode.FAILED)


def cluster_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--bootstrap-servers and --namespace, with the same env var names on every command."""

    @click.option(
        "--bootstrap-servers",
        envvar=ENV_BOOTSTRAP,
        show_envvar=True,
        default="",
        help="Kafka cluster (host:port,...).",
    )
    @click.option(
        "--namespace",
        envvar=ENV_NAMESPACE,
        show_envvar=True,
        default="",
        help="Prefix of every topic and group name, to share a cluster between pipelines.",
    )
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return f(*args, **kwargs)

    return wrapper


def repository_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--model-repository",
        envvar=ENV_MODEL_REPOSITORY,
        show_envvar=True,
        default="models",
        type=click.Path(file_okay=False, path_type=Path),
        help="Folder of models/<name>/<version>/.",
    )(f)


def batch_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--max-linger-ms",
        type=float,
        default=20.0,
        show_default=True,
        show_envvar=True,
        help="Close a poll window this long after its first record, even if not full.",
    )(f)
    f = click.option(
        "--max-queue",
        type=int,
        default=None,
        show_envvar=True,
        help="Records polled per window, sorted by length and cut into batches [default: 8 x max-batch-size].",
    )(f)
    f = click.option(
        "--max-batch-tokens",
        type=int,
        default=None,
        show_envvar=True,
        help="Padded tokens per executed text batch [default: no limit beyond max-batch-size].",
    )(f)
    f = click.option(
        "--max-batch-size",
        type=int,
        default=None,
        show_envvar=True,
        help="Records per executed batch [default: the model's max_batch_size].",
    )(f)
    return f


def batch_args(**options: float | int | None) -> list[str]:
    """The batch options as `nearline worker gpu` arguments, for the workers `run` starts."""
    return [a for name, v in options.items() if v is not None for a in (f"--{name.replace('_', '-')}", str(v))]


def format_option(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--max-image-bytes",
        type=int,
        default=MAX_IMAGE_BYTES,
        envvar="NEARLINE_MAX_IMAGE_BYTES",
        show_envvar=True,
        help="Refuse (at submit, naming the file) any larger image; keep it under the cluster's record limit.",
    )(f)
    f = click.option(
        "--kind",
        type=click.Choice(["auto", "text", "image"]),
        default="auto",
        show_envvar=True,
        help='auto: a folder, an image file or a JSONL of {"image": path} is images; anything else is text.',
    )(f)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["auto", "jsonl", "lines"]),
        default="auto",
        show_default=True,
        show_envvar=True,
        help="Text input: JSON Lines for .jsonl/.ndjson (auto), or one text per line.",
    )(f)


def require_servers(bootstrap_servers: str) -> KafkaSettings:
    if not bootstrap_servers:
        raise BrokerUnavailableError(
            f"no Kafka cluster named: pass --bootstrap-servers or set {ENV_BOOTSTRAP} "
            "(`nearline broker start` runs a local one)"
        )
    return KafkaSettings.from_env(bootstrap_servers)


@click.group(cls=NearlineGroup, context_settings={"auto_envvar_prefix": "NEARLINE", "show_default": True})
@click.option(
    "--log-level",
    default="WARNING",
    show_envvar=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def cli(log_level: str) -> None:
    """nearline: durable near-line batch inference over Kafka."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _progress_printer() -> Callable[[Progress], None]:
    tty = sys.stderr.isatty()
    last = [0.0]

    def show(p: Progress) -> None:
        now = time.monotonic()
        if tty:
            click.echo("\r" + p.line(now).ljust(79), nl=p.done >= p.total, err=True)
        elif now - last[0] >= 5 or p.done >= p.total:
            click.echo(p.line(now), err=True)
            last[0] = now

    return show


@cli.command()
@click.argument("input_path", metavar="INPUT")
@click.option("--model", "-m", required=True, show_envvar=True, help="Model name in the model repository.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write results as JSON Lines here [default: stdout].",
)
@click.option("--job-id", default=None, help="Job id [default: generated].")
@click.option("--skip-invalid", is_flag=True, help="Submit the valid records and list the invalid ones.")
@format_option
@batch_options
@cluster_options
@repository_option
def run(
    input_path: str,
    model: str,
    output: Path | None,
    job_id: str | None,
    skip_invalid: bool,
    fmt: str,
    kind: str,
    max_image_bytes: int,
    max_batch_size: int | None,
    max_batch_tokens: int | None,
    max_queue: int | None,
    max_linger_ms: float,
    bootstrap_servers: str,
    namespace: str,
    model_repository: Path,
) -> None:
    """Run INPUT through the pipeline and write one result per record, in input order.

    With no cluster named, starts the embedded broker and a preprocess and a GPU worker, and
    stops them at the end. With --bootstrap-servers, uses that cluster and its running workers.

    \b
    Example:
      nearline run producers/examples/python-docs-paragraphs.jsonl --model minilm -o results.jsonl
    """
    from jobs.results import write_outcome
    from jobs.runner import run_job

    worker_args = batch_args(
        max_batch_size=max_batch_size,
        max_batch_tokens=max_batch_tokens,
        max_queue=max_queue,
        max_linger_ms=max_linger_ms,
    )
    result = run_job(
        JobInput.open(input_path, fmt, kind, max_image_bytes),  # type: ignore[arg-type]
        model,
        repository=model_repository,
        bootstrap_servers=bootstrap_servers,
        namespace=namespace,
        job_id=job_id,
        skip_invalid=skip_invalid,
        worker_args=tuple(worker_args),
        log=lambda line: click.echo(line, err=True),
        on_progress=_progress_printer(),
    )
    for error in result.report.skipped:
        click.echo(f"skipped: {error}", err=True)
    written = write_outcome(result.outcome, output, sys.stdout)
    click.echo(result.summary.line(), err=True)
    if output:
        click.echo(f"wrote {written} lines to {output}", err=True)
    if result.outcome.dead:
        raise SystemExit(ExitCode.COMPLETED_WITH_ERRORS)


def _submit(
    input_path: str,
    fmt: str,
    kind: str,
    max_image_bytes: int,
    model: str,
    job_id: str | None,
    skip_invalid: bool,
    bootstrap_servers: str,
    namespace: str,
    topic: str | None = None,
    max_backlog: int | None = None,
) -> SubmitReport:
    report = submit(
        require_servers(bootstrap_servers),
        Topics(namespace),
        JobInput.open(input_path, fmt, kind, max_image_bytes),  # type: ignore[arg-type]
        model,
        job_id=job_id,
        skip_invalid=skip_invalid,
        topic=topic,
        max_backlog=max_backlog,
    )
    for error in report.skipped:
        click.echo(f"skipped: {error}", err=True)
    return report


@cli.command(name="submit")
@click.option("--wait", is_flag=True, help="Return when the job completes: exit 0, or 4 if some records dead-lettered.")
@click.option(
    "--max-backlog",
    type=int,
    default=None,
    envvar="NEARLINE_MAX_BACKLOG",
    show_envvar=True,
    help="Refuse (exit 5) a job that would leave more records than this waiting in the pipeline.",
)
@click.argument("input_path", metavar="INPUT")
@click.option("--model", "-m", required=True, show_envvar=True)
@click.option("--job-id", default=None, help="Job id [default: generated]; resubmitting reuses it.")
@click.option("--skip-invalid", is_flag=True, help="Submit the valid records and list the invalid ones.")
@format_option
@cluster_options
def submit_cmd(
    wait: bool,
    max_backlog: int | None,
    input_path: str,
    model: str,
    job_id: str | None,
    skip_invalid: bool,
    fmt: str,
    kind: str,
    max_image_bytes: int,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Submit INPUT as a job to running workers; prints the job id."""
    report = _submit(
        input_path,
        fmt,
        kind,
        max_image_bytes,
        model,
        job_id,
        skip_invalid,
        bootstrap_servers,
        namespace,
        max_backlog=max_backlog,
    )
    click.echo(f"submitted {report.submitted} records", err=True)
    click.echo(report.job_id)
    if wait:
        from jobs.runner import watch_job

        outcome, seconds = watch_job(
            require_servers(bootstrap_servers),
            Topics(namespace),
            report.job_id,
            report.submitted,
            on_progress=_progress_printer(),
        )
        click.echo(f"job {report.job_id} done in {seconds:.1f} s: {len(outcome.dead)} dead-lettered", err=True)
        if outcome.dead:
            raise SystemExit(ExitCode.COMPLETED_WITH_ERRORS)


@cli.group(name="jobs")
def jobs_group() -> None:
    """The job registry (topic jobs)."""


@jobs_group.command(name="list")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def jobs_list(as_json: bool, bootstrap_servers: str, namespace: str) -> None:
    """Every registered job with its state and progress, oldest first."""
    import json

    from jobs.registry import JobStatus, load_jobs
    from kafka_io.reading import read_topics

    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    statuses = {
        j.job_id: JobStatus(j) for j in sorted(load_jobs(settings, topics).values(), key=lambda j: j.submitted_at)
    }
    for msg in read_topics(settings, [topics.results, topics.dead_letters]):
        # results carry a job_id header; dead letters keep their source's job/record key
        header = dict(msg.headers() or []).get("job_id")
        job_id = header if isinstance(header, bytes) else (msg.key() or b"").split(b"/")[0]
        status = statuses.get(job_id.decode())
        if status is not None:
            status.add([msg], topics)
    for status in statuses.values():
        if as_json:
            click.echo(json.dumps(status.to_dict()))
        else:
            click.echo(f"{status.job.job_id}\t{status.job.model}\t{status.state}\t{status.done}/{status.job.total}")


@cli.command(name="status")
@click.argument("job_id")
@click.option("--watch", is_flag=True, help="Refresh until the job ends, with rate and ETA.")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def status_cmd(job_id: str, watch: bool, as_json: bool, bootstrap_servers: str, namespace: str) -> None:
    """A job's state and per-stage counts (submitted, preprocessed, inferred, dead-lettered)."""
    import json

    from jobs.registry import JobNotFoundError, job_status, watch_status

    settings, topics = require_servers(bootstrap_servers), Topics(namespace)
    try:
        if not watch:
            status = job_status(settings, topics, job_id)
            click.echo(json.dumps(status.to_dict()) if as_json else status.line())
            return
        for status, rate in watch_status(settings, topics, job_id):
            click.echo(json.dumps(status.to_dict(rate)) if as_json else status.line(rate))
    except JobNotFoundError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(ExitCode.FAILED) from None


@cli.command(name="cancel")
@click.argument("job_id")
@cluster_options
def cancel_cmd(job_id: str, bootstrap_servers: str, namespace: str) -> None:
    """Cancel a job: workers skip its remaining records (counted as cancelled, not lost)."""
    from jobs.registry import JobNotFoundError, cancel

    try:
        cancel(require_servers(bootstrap_servers), Topics(namespace), job_id)
    except JobNotFoundError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(ExitCode.FAILED) from None
    click.echo(f"cancelled {job_id}", err=True)


@cli.command()
@click.argument("job_id")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--model-version", default=None, help="Only this version's results [default: the newest per record].")
@cluster_options
def results(
    job_id: str, output: Path | None, model_version: str | None, bootstrap_servers: str, namespace: str
) -> None:
    """Write a job's results as JSON Lines in input order, one line per record."""
    from jobs.results import read_outcome, write_outcome

    outcome = read_outcome(require_servers(bootstrap_servers), Topics(namespace), job_id, model_version)
    written = write_outcome(outcome, output, sys.stdout)
    click.echo(
        f"{len(outcome.results)} results, {len(outcome.dead)} dead letters"
        + (f" ({outcome.duplicates} duplicate copies dropped)" if outcome.duplicates else ""),
        err=True,
    )
    if written == 0:
        raise SystemExit(ExitCode.FAILED)


@cli.command(name="profile")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@cluster_options
def profile_cmd(job_id: str, as_json: bool, bootstrap_servers: str, namespace: str) -> None:
    """Latency per stage (p50/p95/p99), the bottleneck and the engine busy fraction of a job."""
    import json

    from jobs.profile import profile
    from jobs.results import read_outcome

    outcome = read_outcome(require_servers(bootstrap_servers), Topics(namespace), job_id)
    if not outcome.results:
        click.echo(f"error: no results for job {job_id}", err=True)
        raise SystemExit(ExitCode.FAILED)
    report = profile(outcome.results.values())
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo("\n".join(report.lines()))


@cli.command()
@click.argument("topic")
@click.argument("input_path", metavar="FILE|-")
@click.option("--model", "-m", required=True, show_envvar=True, help="Model the records are addressed to.")
@click.option("--job-id", default=None)
@click.option("--skip-invalid", is_flag=True)
@format_option
@cluster_options
def produce(
    topic: str,
    input_path: str,
    model: str,
    job_id: str | None,
    skip_invalid: bool,
    fmt: str,
    kind: str,
    max_image_bytes: int,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Produce raw text or image records from a file, folder or stdin to TOPIC."""
    report = _submit(
        input_path, fmt, kind, max_image_bytes, model, job_id, skip_invalid, bootstrap_servers, namespace, topic
    )
    click.echo(f"produced {report.submitted} records to {topic} as job {report.job_id}", err=True)


@cli.group()
def worker() -> None:
    """Long-running worker processes."""


@worker.command(name="preprocess")
@click.option("--batch-size", type=int, default=64, show_envvar=True)
@click.option(
    "--max-tensor-lag",
    type=int,
    default=None,
    show_envvar=True,
    help="Pause while a GPU group is this many records behind its tensor topic [default: never].",
)
@cluster_options
@repository_option
def worker_preprocess(
    batch_size: int, max_tensor_lag: int | None, bootstrap_servers: str, namespace: str, model_repository: Path
) -> None:
    """Tokenize raw.text and decode raw.image into tensors.<model> (faust app)."""
    from preprocess_app.app import run_worker

    run_worker(
        require_servers(bootstrap_servers),
        Topics(namespace),
        model_repository,
        batch_size=batch_size,
        max_tensor_lag=max_tensor_lag,
    )


@worker.command(name="gpu")
@click.option("--model", "-m", required=True, show_envvar=True)
@click.option(
    "--engine",
    type=click.Choice(["auto", "tensorrt", "torch", "onnxruntime"]),
    default="auto",
    show_envvar=True,
    help="auto: TensorRT if installed with a GPU, else torch on CUDA, else ONNX Runtime.",
)
@click.option("--threads", type=int, default=0, show_envvar=True, help="Engine threads; 0 = one per core.")
@click.option("--drain", is_flag=True, help="Exit once every assigned partition is caught up.")
@click.option(
    "--exactly-once",
    is_flag=True,
    show_envvar=True,
    help="Commit each batch's results and offsets in one Kafka transaction (read_committed readers).",
)
@click.option(
    "--instance-id",
    default=None,
    show_envvar=True,
    help="Stable name of this worker for its transactional id [default: the host name].",
)
@batch_options
@cluster_options
@repository_option
def worker_gpu(
    model: str,
    engine: str,
    threads: int,
    drain: bool,
    exactly_once: bool,
    instance_id: str | None,
    max_batch_size: int | None,
    max_batch_tokens: int | None,
    max_queue: int | None,
    max_linger_ms: float,
    bootstrap_servers: str,
    namespace: str,
    model_repository: Path,
) -> None:
    """Batch tensors.<model> through the engine into results (consumer group gpu.<model>)."""
    from gpu_consumer.batcher import BatchPolicy
    from gpu_consumer.worker import serve
    from kafka_io.clients import check_reachable
    from schemas.model_config import load_model_config

    settings = require_servers(bootstrap_servers)
    check_reachable(settings)  # before loading anything: a down broker is reported in seconds
    config = load_model_config(model_repository, model)
    stats = serve(
        settings,
        Topics(namespace),
        model_repository,
        model,
        BatchPolicy(max_batch_size or config.max_batch_size, max_batch_tokens),
        max_queue=max_queue,
        max_linger_ms=max_linger_ms,
        engine_kind=engine,
        threads=threads,
        drain=drain,
        exactly_once=exactly_once,
        instance_id=instance_id,
    )
    click.echo(f"gpu worker done: {stats.records} records in {stats.batches} batches", err=True)


@cli.group()
def broker() -> None:
    """A long-lived local broker for development (Tansu, memory only: data ends with it)."""


@broker.command(name="start")
@click.option("--port", type=int, default=9092, show_envvar=True)
def broker_start(port: int) -> None:
    """Start the local broker in the background and print its address."""
    from kafka_io.broker import EmbeddedBroker

    state = HOME / "broker.json"
    running = EmbeddedBroker.load(state)
    if running and running.alive():
        click.echo(f"already running (pid {running.pid})", err=True)
        click.echo(f"export {ENV_BOOTSTRAP}={running.bootstrap_servers}")
        return
    started = EmbeddedBroker.start(HOME / "broker.log", port=port)
    started.save(state)
    click.echo(f"broker running, pid {started.pid}, log {started.log_path}", err=True)
    click.echo(f"export {ENV_BOOTSTRAP}={started.bootstrap_servers}")


@broker.command(name="stop")
def broker_stop() -> None:
    """Stop the local broker started by `nearline broker start`."""
    from kafka_io.broker import EmbeddedBroker

    state = HOME / "broker.json"
    running = EmbeddedBroker.load(state)
    if running is None or not running.alive():
        click.echo("no local broker is running", err=True)
    else:
        running.stop()
        click.echo(f"stopped broker pid {running.pid}", err=True)
    state.unlink(missing_ok=True)


@cli.command(name="reprocess")
@click.argument("job_id")
@click.option(
    "--model",
    "-m",
    "model_spec",
    required=True,
    metavar="MODEL[@VERSION]",
    help="The model to re-run, at a version [default: its latest].",
)
@click.option("--engine", type=click.Choice(["auto", "tensorrt", "torch", "onnxruntime"]), default="auto")
@cluster_options
@repository_option
def reprocess_cmd(
    job_id: str, model_spec: str, engine: str, bootstrap_servers: str, namespace: str, model_repository: Path
) -> None:
    """Re-run a job's inference from its tensor records with another model version.

    The version must take the same inputs (same tokenizer or image preprocessing): only inference
    is repeated. Its results become the ones `results` reports (the newest version wins).
    """
    from jobs.reprocess import JobNotFoundError, reprocess

    model, _, version = model_spec.partition("@")
    try:
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
    except JobNotFoundError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(ExitCode.FAILED) from None


@cli.command(name="replay")
@click.option("--topic", required=True)
@click.option("--partition", type=int, default=None, help="One partition [default: all].")
@click.option("--from-offset", type=int, default=None)
@click.option("--from-time", default=None, help="ISO 8601, e.g. 2026-11-29T18:00:00Z.")
@click.option("--to-offset", type=int, default=None, help="Stop before this offset.")
@click.option("--to-time", default=None, help="Stop after the last record at or before this time.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None)
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

    from jobs.replay import message_json, replay_messages

    if (from_offset is None) == (from_time is None):
        raise click.UsageError("give exactly one of --from-offset and --from-time")
    messages = replay_messages(
        require_servers(bootstrap_servers),
        topic,
        partition=partition,
        from_offset=from_offset,
        from_time=from_time,
        to_offset=to_offset,
        to_time=to_time,
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


@cli.group()
def offsets() -> None:
    """Consumer-group offsets: where a group is, and moving it."""


@offsets.command(name="show")
@click.option("--group", required=True)
@click.option("--topic", required=True)
@cluster_options
def offsets_show(group: str, topic: str, bootstrap_servers: str, namespace: str) -> None:
    """Committed offset, end and lag per partition."""
    from kafka_io.offsets import group_offsets

    rows = group_offsets(require_servers(bootstrap_servers), group, topic)
    click.echo("partition\tcommitted\tend\tlag")
    for r in rows:
        committed = r.committed if r.committed >= 0 else "-"
        click.echo(f"{r.partition}\t{committed}\t{r.end}\t{r.lag}")
    click.echo(f"total lag {sum(r.lag for r in rows)}", err=True)


@offsets.command(name="reset")
@click.option("--group", required=True)
@click.option("--topic", required=True)
@click.option("--to-earliest", "to", flag_value="earliest")
@click.option("--to-latest", "to", flag_value="latest")
@click.option("--to-offset", type=int, default=None)
@click.option("--to-time", default=None, help="ISO 8601.")
@click.option("--dry-run", is_flag=True, help="Print the new offsets; change nothing.")
@cluster_options
def offsets_reset(
    group: str,
    topic: str,
    to: str | None,
    to_offset: int | None,
    to_time: str | None,
    dry_run: bool,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Move a stopped group to the start, the end, an offset or a time (Kafka refuses while it has members)."""
    from jobs.replay import parse_time_ms
    from kafka_io.errors import KafkaIOError
    from kafka_io.offsets import end_offsets, group_offsets, offsets_for_time, reset_group_offsets

    if sum(x is not None for x in (to, to_offset, to_time)) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-time")
    settings = require_servers(bootstrap_servers)
    ends = end_offsets(settings, topic)
    if to == "earliest":
        target = dict.fromkeys(ends, 0)
    elif to == "latest":
        target = ends
    elif to_offset is not None:
        target = {p: min(to_offset, end) for p, end in ends.items()}
    else:
        found = offsets_for_time(settings, topic, parse_time_ms(str(to_time)))
        target = {p: found[p] if found.get(p, -1) >= 0 else ends[p] for p in ends}
    current = {r.partition: r.committed for r in group_offsets(settings, group, topic)}
    for p in sorted(target):
        click.echo(f"{topic}/{p}: {current.get(p, -1001) if current.get(p, -1) >= 0 else '-'} -> {target[p]}")
    if dry_run:
        click.echo("dry run: nothing changed", err=True)
        return
    try:
        reset_group_offsets(settings, group, {(topic, p): o for p, o in target.items()})
    except KafkaIOError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(ExitCode.FAILED) from None
    click.echo(f"group {group} reset on {topic}", err=True)


@cli.group()
def dlq() -> None:
    """The dead-letter topic: records a stage could not process, with the reason."""


def _dlq_filters(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--stage", type=click.Choice(["preprocess", "inference"]), default=None)(f)
    f = click.option("--job", "job_id", default=None, help="Only this job's dead letters.")(f)
    return cluster_options(f)


@dlq.command(name="list")
@click.option("--json", "as_json", is_flag=True)
@_dlq_filters
def dlq_list(as_json: bool, job_id: str | None, stage: str | None, bootstrap_servers: str, namespace: str) -> None:
    """One line per dead letter: id (PARTITION:OFFSET), stage, error, job and record."""
    import json

    from jobs.dlq import entries, select

    chosen = select(entries(require_servers(bootstrap_servers), Topics(namespace)), job_id=job_id, stage=stage)
    for e in chosen:
        if as_json:
            click.echo(json.dumps(e.summary()))
        else:
            d = e.letter
            click.echo(f"{e.id}\t{d.stage}\t{d.error_type}\t{d.job_id}\t{d.record_id}\t{d.error[:100]}")
    click.echo(f"{len(chosen)} dead letters", err=True)


@dlq.command(name="show")
@click.argument("ids", nargs=-1, required=True, metavar="PARTITION:OFFSET...")
@cluster_options
def dlq_show(ids: tuple[str, ...], bootstrap_servers: str, namespace: str) -> None:
    """Everything about some dead letters, the payload included (base64), as JSON lines."""
    import json

    from jobs.dlq import entries, select

    chosen = select(entries(require_servers(bootstrap_servers), Topics(namespace)), ids=ids)
    for e in chosen:
        click.echo(json.dumps(e.detail()))
    missing = set(ids) - {e.id for e in chosen}
    if missing:
        click.echo(f"error: no dead letter at {', '.join(sorted(missing))}", err=True)
        raise SystemExit(ExitCode.FAILED)


@dlq.command(name="replay")
@click.argument("ids", nargs=-1, metavar="[PARTITION:OFFSET...]")
@_dlq_filters
def dlq_replay(
    ids: tuple[str, ...], job_id: str | None, stage: str | None, bootstrap_servers: str, namespace: str
) -> None:
    """Re-inject dead letters into the topic they failed on, after a fix (all that match the filters)."""
    from jobs.dlq import entries, replay, select

    if not (ids or job_id or stage):
        raise click.UsageError("name dead letters (PARTITION:OFFSET), a --job or a --stage")
    settings = require_servers(bootstrap_servers)
    chosen = select(entries(settings, Topics(namespace)), job_id=job_id, stage=stage, ids=ids)
    click.echo(f"replayed {replay(settings, chosen)} dead letters", err=True)


@cli.group()
def models() -> None:
    """The model repository."""


@models.command(name="prepare")
@click.argument("name", type=click.Choice(["minilm", "efficientnet-lite0"]))
@repository_option
def models_prepare(name: str, model_repository: Path) -> None:
    """Export a packaged model to ONNX into the model repository."""
    from gpu_consumer.export import PREPARERS

    config = PREPARERS[name](model_repository)
    click.echo(f"prepared {config.name} version {config.version} in {config.directory}")


@models.command(name="list")
@repository_option
def models_list(model_repository: Path) -> None:
    """Models and versions in the repository."""
    from schemas.model_config import load_model_config, versions

    if not model_repository.is_dir():
        click.echo(f"{model_repository} does not exist; try `nearline models prepare minilm`", err=True)
        return
    for folder in sorted(p for p in model_repository.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for version in versions(model_repository, folder.name):
            config = load_model_config(model_repository, folder.name, version)
            click.echo(f"{config.name}\t{config.version}\t{config.task}\t{config.source}")


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
