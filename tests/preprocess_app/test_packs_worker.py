"""The preprocess worker on the real broker, fed raw.text packs and a foreign single record: tensor
packs come out in the lane they came in, each record once, and a poisoned record of a pack is a
dead letter of its own (#41)."""

from __future__ import annotations

from tokenizers import Tokenizer

from kafka_io.clients import make_producer
from kafka_io.produce import produce_all
from kafka_io.reading import TopicFollower
from kafka_io.records import job_record, pack_record, records_of
from kafka_io.topics import TopicSpec, ensure_topics
from schemas import DeadLetter, RawText, decode, encode
from schemas.packs import raw_text_pack_bytes, read_tensor_pack
from tests.support.pipeline import RunningPipeline
from tests.support.tiny_model import TinyModel
from tests.support.waiting import wait_until


def test_a_worker_turns_text_packs_into_tensor_packs_and_dead_letters_a_poisoned_record_alone(
    pipeline: RunningPipeline, tiny: TinyModel
) -> None:
    topics, settings = pipeline.topics, pipeline.settings
    tokenizer = Tokenizer.from_file(str(tiny.config.directory / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(tiny.config.max_length)
    live_raw, live_tensors = topics.lane(topics.raw_text, "live"), topics.lane(topics.tensors("tiny"), "live")
    ensure_topics(
        settings,
        [TopicSpec(t) for t in (topics.raw_text, live_raw, topics.dead_letters, topics.tensors("tiny"), live_tensors)],
    )
    pipeline.start("preprocess", "preprocess")

    texts = [f"record {i} of a packed job" for i in range(30)]
    texts[17] = "   "  # poisoned: whitespace only
    ids = [f"r{i}" for i in range(30)]
    packs = [
        pack_record(
            topics.raw_text,
            raw_text_pack_bytes("job-a", "tiny", 5, ids[s:e], list(range(s, e)), texts[s:e], [{"i": str(s)}] * (e - s)),
            "job-a",
            ids[s],
            e - s,
            5,
        )
        for s, e in ((0, 12), (12, 30))
    ]
    live = pack_record(
        live_raw, raw_text_pack_bytes("job-l", "tiny", 6, ["x0"], [0], ["a live one"], [{}]), "job-l", "x0", 1, 6
    )
    foreign = job_record(
        topics.raw_text, encode(RawText("job-f", "f0", 0, "tiny", "from elsewhere", 7, {"by": "them"})), "job-f", "f0"
    )
    produce_all(make_producer(settings), [*packs, live, foreign])

    seen: dict[str, list[int]] = {}
    where: dict[str, str] = {}
    dead: list[DeadLetter] = []
    with TopicFollower(settings, [topics.tensors("tiny"), live_tensors, topics.dead_letters]) as follower:

        def took() -> int:
            pipeline.check_workers()
            for m in follower.poll(0.5):
                if m.topic == topics.dead_letters:
                    dead.append(decode(m.value, DeadLetter))
                    continue
                pack = read_tensor_pack(m.value)
                assert records_of(m.headers) == len(pack)
                for i, record_id in enumerate(pack.record_ids):
                    key = f"{pack.job_id}/{record_id}"
                    assert key not in seen, f"{key} twice"
                    seen[key] = pack.array(i).tolist()
                    where[key] = m.topic
            return len(seen) + len(dead)

        wait_until(
            took, 120, lambda: f"32 records' outcomes: {sorted(seen)}, {dead}", until=lambda n: n >= 32, every_s=0
        )

    want = {f"job-a/r{i}": tokenizer.encode(t).ids for i, t in enumerate(texts) if i != 17}
    want["job-l/x0"] = tokenizer.encode("a live one").ids
    want["job-f/f0"] = tokenizer.encode("from elsewhere").ids
    assert seen == want
    assert where["job-l/x0"] == live_tensors
    assert {t for k, t in where.items() if k != "job-l/x0"} == {topics.tensors("tiny")}
    (letter,) = dead
    assert (letter.job_id, letter.record_id, letter.source_index, letter.model) == ("job-a", "r17", 5, "tiny")
    assert decode(letter.payload, RawText) == RawText("job-a", "r17", 17, "tiny", "   ", 5, {"i": "12"})
