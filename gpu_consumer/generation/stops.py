"""Where a completion ends, decided from its tokens so far: pure, on the post-process thread.

A sequence ends at the first of: an end-of-sequence id (the engine stops there itself), the
first occurrence of any stop string in its text (the text is cut before it; the engine is told
to stop the sequence, which may have decoded a token or two past it: those are dropped), or
max_tokens. A streamed sequence's text grows by the new tokens' piece only: decoded beside the
token before them (a tokenizer's pieces only make characters in context, and a character cut
between two tokens waits for the next), so each check costs the new tokens, not the completion
so far; the text is searched only where a new match could start. Once a stop string shows, the
completion is decoded whole, once, for the exact cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_consumer.generation.requests import SamplingParams

Decode = Callable[[Sequence[int]], str]
REPLACEMENT = "\ufffd"  # what a tokenizer decodes part of a character's bytes to


@dataclass(frozen=True)
class Ending:
    """A completion's end: the tokens kept, the text and the reason ("stop" or "length")."""

    tokens: int  # how many of the generated tokens the completion keeps
    text: str
    finish_reason: str


class StopWatch:
    """Follows one streamed sequence and says when a stop string has ended it."""

    def __init__(self, params: SamplingParams, decode: Decode) -> None:
        self._stops = params.stop
        self._decode = decode
        self._text = ""  # the text of the tokens read so far
        self._context = 0  # where the token before the unread ones starts: decoded with them
        self._read = 0  # tokens whose text is in _text
        self._searched = 0  # characters of text already searched for a stop string that starts there
        self._longest = max((len(s) for s in self._stops), default=0)

    def check(self, tokens: Sequence[int]) -> Ending | None:
        """The ending if a stop string occurs in the text of `tokens` (the tokens of the last check
        and those decoded since), else None."""
        if not self._stops or len(tokens) <= self._read:
            return None
        before = self._decode(tokens[self._context : self._read])
        after = self._decode(tokens[self._context :])
        if after.endswith(REPLACEMENT) or not after.startswith(before):
            return None  # a character still cut between tokens: read it with the next ones
        self._text += after[len(before) :]
        self._context, self._read = self._read, len(tokens)
        # a match may start up to len(stop) - 1 characters before the text searched so far ended
        start = max(0, self._searched - self._longest + 1)
        found = _first_stop(self._text, self._stops, start)
        self._searched = len(self._text)
        if found is None:
            return None
        text = self._decode(tokens)  # once: the whole completion's text decides the cut
        found = _first_stop(text, self._stops, 0)
        if found is None:
            return None
        cut, end = found
        return Ending(_tokens_to(tokens, end, self._decode), text[:cut], "stop")


def finished(tokens: Sequence[int], params: SamplingParams, eos_ids: frozenset[int], decode: Decode) -> Ending:
    """The ending of a sequence the engine finished: by an end-of-sequence id, or at max_tokens.
    A stop string inside it still ends it there (the last tokens may have completed one)."""
    text = decode(tokens)
    found = _first_stop(text, params.stop, 0) if params.stop else None
    if found is not None:
        cut, end = found
        return Ending(_tokens_to(tokens, end, decode), text[:cut], "stop")
    if tokens and tokens[-1] in eos_ids:
        return Ending(len(tokens), text, "stop")
    return Ending(len(tokens), text, "length" if len(tokens) >= params.max_tokens else "stop")


def _first_stop(text: str, stops: Sequence[str], start: int) -> tuple[int, int] | None:
    """(where the earliest stop string starts, where it ends), or None."""
    found = [(i, i + len(s)) for s, i in ((s, text.find(s, start)) for s in stops) if i >= 0]
    return min(found) if found else None


def _tokens_to(tokens: Sequence[int], end: int, decode: Decode) -> int:
    """The fewest leading tokens whose text reaches `end` characters: the token that completed the
    stop string is the last one the completion counts."""
    lo, hi = 1, len(tokens)
    while lo < hi:  # decoded text grows with the tokens, so the first prefix long enough is found by halving
        mid = (lo + hi) // 2
        if len(decode(tokens[:mid])) >= end:
            hi = mid
        else:
            lo = mid + 1
    return lo
