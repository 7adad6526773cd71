"""The name a claim records for its holder, unique to one process."""

from __future__ import annotations

import os
import secrets
import socket

# Host and pid alone are not unique: every container's first process is pid 1,
# and pids are reused. A random id drawn per process settles it.
_PROCESS_ID = secrets.token_hex(4)


def _draw_again() -> None:
    """Give a forked child an id of its own.

    A Celery worker (or gunicorn) imports the app, then forks its pool: the
    children would all carry the parent's id, and a reused pid in one of
    them would make its owner indistinguishable from the parent's.
    """
    global _PROCESS_ID
    _PROCESS_ID = secrets.token_hex(4)


os.register_at_fork(after_in_child=_draw_again)


def process_owner() -> str:
    """Return ``host:pid:random-id`` for the current process."""
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{_PROCESS_ID}"
