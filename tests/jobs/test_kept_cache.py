"""`nearline run`'s results cache kept between runs (jobs/launch/kept_cache.py) on the real broker:
what cache.<model> holds is written to the model's file and produced back into another broker's
(here: another namespace's) cache topic; a file cut short restores what it holds before the cut,
and a folder that cannot be written is said, never raised."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.launch.kept_cache import ENV_RESULTS_CACHE, keep_cache, kept_file, kept_folder, restore_cache
from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import read_topics
from kafka_io.records import OutRecord
from kafka_io.result_cache import cache_topic
from kafka_io.settings import KafkaSettings
from kafka_io.topics import ensure_topics
from kafka_io.topology import Topics


def cached(settings: KafkaSettings, topics: Topics) -> list[tuple[bytes | None, bytes | None]]:
    return sorted((r.key, r.value) for r in read_topics(settings, [topics.cache("tiny")]))


def test_the_cache_kept_at_the_end_of_a_run_is_what_the_next_run_starts_with(
    settings: KafkaSettings, topics: Topics
) -> None:
    results = {os.urandom(32): os.urandom(1500) for _ in range(200)}
    gone = next(iter(results))
    spec = cache_topic(topics, "tiny")
    ensure_topics(settings, [spec])
    records = [OutRecord(spec.name, v, k) for k, v in results.items()]
    records += [OutRecord(spec.name, b"torch/cpu/fp32", b"runtime"), OutRecord(spec.name, None, gone)]
    produce_all(make_producer(settings), records)
    said: list[str] = []
    assert keep_cache(settings, topics, "tiny", said.append) == 200  # 199 results and the runtime
    assert kept_file("tiny").is_file() and said == []

    later = Topics(f"later-{topics.namespace}")  # the next run's broker, as empty as a new one
    assert restore_cache(settings, later, "tiny", said.append) == 199  # the runtime is not a result
    del results[gone]
    assert cached(settings, later) == sorted([*results.items(), (b"runtime", b"torch/cpu/fp32")])
    assert said == [f"199 results kept from earlier runs ({kept_file('tiny')})"]


def test_a_kept_file_cut_short_restores_what_it_holds_before_the_cut_and_says_so(
    settings: KafkaSettings, topics: Topics
) -> None:
    spec = cache_topic(topics, "tiny")
    ensure_topics(settings, [spec])
    produce_all(make_producer(settings), [OutRecord(spec.name, os.urandom(100), os.urandom(32)) for _ in range(3)])
    keep_cache(settings, topics, "tiny", print)
    path = kept_file("tiny")
    path.write_bytes(path.read_bytes()[:-1])
    later, said = Topics(f"later-{topics.namespace}"), list[str]()
    assert restore_cache(settings, later, "tiny", said.append) == 2
    assert len(cached(settings, later)) == 2
    third = path.stat().st_size + 1 - (2 + 32 + 4 + 100)  # where the last entry began
    cut = f"{path} ends inside the entry at byte {third}"
    assert said == [f"warning: {cut}; 2 results restored from it, the rest computed"]


def test_no_kept_file_restores_nothing_and_a_folder_that_cannot_be_written_is_said(
    settings: KafkaSettings, topics: Topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    assert restore_cache(settings, topics, "tiny", said.append) == 0 and said == []
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(ENV_RESULTS_CACHE, str(blocker / "results"))
    assert kept_folder() == blocker / "results"
    assert keep_cache(settings, topics, "tiny", said.append) == 0
    assert len(said) == 1 and said[0].startswith(f"warning: the results cache was not kept in {blocker}")
