"""The name a claim records for its holder, unique to one process."""

from __future__ import annotations

import os
import secrets
import socket

# Host and pid alone are not unique: every container's first process is pid 1,
# and pids are reused. A random id drawn once per process settles it.
_PROCESS_ID = secrets.token_hex(4)


def process_owner() -> str:
    """Return ``host:pid:random-id`` for the current process."""
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{_PROCESS_ID}"
