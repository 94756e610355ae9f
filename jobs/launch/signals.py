"""SIGTERM and SIGHUP end a command the way Ctrl-C does: cleanup runs, children are stopped."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM/SIGHUP; a KeyboardInterrupt so every Ctrl-C path applies."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def terminate_like_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP raise Terminated once; repeats are ignored so cleanup can finish."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        received.append(signum)
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, handler) for sig in _SIGNALS}
    try:
        yield
    except Exception as exc:
        # Terminated raised while a C extension was calling back into Python comes out as the
        # extension's own error: a SIGHUP during confluent_kafka's AdminClient() surfaced as
        # "TypeError: expected configuration property name as type unicode string", a traceback
        # and exit 1 instead of a stop like Ctrl-C's. Whatever fails once the signal came is the stop.
        if received:
            raise Terminated(received[0]) from exc
        raise
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
