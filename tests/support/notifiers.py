"""Notifiers run in threads of the test's process, as `nearline worker notifier` runs one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from jobs.notifications.notifier import Notifier, NotifierSettings
from kafka_io.settings import KafkaSettings
from kafka_io.topology import Topics


@contextmanager
def running_notifiers(settings: KafkaSettings, topics: Topics, *configs: NotifierSettings) -> Iterator[list[Notifier]]:
    """A notifier per config, each run in a thread of its own until the block ends."""
    stop = threading.Event()
    with ExitStack() as stack:
        started = [stack.enter_context(Notifier(settings, topics, c)) for c in configs]
        threads = [threading.Thread(target=n.run, args=(stop,), daemon=True) for n in started]
        for thread in threads:
            thread.start()
        try:
            yield started
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
