"""SIGTERM/SIGHUP stop `nearline run` and `submit --wait` the way Ctrl-C does (jobs/launch/signals.py)."""

from __future__ import annotations

import os
import signal

import pytest

from jobs.launch.signals import Terminated, terminate_like_interrupt
from tests.support.waiting import wait_until


def wait_for_signal() -> None:
    wait_until(lambda: False, 5, "the signal (Terminated raised inside the wait)", every_s=0.01)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_in_the_block_raises_terminated_and_the_old_handlers_come_back(sig: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(Terminated) as caught, terminate_like_interrupt():
        os.kill(os.getpid(), sig)
        wait_for_signal()
    assert caught.value.signum == sig and isinstance(caught.value, KeyboardInterrupt)
    assert signal.getsignal(sig) is before


def test_an_error_a_c_extension_raised_in_place_of_the_signal_is_still_the_stop() -> None:
    """confluent_kafka's AdminClient() turned a SIGHUP that landed inside it into a TypeError:
    the command printed a traceback and exited 1 instead of stopping like Ctrl-C (exit 129)."""
    with pytest.raises(Terminated) as caught, terminate_like_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            wait_for_signal()
        except Terminated:  # what the extension does: drop it, raise its own
            raise TypeError("expected configuration property name as type unicode string") from None
    assert caught.value.signum == signal.SIGHUP
    assert isinstance(caught.value.__cause__, TypeError)


def test_an_error_without_a_signal_is_left_as_it_is() -> None:
    with pytest.raises(ValueError, match="not a stop"), terminate_like_interrupt():
        raise ValueError("not a stop")
