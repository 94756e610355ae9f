"""What preprocess_app/faust_patches.py stands on in faust, mode and aiokafka, read from their
installed sources: each test fails when a release moves what a patch replaces or calls, and then
the patch is to be read again before the pin moves. The patches' behaviour is tested where the
worker runs (tests/preprocess_app/, tests/trials/)."""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def source(module: ModuleType) -> str:
    return Path(inspect.getfile(module)).read_text(encoding="utf-8")  # the file: a patch may replace the object


def test_faust_streaming_and_aiokafka_are_the_pinned_releases() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [*project["project"]["dependencies"], *project["tool"]["nearline"]["no-deps"]]
    for name in ("faust-streaming", "aiokafka"):
        (pin,) = [p for p in pins if p.startswith(f"{name}==")]
        assert version(name) == pin.split("==")[1], f"{name} moved: read preprocess_app/faust_patches.py again"


def test_drain_eagerly_stands_on_the_message_loop_asking_wait_first_of_a_callback_and_the_suspend_wait() -> None:
    import faust.transport.consumer
    import mode.services

    loop = source(faust.transport.consumer)
    assert re.search(r"await self\.wait_first\(\s*callback\(message\), self\.suspend_flow\.wait\(\)\s*\)", loop)
    assert re.search(r"async def wait_first\(\s*self, \*coros: WaitArgT, timeout", source(mode.services))


def test_tick_take_stands_on_a_streams_passive_channel_and_its_processors() -> None:
    import faust.streams

    streams = source(faust.streams)
    assert "def _enable_passive(self, channel: ChannelT" in streams
    assert "self._processors = list(processors)" in streams


def test_take_every_partition_stands_on_the_consumer_threads_subscribe_and_rebalance_listener() -> None:
    import faust.transport.drivers.aiokafka as driver
    import mode.threads

    text = source(driver)
    assert "return AIOKafkaConsumerThread(self, loop=self.loop, beacon=self.beacon)" in text  # _new_consumer_thread
    assert "async def subscribe(self, topics: Iterable[str]) -> None:" in text
    assert "self._rebalance_listener = consumer.RebalanceListener(self)" in text
    assert "def _ensure_consumer(self) -> aiokafka.AIOKafkaConsumer:" in text
    assert "async def call_thread(" in source(mode.threads)


def test_ride_out_outages_stands_on_the_threads_commit_and_the_fetchers_fetch_request() -> None:
    import aiokafka.consumer.fetcher
    import faust.transport.drivers.aiokafka as driver

    assert "async def _commit(self, offsets: Mapping[TP, int]) -> bool:" in source(driver)
    fetcher = source(aiokafka.consumer.fetcher)
    assert "async def _proc_fetch_request(self, assignment, node_id, request):" in fetcher
    assert "self._closed = True" in fetcher


def test_recommit_undone_stands_on_commit_offsets_marking_what_new_offset_took_off_the_acked_list() -> None:
    import faust.transport.consumer

    text = source(faust.transport.consumer)
    assert re.search(
        r"async def _commit_offsets\(\s*self, offsets: Mapping\[TP, int\], start_new_transaction: bool = True", text
    )
    assert "self._committed_offset.update(committable_offsets)" in text  # done or not
    assert "acked[: len(batch)] = []" in text  # _new_offset
    assert "self._acked_index[tp].difference_update(batch)" in text
    assert "if min(acked) - committed_offset > 1:" in text  # a list that starts above the mark waits


def test_stop_when_stands_on_mode_installing_its_signal_handlers_at_first_start_and_its_shutdown() -> None:
    import mode.worker

    text = source(mode.worker)
    assert re.search(
        r"async def default_on_first_start\(self\) -> None:(\n.*){1,6}\n\s+self\.install_signal_handlers\(\)", text
    )
    assert "def _schedule_shutdown(self, signal: signal.Signals) -> None:" in text
    assert "self.loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)" in text  # what is replaced
