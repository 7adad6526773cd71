"""Stop signals (SIGTERM, SIGINT) while a job runs and while its outcome is recorded.

While the job runs, a stop signal raises ``JobInterrupted`` in it, so its
claim is recorded failed and the next instance need not wait out the lease.
While the outcome is being recorded, a stop signal is held back until the
record is written, and raised then: raised in the middle of ``release()``, it
would leave the row running, or recorded, while the command said otherwise.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from django.db import connections

from jobclaims.exceptions import JobInterrupted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: The longest a signal this process sent its main thread takes to arrive.
ARRIVAL = 1.0


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
        with ExitStack() as statements:
            for connection in connections.all():
                statements.enter_context(connection.execute_wrapper(_held_through))
                statements.enter_context(_transaction_ends_whole(connection))
            yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _held_through(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` with stops held back, the first that came raised
    once it has returned: each connection's execute wrapper (``call``
    runs a statement of the job's main thread), and its COMMIT and ROLLBACK.

    Raised inside the driver's call, a stop could leave the connection in
    the middle of its exchange with the server (psycopg's wait for a
    result): the job's clean-up on the way out (a ``finally`` that writes)
    then fails or hangs on it, and a polite stop loses what a kill would
    have lost. A call that does not return is the stop's grace's to end
    (``SelfStop``, or the scheduler's SIGKILL).
    """
    with stops_held_back():
        return call(*args)


#: What Django sends the driver outside its execute wrappers, and whose
#: wait for the server a stop could cut as well (psycopg's wait for a
#: COMMIT's answer): a SIGTERM landing in one left the connection
#: mid-exchange, and the job's clean-up retried its next transaction on
#: it until the grace's kill.
_TRANSACTION_ENDS = ("commit", "rollback")


@contextmanager
def _transaction_ends_whole(connection: Any) -> Iterator[None]:
    """Hold stops back through the connection's COMMIT and ROLLBACK too.

    Nested (a job that calls another in its run), the inner block leaves
    the outer one's in place as it ends.
    """
    before = {name: vars(connection).get(name) for name in _TRANSACTION_ENDS}
    for name in _TRANSACTION_ENDS:
        setattr(connection, name, functools.partial(_held_through, getattr(connection, name)))
    try:
        yield
    finally:
        for name, previous in before.items():
            if previous is None:
                vars(connection).pop(name, None)
            else:
                setattr(connection, name, previous)


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


class HeldBackOnceReturned:
    """Stop signals held back from the moment a run's work returned until
    its outcome is recorded, for a run whose outcome is recorded on the way
    out of other context managers (``JobCommand``: its output's capture, its
    timeout, then ``holding()``'s release).

    Enter it outside ``holding()`` and call ``returned()`` as the block's
    last statement: a stop that comes after the work is done waits for the
    success to be recorded, and is then raised as ``JobInterrupted``, where
    it would have ended a finished run as interrupted, for another host to
    run again. Only the main thread receives signals, so elsewhere (and
    inside ``stops_held_back()``) this holds nothing.
    """

    def __init__(self) -> None:
        self._holding = False

    def returned(self) -> None:
        """Hold stops back from now on."""
        if threading.current_thread() is threading.main_thread() and not _stops.holding_back:
            _stops.holding_back, _stops.held, self._holding = True, None, True

    def __enter__(self) -> HeldBackOnceReturned:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc_info: object) -> None:
        if not self._holding:
            return
        self._holding = _stops.holding_back = False
        held, _stops.held = _stops.held, None
        if held is not None and kind is None:
            raise _stop_error(held)


class SelfStop:
    """How a job's process stops its own run: SIGTERM to its main thread, SIGKILL after a grace.

    For what only the process itself sees: its timeout when no scheduler
    started it, and a cancel its heartbeat reads. ``stop()`` is called from
    another thread of the process. It sends the main thread the SIGTERM a
    stop would, which raises its reason in the job, blocked in a call or
    not; a job that ignores SIGTERM (its own handler, ``SIG_IGN``, a C call
    that never returns) is still running when the grace ends, so
    ``last_words`` records its outcome and the process kills itself. Use it
    around the run: its end disarms it. Entered outside the main thread (a
    command called from a worker thread) it stops nothing: the process is
    not the run's alone.
    """

    def __init__(self, grace: float):
        self.grace = grace
        #: Why it stopped the run, once it did.
        self.reason: BaseException | None = None
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._stopping = False
        self._main = threading.main_thread()

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
            self.reason = _stops.instead = reason
            # To the main thread itself: sent to the process from this thread,
            # Linux may deliver the signal to this thread, and a main thread
            # blocked in a call (a sleep, a socket read) would not wake for it.
            assert self._main.ident is not None, "the main thread has started"
            signal.pthread_kill(self._main.ident, signal.SIGTERM)
        threading.Thread(
            target=self._kill_after_grace, args=(last_words,), name="jobclaims stop", daemon=True
        ).start()

    def settle(self) -> BaseException | None:
        """Send no stop from now on, as the run's work has ended; return the
        reason of the one sent, if one was.

        Called in the main thread. A SIGTERM sent and not yet handled is
        awaited here, a moment at most, so that it raises its reason now
        rather than later, while the outcome is recorded. One the job's own
        handler took raises nothing.
        """
        with self._lock:
            self._stopping = True
            reason = self.reason
        if reason is None or _stops.instead is not reason:
            return reason
        deadline = time.monotonic() + ARRIVAL
        while _stops.instead is reason and time.monotonic() < deadline:
            if signal.getsignal(signal.SIGTERM) is not _interrupt:
                break  # The job's own handler takes it.
            time.sleep(ARRIVAL / 100)  # _interrupt() raises the reason here.
        _stops.instead = None
        return reason

    def _kill_after_grace(self, last_words: Callable[[], object]) -> None:
        if self._ended.wait(self.grace):
            return
        try:
            last_words()
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
