"""Keeping a long run's lease alive while it works.

A lease short enough to free a crashed run's window quickly is shorter than
many healthy runs. The heartbeat renews it every third of the lease, so a
live run keeps its claim through two missed renewals and a dead one loses it
within one lease.
"""

from __future__ import annotations

import datetime
import logging
import threading

from django.db import DatabaseError, connections

from jobclaims.models import JobRun

logger = logging.getLogger("jobclaims")


class Heartbeat:
    """Renews a claim's lease from a thread with its own database connection.

    Use it as a context manager around the work. It stops renewing as soon as
    a renewal finds the claim taken over: it never keeps a lost claim alive.
    """

    def __init__(self, run: JobRun, lease: datetime.timedelta):
        self.run = run
        self.lease = lease
        self.lost = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"jobclaims heartbeat: {run}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopped.set()
        self._thread.join()

    def _beat(self) -> None:
        interval = self.lease.total_seconds() / 3
        try:
            while not self._stopped.wait(interval):
                if not self._renew():
                    self.lost.set()
                    return
        finally:
            # Django opens one connection per thread; this one is ours alone.
            connections.close_all()

    def _renew(self) -> bool:
        """Renew once; a database error is retried at the next beat."""
        try:
            return self.run.renew(self.lease)
        except DatabaseError as error:
            logger.warning(
                "Could not renew the lease of %s: %s",
                self.run,
                error,
                extra={"job": self.run.job, "window": self.run.window},
            )
            db = self.run._state.db
            assert db is not None, "a claimed run was saved, so it has a database"
            connections[db].close()
            return True
