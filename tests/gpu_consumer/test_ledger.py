"""The commit rule of the pipelined worker, without a broker: offsets move over confirmed prefixes only."""

from __future__ import annotations

from gpu_consumer.ledger import Ledger
from kafka_io.records import OutRecord


def outputs(n: int) -> list[OutRecord]:
    return [OutRecord("results", b"%d" % i) for i in range(n)]


def test_offsets_move_only_over_windows_whose_every_output_and_every_earlier_window_is_confirmed() -> None:
    ledger = Ledger()
    w1 = ledger.open({("t", 0): 10, ("t", 1): 5}, records=15)
    w2 = ledger.open({("t", 0): 20}, records=10)
    w3 = ledger.open({("t", 1): 9}, records=4)
    for w, n in [(w1, 3), (w2, 2), (w3, 1)]:
        ledger.sent(w, outputs(n))
        ledger.seal(w)

    ledger.confirm(w2, 2)
    ledger.confirm(w3)
    assert ledger.take_committable() == ({}, 0)  # w1 could still be lost: nothing after it moves

    ledger.confirm(w1, 2)
    assert ledger.take_committable() == ({}, 0)  # one of w1's three outputs is unconfirmed
    ledger.confirm(w1)
    assert ledger.take_committable() == ({("t", 0): 20, ("t", 1): 9}, 29)
    assert ledger.in_flight() == 0


def test_a_window_is_not_done_before_it_is_sealed_even_if_what_was_sent_is_confirmed() -> None:
    ledger = Ledger()
    w = ledger.open({("t", 0): 3}, records=3)
    ledger.sent(w, outputs(1))
    ledger.confirm(w)
    assert ledger.take_committable() == ({}, 0)  # more batches of the window may still come
    ledger.seal(w)
    assert ledger.take_committable() == ({("t", 0): 3}, 3)


def test_a_window_without_outputs_commits_once_sealed() -> None:
    ledger = Ledger()  # every record of a cancelled job: consumed, committed, never run
    w = ledger.open({("t", 2): 7}, records=7)
    ledger.seal(w)
    assert ledger.take_committable() == ({("t", 2): 7}, 7)


def test_after_a_failure_the_unconfirmed_windows_are_kept_with_their_outputs_until_resolved() -> None:
    ledger = Ledger()
    w1, w2 = ledger.open({("t", 0): 1}, 1), ledger.open({("t", 0): 2}, 1)
    for w in (w1, w2):
        ledger.sent(w, outputs(2))
        ledger.seal(w)
    ledger.confirm(w1, 2)
    ledger.confirm(w2)
    ledger.fail("delivery to results failed: Broker: Unknown producer id")
    assert ledger.failure is not None
    assert ledger.unconfirmed() == [w2] and len(w2.outputs) == 2  # both go again: readers drop the duplicate
    ledger.resolve([w2])
    assert ledger.failure is None
    assert ledger.take_committable() == ({("t", 0): 2}, 2)


def test_resolving_without_sealing_keeps_a_window_open_for_the_outputs_still_to_come() -> None:
    ledger = Ledger()
    w = ledger.open({("t", 0): 5}, 4)  # four prompts: two results sent, two still generating
    ledger.sent(w, outputs(2))
    ledger.fail("delivery to results failed")
    ledger.resolve(ledger.unconfirmed(), seal=False)
    assert ledger.take_committable() == ({}, 0)  # not a window's offsets before its last result
    ledger.sent(w, outputs(2))
    ledger.seal(w)
    ledger.confirm(w, 2)
    assert ledger.take_committable() == ({("t", 0): 5}, 4)


def test_a_sealed_window_unconfirmed_past_the_timeout_is_stalled() -> None:
    ledger = Ledger()
    w = ledger.open({("t", 0): 1}, 1)
    ledger.sent(w, outputs(1))
    assert not ledger.stalled(0.0)  # not sealed: the engine is still on it
    ledger.seal(w)
    assert ledger.stalled(-1.0) and not ledger.stalled(60.0)
