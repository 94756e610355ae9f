"""Where a completion ends (gpu_consumer/generation/stops.py), on a tokenizer whose tokens are
characters: token n is chr(n), so each expected cut is readable in the test."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_consumer.generation.requests import SamplingParams
from gpu_consumer.generation.stops import Ending, StopWatch, finished

EOS = 0


def decode(tokens: Sequence[int]) -> str:
    return "".join(chr(t) for t in tokens if t != EOS)  # the end-of-sequence id is special: never text


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_an_end_of_sequence_id_ends_with_stop_and_is_counted_but_not_text() -> None:
    params = SamplingParams(max_tokens=10)
    assert finished([*ids("hi"), EOS], params, frozenset({EOS}), decode) == Ending(3, "hi", "stop")


def test_max_tokens_ends_with_length() -> None:
    params = SamplingParams(max_tokens=4)
    assert finished(ids("abcd"), params, frozenset({EOS}), decode) == Ending(4, "abcd", "length")


def test_a_stop_string_cuts_the_text_before_it_and_counts_tokens_to_the_one_that_completed_it() -> None:
    params = SamplingParams(max_tokens=20, stop=("\n\n",))
    assert finished(ids("one\n\ntwo"), params, frozenset({EOS}), decode) == Ending(5, "one", "stop")


def test_the_earliest_of_several_stop_strings_wins() -> None:
    params = SamplingParams(max_tokens=20, stop=("END", "x"))
    assert finished(ids("abxcdEND"), params, frozenset({EOS}), decode) == Ending(3, "ab", "stop")


def test_a_stop_string_at_the_very_start_gives_empty_text() -> None:
    params = SamplingParams(max_tokens=20, stop=("A",))
    assert finished(ids("ABC"), params, frozenset({EOS}), decode) == Ending(1, "", "stop")


def test_the_watch_finds_a_stop_string_that_spans_the_tokens_of_two_checks() -> None:
    watch = StopWatch(SamplingParams(max_tokens=50, stop=("STOP",)), decode)
    assert watch.check(ids("abc ST")) is None
    assert watch.check(ids("abc STO")) is None
    assert watch.check(ids("abc STOP and more")) == Ending(8, "abc ", "stop")


def test_the_watch_without_stop_strings_never_ends_a_sequence() -> None:
    watch = StopWatch(SamplingParams(max_tokens=50), decode)
    assert watch.check(ids("STOP")) is None


def byte_decode(tokens: Sequence[int]) -> str:
    """A byte-level tokenizer's decode: token n is the byte n; a character cut short is U+FFFD."""
    return bytes(tokens).decode("utf-8", errors="replace")


def test_a_character_cut_between_tokens_is_read_whole_before_a_stop_string_is_looked_for() -> None:
    data = list("caf\u00e9! ok".encode())  # é is two bytes: tokens 3 and 4
    watch = StopWatch(SamplingParams(max_tokens=50, stop=("\u00e9!",)), byte_decode)
    assert watch.check(data[:4]) is None  # "caf" and half of é
    assert watch.check(data[:5]) is None  # é whole, no "!" yet
    assert watch.check(data[:6]) == Ending(6, "caf", "stop")


def test_each_check_decodes_the_new_tokens_and_one_before_them_not_the_completion_so_far() -> None:
    decoded = 0

    def counting(tokens: Sequence[int]) -> str:
        nonlocal decoded
        decoded += len(tokens)
        return decode(tokens)

    watch = StopWatch(SamplingParams(max_tokens=5000, stop=("never there",)), counting)
    stream = ids("abcdefghij" * 200)  # 2,000 tokens, streamed one at a time
    for n in range(1, len(stream) + 1):
        assert watch.check(stream[:n]) is None
    assert decoded <= 4 * len(stream)  # the whole completion decoded each time would be ~2 million
