"""The schedules a scheduler runs: the code's, and the stored ones as they change.

The code's schedules are read once, as the scheduler starts: they change
with a deploy, which restarts it. The stored ones change at any time: at
each look the scheduler reads the one generation row
(``jobclaims.jobs.stored_schedules.generation()``) and, only when it
moved, the stored schedules again. An edit is in force on every
scheduler by its next look, a second or so (``POLL``) after it commits.

``--job`` names chosen at the start keep choosing: a stored schedule of a
chosen command, or with a chosen claim name, runs when it is added later.
"""

from __future__ import annotations

from collections.abc import Callable

from jobclaims.jobs.discovery import job_commands
from jobclaims.jobs.schedules import JobSchedule
from jobclaims.jobs.stored_schedules import generation, stored_jobs


class LiveSchedules:
    """The code's schedules, with the stored ones read again when they change."""

    def __init__(
        self,
        code_jobs: list[JobSchedule],
        chosen: list[str] | None,
        warn: Callable[[str], None],
    ):
        self.code_jobs = code_jobs
        #: The ``--job`` names; None: every schedule.
        self.chosen = chosen
        self.warn = warn
        #: The generation the stored schedules were last read at; None: not yet.
        self.read_at: int | None = None
        #: Each stored schedule's problem last said, so it is said once.
        self.said: dict[str, str] = {}
        #: Every schedule at the last read, chosen or not.
        self.every: list[JobSchedule] = []

    def read(self) -> list[JobSchedule]:
        """Every schedule to run now, the stored ones read afresh."""
        # Taken as read once the schedules are: a read that fails reads again.
        number = generation()
        stored, problems = stored_jobs(job_commands(), self.code_jobs)
        self.read_at = number
        for name, problem in problems.items():
            if self.said.get(name) != problem:
                self.warn(f"{problem}; it is left out until it is fixed")
        self.said = problems
        self.every = self.code_jobs + stored
        return [job for job in self.every if self._chosen(job)]

    def chosen_code_jobs(self) -> list[JobSchedule]:
        """The code's schedules to run, until the stored ones can be read."""
        return [job for job in self.code_jobs if self._chosen(job)]

    def changed(self) -> list[JobSchedule] | None:
        """Every schedule to run now, if the stored ones changed since the
        last read; None if not (one row read)."""
        if generation() == self.read_at:
            return None
        return self.read()

    def _chosen(self, job: JobSchedule) -> bool:
        return self.chosen is None or bool({job.command, job.job} & set(self.chosen))
