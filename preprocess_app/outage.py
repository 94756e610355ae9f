"""What faust and aiokafka need so that a preprocess worker in (or after) a broker outage still
stops on SIGTERM, at once and with exit code 0.

Commits: aiokafka retries a commit until the group coordinator answers: in an outage, for as long as it
lasts. faust commits every few seconds, and its shutdown commits once more after waiting for the
commit in progress, so a worker SIGTERMed in (or after) an outage hung until its SIGKILL. A
commit that gets no answer within COMMIT_TIMEOUT_S is given up and reported as not done: faust
keeps the offsets and commits them again at its next interval, and a worker that stops without
them has its records read again (at least once, as after any crash).

The fetcher: aiokafka's Fetcher.close() cancels its fetch requests and awaits them. A request
that failed (no broker) sleeps its retry backoff, and cancelled there it raises CancelledError out
of close(): the consumer's stop ends half done, faust's consumer thread dies with a traceback in
the log, and faust waits 60 s for that thread to say it stopped. Cancelled while it waits for the
broker, a request returns "no result" (aiokafka's own rule); the backoff sleep is made to say
the same once the fetcher is closing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

# A commit takes milliseconds on a broker that answers; faust commits every 2.8 s.
COMMIT_TIMEOUT_S = 5.0


def ride_out_outages() -> None:
    """Apply both patches (idempotent): call before the worker starts."""
    bound_commits()
    close_fetcher_quietly()


def close_fetcher_quietly() -> None:
    """A fetch request cancelled by Fetcher.close() returns False wherever it waits."""
    from aiokafka.consumer.fetcher import Fetcher

    proc = Fetcher._proc_fetch_request
    if getattr(proc, "nearline_quiet", False):
        return

    async def quiet(self: Any, *args: Any) -> bool:
        try:
            done: bool = await proc(self, *args)
        except asyncio.CancelledError:
            if not self._closed:
                raise
            return False
        return done

    quiet.nearline_quiet = True  # type: ignore[attr-defined]
    setattr(Fetcher, "_proc_fetch_request", quiet)  # noqa: B010 (a method)


def bound_commits() -> None:
    """Make every faust consumer's commit give up after COMMIT_TIMEOUT_S (idempotent)."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    commit = AIOKafkaConsumerThread._commit
    if getattr(commit, "nearline_bounded", False):
        return
    unanswered = [False]  # one line per run of unanswered commits, not one every interval

    async def bounded(self: Any, offsets: Mapping[Any, int]) -> bool:
        try:
            done: bool = await asyncio.wait_for(commit(self, offsets), COMMIT_TIMEOUT_S)
        except TimeoutError:
            if not unanswered[0]:
                unanswered[0] = True
                log.warning(
                    "offset commit unanswered for %.0f s; the offsets are kept and committed again later",
                    COMMIT_TIMEOUT_S,
                )
            return False
        unanswered[0] = False
        return done

    bounded.nearline_bounded = True  # type: ignore[attr-defined]
    setattr(AIOKafkaConsumerThread, "_commit", bounded)  # noqa: B010 (a method)
