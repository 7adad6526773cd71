"""A wait that a stop signal's handler can end, without a lock.

A Python signal handler runs in the main thread, between two of its
bytecodes: maybe while that thread holds the lock inside
``threading.Event.wait()``, which it takes back as each wait ends. An
``Event.set()`` in the handler then waits for that lock forever, and the
scheduler hangs, silent, on its stop. A handler wakes the scheduler through
``Wakeup`` instead: a byte written to a pipe, which takes no lock, and a
wait that is a ``select()`` on the pipe.
"""

from __future__ import annotations

import contextlib
import os
import select


class Wakeup:
    """A pipe the main thread waits on, and a handler writes to."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)

    def wake(self) -> None:
        """End the current wait, or the next: safe in a signal handler."""
        # A full pipe has a wake-up waiting already.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"!")

    def wait(self, timeout: float) -> None:
        """Wait until woken, or for ``timeout`` seconds."""
        # A handler that runs in the wait writes before select() resumes it.
        if select.select([self._read], [], [], max(timeout, 0))[0]:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._read, 4096):
                    pass

    def close(self) -> None:
        for fd in (self._read, self._write):
            os.close(fd)
