"""`nearline worker scheduler` and `nearline worker notifier`: the control plane's workers, each
its options parsed here and run by runtime/service.py: serve, the shape every worker runs under."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click

from jobs.cli.options import FiniteFloat, cluster_options, metrics_option
from jobs.cli.validators import require_servers
from kafka_io.topology import Topics
from runtime.metrics_endpoint import MetricsEndpoint


@click.command(name="scheduler")
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
    import socket
    from datetime import timedelta

    from jobs.scheduling.metrics import scheduler_metrics
    from jobs.scheduling.scheduler import Scheduler, SchedulerSettings
    from kafka_io.clients import check_reachable
    from runtime.service import say_stamped, serve

    settings = require_servers(bootstrap_servers, probe=False)  # probed once its metrics port is bound
    reports = scheduler_metrics(metrics)
    config = SchedulerSettings(instance_id or socket.gethostname(), timedelta(seconds=grace_s), max_catch_up)
    serve(
        lambda: Scheduler(settings, Topics(namespace), config, on_event=say_stamped, metrics=reports),
        partial(check_reachable, settings),
        lambda scheduler: f"scheduler {config.instance_id} running: {len(scheduler.schedules)} schedule(s)",
        f"scheduler {config.instance_id} stopped",
        say_stamped,
    )


@click.command(name="notifier")
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
    import socket

    from jobs.notifications.delivery import RetrySettings
    from jobs.notifications.metrics import notifier_metrics
    from jobs.notifications.notifier import Notifier, NotifierSettings
    from jobs.notifications.signing import SecretError, SigningKeys, read_secret_file
    from jobs.notifications.targets import TargetSettings
    from kafka_io.clients import check_reachable
    from runtime.service import say_stamped, serve

    try:
        retry = RetrySettings(first_retry_s, max_retry_s, max_attempts, give_up_after_s)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        targets = TargetSettings.of(allow_private_targets, allow_targets)
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
    config = NotifierSettings(
        instance_id or socket.gethostname(),
        retry,
        timeout_s=timeout_s,
        lease_s=lease_s,
        targets=targets,
        signing=signing,
    )
    settings = require_servers(bootstrap_servers, probe=False)  # probed once its metrics port is bound
    reports = notifier_metrics(metrics)
    signed = f"signed with {len(signing.keys)} secret(s)" if signing.keys else "unsigned (no --signing-secret)"
    serve(
        lambda: Notifier(settings, Topics(namespace), config, on_event=say_stamped, metrics=reports),
        partial(check_reachable, settings),
        lambda notifier: (
            f"notifier {config.instance_id} running: {len(notifier.jobs)} job(s) with a webhook; POSTs {signed}"
        ),
        f"notifier {config.instance_id} stopped",
        say_stamped,
    )
