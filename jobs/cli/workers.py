"""`nearline worker`: the long-running processes (preprocess, GPU, scheduler, notifier); each
command parses its options and hands them to its worker's serve."""

from __future__ import annotations

from pathlib import Path

import click

from gpu_consumer import ENGINES
from jobs.cli.control_workers import worker_notifier, worker_scheduler
from jobs.cli.options import (
    EngineCpus,
    FiniteFloat,
    batch_options,
    cluster_options,
    metrics_option,
    repository_option,
)
from jobs.cli.validators import require_servers
from kafka_io.clients import GROUP_PROTOCOLS
from kafka_io.topology import Topics
from runtime.metrics_endpoint import MetricsEndpoint


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
@click.option(
    "--no-results-cache",
    is_flag=True,
    show_envvar=True,
    help="Neither look records up in the results cache nor have their results cached: every record "
    "is computed, whatever its job asked (docs/reuse.md).",
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
    no_results_cache: bool,
    metrics: MetricsEndpoint | None,
    bootstrap_servers: str,
    namespace: str,
    model_repository: Path,
) -> None:
    """Tokenize raw.text and decode raw.image into tensors.<model> (faust app)."""
    from preprocess_app.app import PreprocessSettings
    from preprocess_app.worker import run_worker

    worker = PreprocessSettings(
        text_batch=batch_size,
        max_linger_s=max_linger_ms / 1000.0,
        max_tensor_lag=max_tensor_lag,
        session_timeout_s=session_timeout,
        metrics=metrics,
        sole_consumer=sole_consumer,
        results_cache=not no_results_cache,
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
        "Engine threads; 0 = one per core. ONNX Runtime on the CPU runs that many executed batches"
        " side by side, one thread each, and a lone one on all of them."
    ),
)
@click.option("--drain", is_flag=True, help="Exit once every assigned partition is caught up.")
@click.option(
    "--exactly-once",
    is_flag=True,
    show_envvar=True,
    help=(
        "Commit poll windows' results and offsets together in Kafka transactions (up to"
        " --max-windows-in-flight windows each), for read_committed readers."
    ),
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
    """Run tensors.<model> through the engine in executed batches into results (consumer group gpu.<model>)."""
    from gpu_consumer.pipeline import PipelineSettings
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
        pipeline=PipelineSettings(max_in_flight=max_windows_in_flight),
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


# the control plane's workers, defined beside their serve's options (jobs/cli/control_workers.py)
worker.add_command(worker_scheduler)
worker.add_command(worker_notifier)
