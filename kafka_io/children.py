"""Child processes that die with their parent, even when the parent is SIGKILLed."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """A Popen preexec_fn asking Linux to send `sig` to the child when this process dies.

    None off Linux, and off the main thread: the kernel fires PDEATHSIG when the *thread* that
    forked ends, so a child spawned from a short-lived thread would be killed with it."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # resolved here: the child should only make the call
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sig)

    return preexec
