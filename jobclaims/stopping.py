"""Stop signals (SIGTERM, SIGINT) while a job runs and while its outcome is recorded.

While the job runs, a stop signal raises ``JobInterrupted`` in it, so its
claim is recorded failed and the next instance need not wait out the lease.
While the outcome is being recorded, a stop signal is held back until the
record is written, and raised then: raised in the middle of ``release()``, it
would leave the row running, or recorded, while the command said otherwise.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from jobclaims.exceptions import JobInterrupted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Stops:
    """Whether stop signals are held back now, and the first that was."""

    holding_back = False
    held: int | None = None


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
    raise JobInterrupted(signum)


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
        raise JobInterrupted(held)
