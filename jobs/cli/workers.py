"""`nearline worker`, `nearline broker` and `nearline models`: the long-running processes and
their prerequisites."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import click

from gpu_consumer import ENGINES
from jobs.cli.options import (
    HOME,
    EngineCpus,
    FiniteFloat,
    batch_options,
    cluster_options,
    metrics_option,
    repository_option,
)
from jobs.cli.validators import require_servers
from kafka_io.clients import GROUP_PROTOCOLS
from kafka_io.settings import ENV_BOOTSTRAP
from kafka_io.topology import Topics
from runtime.metrics_endpoint import MetricsEndpoint
from schemas.model_config import ModelConfig


@click.group()
def worker() -> None:
    """Long-running worker processes."""
    from runtime.children import stop_with_parent

    stop_with_parent()


@worker.command(name="preprocess")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_envvar=True)
@click.option(
    "--max-linger-ms",
    type=FiniteFloat(1.0, 10_000.0),
    default=20.0,
    show_default=True,
    show_envvar=True,
    help="Preprocess what has come at least this often, even if fewer than --batch-size records.",
)
@click.option(
    "--max-tensor-lag",
    type=click.IntRange(min=1),
    default=None,
    show_envvar=True,
    help="Pause while a GPU group is this many records behind its tensor topic [default: never].",
)
@click.option(
    "--session-timeout-s",
    "session_timeout",
    type=FiniteFloat(1.0, 300.0),
    default=6.0,
    show_envvar=True,
    help="Consumer-group session (seconds): a dead worker's partitions move after about this long, and "
    "Tansu holds a join for half of it. Kafka refuses less than its group.min.session.timeout.ms (6 s by "
    "default).",
)
@click.option(
    "--sole-consumer",
    is_flag=True,
    hidden=True,  # for `nearline run`'s embedded pipeline: the one member of its group, no join
    help="Take every partition without joining the group (only for a worker that is alone).",
)
@metrics_option
@cluster_options
@repository_option
def worker_preprocess(
    batch_size: int,
    max_linger_ms: float,
    max_tensor_lag: int | None,
    session_timeout: float,
    sole_consumer: bool,
    metrics: MetricsEndpoint | None,
    bootstrap_servers: str,
    namespace: str,
    model_repository: Path,
) -> None:
    """Tokenize raw.text and decode raw.image into tensors.<model> (faust app)."""
    from preprocess_app.app import PreprocessSettings, run_worker

    worker = PreprocessSettings(
        text_batch=batch_size,
        max_linger_s=max_linger_ms / 1000.0,
        max_tensor_lag=max_tensor_lag,
        session_timeout_s=session_timeout,
        metrics=metrics,
        sole_consumer=sole_consumer,
    )
    # the cluster probed once its metrics port is bound
    run_worker(require_servers(bootstrap_servers, probe=False), Topics(namespace), model_repository, worker)


@worker.command(name="gpu")
@click.option("--model", "-m", required=True, show_envvar=True)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="auto",
    show_envvar=True,
    help="auto: TensorRT if installed with a GPU, else torch on CUDA, else ONNX Runtime; for a causal LM, "
    "vLLM if installed, else transformers' continuous batching.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=0,
    show_envvar=True,
    help=(
        "Engine threads; 0 = one per core. ONNX Runtime on the CPU runs that many batches side by"
        " side, one thread each, and a lone batch on all of them."
    ),
)
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
@click.option(
    "--max-windows-in-flight",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    show_envvar=True,
    help="Poll windows between poll and commit: one is prepared, one runs, the rest await delivery.",
)
@click.option(
    "--sole-consumer",
    is_flag=True,
    hidden=True,  # for `nearline run`'s embedded pipeline: the one member of its group, no join
    help="Take every partition without joining the group (only for a worker that is alone).",
)
@click.option(
    "--bulk-share",
    type=FiniteFloat(min=0, max=1),
    default=0.1,
    show_default=True,
    show_envvar=True,
    help="The bulk lane's minimum share of engine time while live records keep coming (priority lanes).",
)
@click.option(
    "--group-protocol",
    type=click.Choice(GROUP_PROTOCOLS),
    default="classic",
    show_envvar=True,
    help="consumer: Kafka 4's consumer group protocol (KIP-848): a worker that joins or leaves moves "
    "only the partitions that change owner, without pausing the others; the broker's "
    "group.consumer.session.timeout.ms is then how soon a dead worker's partitions move. Refused "
    "at start by a broker without it (before Kafka 4, Tansu).",
)
@click.option(
    "--kv-cache-tokens",
    type=click.IntRange(min=64),
    default=None,
    show_envvar=True,
    help="Causal LMs: the tokens the KV cache holds, prompts and completions of every sequence in flight "
    "(--max-batch-size: the sequences decoded at once) [default: 16384].",
)
@click.option(
    "--eager",
    is_flag=True,
    show_envvar=True,
    help="Causal LMs on vLLM: no torch.compile or CUDA graphs; starts in seconds instead of a minute, decodes slower.",
)
@click.option(
    "--engine-cpus",
    type=EngineCpus(),
    default=None,
    show_envvar=True,
    help="Causal LMs on the CPU: CPUs (like 0-13) given to the engine alone, as a GPU's compute is its own; "
    "the worker's Kafka loop, post-process and clients run on the others [default: every CPU shared].",
)
@batch_options
@metrics_option
@cluster_options
@repository_option
def worker_gpu(
    model: str,
    engine: str,
    threads: int,
    drain: bool,
    exactly_once: bool,
    instance_id: str | None,
    max_windows_in_flight: int,
    sole_consumer: bool,
    bulk_share: float,
    group_protocol: str,
    kv_cache_tokens: int | None,
    eager: bool,
    engine_cpus: frozenset[int] | None,
    max_batch_size: int | None,
    max_batch_tokens: int | None,
    max_window: int | None,
    max_linger_ms: float,
    metrics: MetricsEndpoint | None,
    bootstrap_servers: str,
    namespace: str,
    model_repository: Path,
) -> None:
    """Batch tensors.<model> through the engine into results (consumer group gpu.<model>)."""
    from gpu_consumer.pipeline import PipelineConfig
    from gpu_consumer.worker import GpuWorkerSettings, serve

    worker = GpuWorkerSettings(
        model,
        engine_kind=engine,
        threads=threads,
        max_batch_size=max_batch_size,
        max_batch_tokens=max_batch_tokens,
        max_window=max_window,
        max_linger_ms=max_linger_ms,
        drain=drain,
        exactly_once=exactly_once,
        instance_id=instance_id,
        pipeline=PipelineConfig(max_in_flight=max_windows_in_flight),
        sole_consumer=sole_consumer,
        metrics=metrics,
        bulk_share=bulk_share,
        group_protocol=group_protocol,
        kv_cache_tokens=kv_cache_tokens,
        eager=eager,
        engine_cpus=engine_cpus,
    )
    # the cluster probed once its metrics port is bound
    stats = serve(require_servers(bootstrap_servers, probe=False), Topics(namespace), model_repository, worker)
    click.echo(f"gpu worker done: {stats.records} records in {stats.windows} poll windows", err=True)


@worker.command(name="scheduler")
@click.option(
    "--instance-id",
    default=None,
    show_envvar=True,
    help="Stable name, unique per scheduler: a restart with the same name finishes a tick it had "
    "claimed but not submitted [default: the host name].",
)
@click.option(
    "--grace-s",
    type=FiniteFloat(min=0),
    default=30.0,
    show_envvar=True,
    help="A tick this late is on time, not missed.",
)
@click.option(
    "--max-catch-up",
    type=click.IntRange(min=0),
    default=100,
    show_envvar=True,
    help="Most missed ticks run under catch-up.",
)
@metrics_option
@cluster_options
def worker_scheduler(
    instance_id: str | None,
    grace_s: float,
    max_catch_up: int,
    metrics: MetricsEndpoint | None,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """Submit one job per schedule tick. Run as many as you like: each tick is submitted once."""
    import signal
    import socket
    import threading
    from datetime import UTC, datetime, timedelta

    from jobs.scheduling.metrics import scheduler_metrics
    from jobs.scheduling.scheduler import Scheduler, SchedulerConfig
    from kafka_io.clients import check_reachable

    settings = require_servers(bootstrap_servers, probe=False)  # probed once its metrics port is bound
    reports = scheduler_metrics(metrics)
    check_reachable(settings)
    config = SchedulerConfig(instance_id or socket.gethostname(), timedelta(seconds=grace_s), max_catch_up)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def say(line: str) -> None:
        click.echo(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} {line}", err=True)

    with Scheduler(settings, Topics(namespace), config, on_event=say, metrics=reports) as scheduler:
        say(f"scheduler {config.instance_id} running: {len(scheduler.schedules)} schedule(s)")
        with contextlib.suppress(KeyboardInterrupt):
            scheduler.run(stop)
    say(f"scheduler {config.instance_id} stopped")


@worker.command(name="notifier")
@click.option(
    "--instance-id",
    default=None,
    show_envvar=True,
    help="Stable name, unique per notifier: a restart with the same name takes back its notifications at once, "
    "where another notifier waits out --lease-s [default: the host name].",
)
@click.option(
    "--first-retry-s",
    type=FiniteFloat(min=0, min_open=True),
    default=1.0,
    show_default=True,
    show_envvar=True,
    help="Wait after a failed POST; doubled after each, up to --max-retry-s.",
)
@click.option(
    "--max-retry-s",
    type=FiniteFloat(min=0, min_open=True),
    default=60.0,
    show_default=True,
    show_envvar=True,
    help="The longest wait between two attempts.",
)
@click.option(
    "--give-up-after-s",
    type=FiniteFloat(min=0, max=6 * 86400, min_open=True),
    default=86400.0,
    show_default=True,
    show_envvar=True,
    help="Stop retrying this long after the first attempt; `nearline status` shows it gave up, and why.",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=None,
    show_envvar=True,
    help="Stop retrying after this many attempts [default: only --give-up-after-s stops them].",
)
@click.option(
    "--timeout-s",
    type=FiniteFloat(min=0, max=600, min_open=True),
    default=10.0,
    show_default=True,
    show_envvar=True,
    help="A POST not answered within this long, all told (resolving, connecting, sending, the answer's "
    "head), has failed that attempt; a slow receiver holds one POST slot this long at most.",
)
@click.option(
    "--lease-s",
    type=FiniteFloat(min=1),
    default=60.0,
    show_default=True,
    show_envvar=True,
    help="A notification whose notifier has written nothing for this long may be taken over by another.",
)
@click.option(
    "--signing-secret",
    "signing_secrets",
    multiple=True,
    metavar="whsec_...",
    show_default=False,
    help="Sign every POST with this Standard Webhooks secret (`whsec_` and base64). Give two during a "
    "rotation: each POST then carries both signatures. In the variable, separate them with spaces "
    "[default: unsigned].",
)
@click.option(
    "--signing-secret-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    show_envvar=True,
    help="A file of signing secrets, one a line (a mounted Kubernetes Secret, say): added to --signing-secret.",
)
@click.option(
    "--allow-private-targets",
    is_flag=True,
    show_envvar=True,
    help="POST to loopback, private, link-local and other non-public addresses too. Without it (or "
    "--allow-target), a URL whose host resolves only to such addresses is given up at once.",
)
@click.option(
    "--allow-target",
    "allow_targets",
    multiple=True,
    metavar="CIDR",
    show_envvar=True,
    help="POST to addresses in this network even if not public (repeatable; spaces in the variable); "
    "receivers here are the operator's own, so `status` shows what they answer.",
)
@metrics_option
@cluster_options
def worker_notifier(
    instance_id: str | None,
    first_retry_s: float,
    max_retry_s: float,
    give_up_after_s: float,
    max_attempts: int | None,
    timeout_s: float,
    lease_s: float,
    signing_secrets: tuple[str, ...],
    signing_secret_file: Path | None,
    allow_private_targets: bool,
    allow_targets: tuple[str, ...],
    metrics: MetricsEndpoint | None,
    bootstrap_servers: str,
    namespace: str,
) -> None:
    """POST each ended job's status to its --notify URL. Run as many as you like: each is POSTed once."""
    import signal
    import socket
    import threading
    from datetime import UTC, datetime

    from jobs.notifications.delivery import RetryPolicy
    from jobs.notifications.metrics import notifier_metrics
    from jobs.notifications.notifier import Notifier, NotifierConfig
    from jobs.notifications.signing import SecretError, SigningKeys, read_secret_file
    from jobs.notifications.targets import TargetPolicy
    from kafka_io.clients import check_reachable

    try:
        retry = RetryPolicy(first_retry_s, max_retry_s, max_attempts, give_up_after_s)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        targets = TargetPolicy.of(allow_private_targets, allow_targets)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--allow-target'") from None
    try:
        given = SigningKeys.parse(signing_secrets)
    except SecretError as exc:  # its message never holds the secret
        raise click.BadParameter(str(exc), param_hint="'--signing-secret'") from None
    hint = "'--signing-secret-file'"  # a bad secret there is named by its place in the file, not among both
    try:
        from_file = SigningKeys.parse(read_secret_file(signing_secret_file.read_text()) if signing_secret_file else [])
    except SecretError as exc:
        raise click.BadParameter(f"{signing_secret_file}: {exc}", param_hint=hint) from None
    except (OSError, UnicodeDecodeError) as exc:  # named by its kind: a decode error quotes the file's bytes
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise click.BadParameter(f"cannot read {signing_secret_file}: {why}", param_hint=hint) from None
    signing = SigningKeys(given.keys + from_file.keys)
    config = NotifierConfig(
        instance_id or socket.gethostname(),
        retry,
        timeout_s=timeout_s,
        lease_s=lease_s,
        targets=targets,
        signing=signing,
    )
    settings = require_servers(bootstrap_servers, probe=False)  # probed once its metrics port is bound
    reports = notifier_metrics(metrics)
    check_reachable(settings)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def say(line: str) -> None:
        click.echo(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} {line}", err=True)

    with Notifier(settings, Topics(namespace), config, on_event=say, metrics=reports) as notifier:
        signed = f"signed with {len(signing.keys)} secret(s)" if signing.keys else "unsigned (no --signing-secret)"
        say(f"notifier {config.instance_id} running: {len(notifier.jobs)} job(s) with a webhook; POSTs {signed}")
        with contextlib.suppress(KeyboardInterrupt):
            notifier.run(stop)
    say(f"notifier {config.instance_id} stopped")


@click.group()
def broker() -> None:
    """A long-lived local broker for development (Tansu, memory only: data ends with it)."""


# A broker is named by its port: `broker stop --port P` stops the one `broker start --port P`
# started (each has a state file of its own: kafka_io.broker.state_path), never another shell's
# broker on another port.
BROKER_PORT_HELP = "The broker's port: each port's broker is started and stopped on its own."


@broker.command(name="start")
@click.option("--port", type=click.IntRange(1, 65535), default=9092, show_envvar=True, help=BROKER_PORT_HELP)
def broker_start(port: int) -> None:
    """Start the local broker in the background on --port and print its address."""
    import socket

    from jobs.exit_codes import ExitCode
    from kafka_io.broker import EmbeddedBroker, started_broker, started_brokers, state_path

    running = started_broker(HOME, port)
    if running is not None:
        click.echo(f"already running on port {port} (pid {running[1].pid})", err=True)
        click.echo(f"export {ENV_BOOTSTRAP}={running[1].bootstrap_servers}")
        return
    with socket.socket() as probe:
        taken = probe.connect_ex(("127.0.0.1", port)) == 0
    if taken:
        click.echo(
            f"error: port {port} is taken by a program that `nearline broker start` did not start; "
            "name another with --port",
            err=True,
        )
        raise SystemExit(ExitCode.UNAVAILABLE)
    for other in started_brokers(HOME):
        click.echo(
            f"note: a local broker runs on port {other.port} too (pid {other.pid}); stop it with "
            f"nearline broker stop --port {other.port}",
            err=True,
        )
    # it outlives this command
    started = EmbeddedBroker.start(HOME / f"broker-{port}.log", port=port, detached=True)
    started.save(state_path(HOME, port))
    click.echo(f"broker running on port {port}, pid {started.pid}, log {started.log_path}", err=True)
    click.echo(f"export {ENV_BOOTSTRAP}={started.bootstrap_servers}")


@broker.command(name="stop")
@click.option("--port", type=click.IntRange(1, 65535), default=9092, show_envvar=True, help=BROKER_PORT_HELP)
def broker_stop(port: int) -> None:
    """Stop the local broker that `nearline broker start` started on --port."""
    from jobs.exit_codes import ExitCode
    from kafka_io.broker import started_broker, started_brokers, state_path

    running = started_broker(HOME, port)
    if running is not None:
        path, broker = running
        broker.stop()
        path.unlink(missing_ok=True)
        click.echo(f"stopped broker pid {broker.pid} on port {port}", err=True)
        return
    state_path(HOME, port).unlink(missing_ok=True)  # a broker that died: nothing left to stop
    others = started_brokers(HOME)
    if not others:
        click.echo("no local broker is running", err=True)
        return
    running_at = ", ".join(f"port {b.port} (pid {b.pid})" for b in others)
    which = f"--port {others[0].port}" if len(others) == 1 else "--port PORT"
    click.echo(
        f"error: no local broker on port {port}, so none was stopped; `nearline broker start` started one on "
        f"{running_at}: stop it with nearline broker stop {which}",
        err=True,
    )
    raise SystemExit(ExitCode.FAILED)


@click.group()
def models() -> None:
    """The model repository."""


REPLACE_HELP = "Replace the version if it is already in the repository (running workers keep the one they loaded)."


@models.command(name="prepare")
@click.argument("name", type=click.Choice(["minilm", "efficientnet-lite0", "smollm2-135m"]))
@click.option("--replace", is_flag=True, help=REPLACE_HELP)
@repository_option
def models_prepare(name: str, replace: bool, model_repository: Path) -> None:
    """Export a packaged model to ONNX into the model repository."""
    from model_repository.export import PREPARERS
    from schemas.model_config import load_model_config, versions

    if "1" in versions(model_repository, name) and not replace:
        existing = load_model_config(model_repository, name, "1")
        click.echo(f"{name} version 1 is already in {model_repository} ({existing.source}); --replace exports it again")
        return
    config = PREPARERS[name](model_repository, replace=replace)
    click.echo(f"prepared {config.name} version {config.version} in {config.directory}")


@models.command(
    name="import",
    epilog="""\b
Examples:
  nearline models import ./my-bge --name bge            # a sentence-transformers folder
  nearline models import ./sentiment --name sentiment   # save_pretrained *ForSequenceClassification
  nearline models import ./vit --name vit               # *ForImageClassification + preprocessor_config.json
  nearline models import ./encoder --name enc --pooling cls   # a bare encoder, CLS pooling
  nearline models import ./onnx --name enc --task text-embedding   # model.onnx + tokenizer.json
  nearline models import ./qwen --name qwen             # save_pretrained *ForCausalLM + tokenizer.json
  nearline models import ./model.Q8_0.gguf --name llm   # a GGUF causal LM, kept in fp32""",
)
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--name", required=True, help="The model's name in the repository (and in tensors.<name>).")
@click.option("--version", "version", default="1", show_default=True)
@click.option(
    "--task",
    type=click.Choice(["text-embedding", "text-classification", "image-classification", "text-generation"]),
    help="What the model does, where the folder cannot say (a model.onnx without a config.json architecture).",
)
@click.option(
    "--pooling",
    type=click.Choice(["mean", "cls", "max", "mean_sqrt_len", "last_token"]),
    help="Embedders: how token vectors become one [default: the folder's, else mean].",
)
@click.option("--max-batch-size", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--replace", is_flag=True, help=REPLACE_HELP)
@repository_option
def models_import(
    source: Path,
    name: str,
    version: str,
    task: str | None,
    pooling: str | None,
    max_batch_size: int,
    replace: bool,
    model_repository: Path,
) -> None:
    """Import a local model folder (sentence-transformers, transformers, ONNX) or GGUF file into the repository."""
    from kafka_io.topics import model_topics_problem
    from kafka_io.topology import Topics
    from model_repository.importer import import_model
    from schemas.model_config import InvalidModelNameError, versions

    problem = model_topics_problem(Topics.from_env(), name)  # the namespace its workers will use
    if problem is not None:
        raise InvalidModelNameError(f"invalid model name {name!r}: {problem}")
    existed = version in versions(model_repository, name)
    config = import_model(model_repository, source, name, version, task, pooling, max_batch_size, replace)
    click.echo(f"imported {config.name} version {config.version} ({config.task}) in {config.directory}")
    if existed:
        click.echo(
            f"replaced the previous {name} version {version}: workers that loaded it keep serving it until they "
            "restart; restart them to serve this one",
            err=True,
        )


@models.command(name="list")
@repository_option
def models_list(model_repository: Path) -> None:
    """Models and versions in the repository (named first, on stderr)."""
    from schemas.model_config import list_models, move_hint, versions
    from schemas.model_versions import default_version

    hint = move_hint(model_repository)
    if hint:
        click.echo(f"note: {hint}", err=True)
    if not model_repository.is_dir():
        click.echo(f"{model_repository} does not exist yet; try `nearline models prepare minilm`", err=True)
        return
    click.echo(
        f"models in {model_repository.absolute()} (the version marked default is served when none is named):",
        err=True,
    )
    defaults: dict[str, str | None] = {}
    for name, version, config in list_models(model_repository):
        if name not in defaults:
            defaults[name] = default_version(versions(model_repository, name))
        shown = f"{version} (default)" if version == defaults[name] else version
        if isinstance(config, Exception):
            click.echo(f"{name}\t{shown}\tunavailable\t{config}")
        else:
            click.echo(f"{config.name}\t{shown}\t{config.task}\t{model_detail(config)}\t{config.source}")


def _unusual(label: str) -> bool:
    """A label that would not read as one item in a comma-separated line: quoted when shown."""
    return not label.isprintable() or "," in label or label != label.strip()


def model_detail(config: ModelConfig) -> str:
    """What a model's results hold beyond its task: the pooling of an embedder, a classifier's
    labels, a causal LM's context and whether it takes chat messages."""
    if config.generation is not None:
        spec = config.generation
        chat = "chat template" if spec.chat_template else "prompts only (no chat template)"
        return f"context {spec.context_length} tokens, {chat}, default max_tokens {spec.default_max_tokens}"
    if config.is_classifier:
        from schemas.model_config import ModelUnavailableError, read_labels

        try:
            names = read_labels(config)
        except ModelUnavailableError as exc:
            return f"labels unreadable: {exc}"
        shown = ", ".join(json.dumps(n, ensure_ascii=False) if _unusual(n) else n for n in names[:4]) + (
            ", ..." if len(names) > 4 else ""
        )
        return f"{len(names)} labels: {shown}"
    pooling = f"{config.pooling} pooling" if config.pooling else "pooled in the graph"
    return pooling + (", normalized" if "l2_normalize" in config.postprocess else "")
