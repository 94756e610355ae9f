"""`nearline broker`: a long-lived local broker for development, started and stopped by port."""

from __future__ import annotations

import click

from jobs.cli.options import HOME
from kafka_io.settings import ENV_BOOTSTRAP


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
