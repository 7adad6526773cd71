"""Errors a job can catch. Importable before Django's apps are ready."""

from __future__ import annotations


class ClaimLost(Exception):
    """This run no longer holds its claim: another instance took it over.

    Raised by ``JobRun.ensure_held()`` and on entering ``JobRun.fenced()``.
    The work must stop; whatever it would write now could overwrite the new
    holder's.
    """


class JobInterrupted(BaseException):
    """The process was asked to stop (SIGTERM or SIGINT) while a job ran.

    A ``BaseException``, like ``KeyboardInterrupt``, so that a job's own
    ``except Exception`` does not swallow the request to stop.
    """

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by signal {signum}")
