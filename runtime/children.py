"""Child processes that die with their parent, even when the parent is SIGKILLed."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
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


# Set by jobs.launch.local.spawn_worker to its own PID: the worker exits once that process is gone.
ENV_STOP_WITH_PARENT = "NEARLINE_STOP_WITH_PARENT"


def stop_with_parent(grace_s: float = 10.0) -> None:
    """In a worker that spawn_worker started: once the process that started it has died, exit at
    most grace_s later, stopped or not.

    Its death sends the worker SIGTERM (die_with_parent), but a worker whose broker died with the
    same parent (`nearline run`'s memory-only one) cannot finish a graceful stop: faust retried its
    commit for good, and both workers outlived a run SIGKILLed mid-job. Nothing is lost by the hard
    exit: offsets are committed only for confirmed outputs, so what was in flight is redelivered."""
    parent = os.environ.pop(ENV_STOP_WITH_PARENT, "")
    if not parent.isdigit():
        return
    parent_pid = int(parent)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        time.sleep(grace_s)
        sys.stderr.write(
            f"the process that started this worker ({parent_pid}) is gone, and it did not stop "
            f"within {grace_s:g} s: exiting\n"
        )
        sys.stderr.flush()
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="stop-with-parent").start()
