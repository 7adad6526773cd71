"""Stop signals (SIGTERM, SIGINT) while a job runs and while its outcome is recorded.

While the job runs, a stop signal raises ``JobInterrupted`` in it, so its
claim is recorded failed and the next instance need not wait out the lease.
While the outcome is being recorded, a stop signal is held back until the
record is written, and raised then: raised in the middle of ``release()``, it
would leave the row running, or recorded, while the command said otherwise.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from jobclaims.exceptions import JobInterrupted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Stops:
    """Whether stop signals are held back now, and the first that was."""

    holding_back = False
    held: int | None = None
    #: What the next stop signal raises instead of ``JobInterrupted``: set by
    #: a ``SelfStop`` just before it sends this process its SIGTERM.
    instead: BaseException | None = None


_stops = _Stops()


@contextmanager
def interrupting_on_stop_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGINT into ``JobInterrupted`` while the block runs.

    Signal handlers can only be set in the main thread; elsewhere (a command
    called from a worker thread) the process's own handling applies.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _interrupt) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(signum: int, frame: object) -> None:
    if _stops.holding_back:
        _stops.held = _stops.held or signum
        return
    raise _stop_error(signum)


def _stop_error(signum: int) -> BaseException:
    """What a stop signal raises: a ``SelfStop``'s reason, else ``JobInterrupted``."""
    instead, _stops.instead = _stops.instead, None
    return instead or JobInterrupted(signum)


@contextmanager
def stops_held_back() -> Iterator[None]:
    """Hold stop signals back while the block records an outcome.

    When the block ends without an error, the first signal held back is
    raised as ``JobInterrupted``, with the outcome recorded. Only the main
    thread receives signals, so elsewhere (and nested) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread() or _stops.holding_back:
        yield
        return
    _stops.holding_back, _stops.held = True, None
    try:
        yield
    finally:
        _stops.holding_back = False
    held, _stops.held = _stops.held, None
    if held is not None:
        raise _stop_error(held)


class SelfStop:
    """How a job's process stops its own run: SIGTERM to itself, SIGKILL after a grace.

    For what only the process itself sees: its timeout when no scheduler
    started it, and a cancel its heartbeat reads. ``stop()`` is called from
    another thread of the process. It sends the process the SIGTERM a stop
    would, which raises its reason in the job; a job that ignores SIGTERM
    (its own handler, ``SIG_IGN``, a C call that never returns) is still
    running when the grace ends, so ``last_words`` records its outcome and
    the process kills itself. Use it around the run: its end disarms it.
    Entered outside the main thread (a command called from a worker
    thread) it stops nothing: the process is not the run's alone.
    """

    def __init__(self, grace: float):
        self.grace = grace
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._stopping = False

    def __enter__(self) -> SelfStop:
        self._stopping = threading.current_thread() is not threading.main_thread()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._ended.set()

    def stop(self, reason: BaseException, last_words: Callable[[], object]) -> None:
        """Raise ``reason`` in the run's main thread by SIGTERM; kill after the grace."""
        with self._lock:
            if self._stopping or self._ended.is_set():
                return
            self._stopping = True
        _stops.instead = reason
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Thread(
            target=self._kill_after_grace, args=(last_words,), name="jobclaims stop", daemon=True
        ).start()

    def _kill_after_grace(self, last_words: Callable[[], object]) -> None:
        if self._ended.wait(self.grace):
            return
        try:
            last_words()
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
