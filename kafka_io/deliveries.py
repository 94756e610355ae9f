"""A producer whose delivery reports a thread of its own serves, confirming records batch by batch.

For a caller that is not a polling loop (the preprocess worker's faust agents, on an event loop):
it hands over a batch and is told once, from the serving thread, that the broker stored every
record of it, or why one was not. librdkafka batches the records of all callers by partition
(linger.ms, batch.size), where aiokafka's pure-Python producer cost a future and a send() per
record on the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from kafka_io.errors import DeliveryError
from kafka_io.produce import fatal_error, produce_one
from kafka_io.records import OutRecord

# Called once per batch: None when the broker stored every record, else why one was not.
Confirm = Callable[[str | None], None]


class ServedProducer:
    """`producer`, with a daemon thread serving its delivery reports until close()."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="deliveries", daemon=True)
        self._thread.start()

    def send(self, records: Sequence[OutRecord], confirm: Confirm) -> None:
        """Hand `records` over without waiting; `confirm` runs once on the serving thread (at
        once, here, for no records). A producer that turned fatal raises DeliveryError."""
        if not records:
            confirm(None)
            return
        waiting = [len(records)]  # a list: the closure counts down, one report at a time
        failed: list[str] = []

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if failed:
                return
            if err is not None:
                failed.append(f"delivery to {msg.topic()} failed: {err.str()}")
                confirm(failed[0])
                return
            waiting[0] -= 1
            if not waiting[0]:
                confirm(None)

        try:
            for record in records:
                produce_one(self._producer, record, on_delivery)
        except (KafkaException, SystemError) as exc:
            raise DeliveryError(f"producer failed: {fatal_error(exc) or exc}") from exc

    def close(self, timeout_s: float = 10.0) -> None:
        """Wait up to timeout_s for what is queued to be confirmed, then stop serving."""
        self._producer.flush(timeout_s)
        self._closed.set()
        self._thread.join(timeout_s)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                self._producer.poll(0.1)
            except (KafkaException, SystemError):
                # fatal: every batch still waiting hears of it through its failed reports
                # (purged), and the producer's next send raises
                self._closed.wait(0.1)
